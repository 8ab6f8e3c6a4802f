"""stpd's trio driver: ST through gsnd's ULP socket, the local API socket, IP->ULA
resolution (static table, then harpd)."""

from __future__ import annotations

import base64
import os
import socket
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field
from collections.abc import Callable
from functools import partial
from ipaddress import IPv4Address
from itertools import chain

import structlog
import trio

from daemons.runtime.oserrors import NO_FDS_ERRNOS, accept_ready, errno_name
from daemons.runtime.control import NOBODY, bind_unix, peer_cred, request as control_request, unlink_unix
from daemons.runtime.corerunner import CoreRunner, drain
from daemons.runtime.log import CounterLog
from daemons.runtime.metrics import Family, counter_families
from daemons.runtime.notify import StatusLine, sd_notify
from daemons.ulpclient import AsyncUlpClient, ulp_session
from daemons.wire.ula import format_ula

from . import api
from . import constants as K
from .constants import ETHERTYPE_ST, NO_ID, Function
from .core import (Accepted, Closed, Connected, OpDone, Params, ReadRequested, RegionReady, StatusReply, StCore,
                   Timers, TransferDone)
from .membuf import BufferGone, FdHandle, FileBuffer
from .ulpio import UlpReceiver, UlpSender

log = structlog.get_logger("stpd")
FUNCTIONS = {"inc": Function.INCREMENT, "dec": Function.DECREMENT, "clear": Function.CLEAR}


@dataclass
class StpdConfig:
    ulp_path: str = "/run/gsnd/gsn0.ulp"
    api_path: str = "/run/stpd/api.sock"
    harpd_socket: str = "/run/harpd/control.sock"
    peers: dict[IPv4Address, bytes] = field(default_factory=dict)
    params: Params = field(default_factory=Params)
    timers: Timers = field(default_factory=Timers)
    api_max_clients: int = K.API_MAX_CLIENTS
    api_first_request_timeout: float = K.API_FIRST_REQUEST_TIMEOUT
    api_idle_timeout: float = K.API_IDLE_TIMEOUT


class ApiError(Exception):
    pass


@dataclass(eq=False)
class ApiClient:
    """One API connection: the identity that owns connections and listened ports
    (``constants.API_ADMIN_UID`` explains who may see or end the others')."""

    conn: socket.socket
    pid: int = -1
    uid: int = -1
    ports: set = field(default_factory=set)  # ULP ports it listens on
    vcs: set = field(default_factory=set)  # connections it made or accepted (and those waiting to be)

    @classmethod
    def of(cls, conn: socket.socket) -> ApiClient:
        try:
            pid, uid, _gid = peer_cred(conn)
        except OSError:
            pid, uid, _gid = NOBODY
        return cls(conn, pid, uid)

    @property
    def admin(self) -> bool:
        return self.uid == K.API_ADMIN_UID


def claim_api_path(path: str) -> socket.socket:
    """Bind and listen on the API socket at ``path``; a live stpd there is refused
    (``bind_unix``: only a stale socket is removed, never a file that is not one)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    lsock = bind_unix(path, socket.SOCK_SEQPACKET, 0o660)
    try:
        lsock.listen(64)
    except OSError:
        lsock.close()
        raise
    lsock.setblocking(False)
    return lsock


class Stpd:
    def __init__(self, cfg: StpdConfig) -> None:
        self.cfg = cfg
        self.core = StCore(trio.current_time(), params=cfg.params, timers=cfg.timers, defer_file_reads=True)
        self.sender = UlpSender(self.core, on_failure=lambda: self.runner.step())
        self.receiver = UlpReceiver(self._receive)
        self.runner = CoreRunner(self.core, drain(self.core, self.sender.send, self._events))
        self.client: AsyncUlpClient | None = None
        self.ula: bytes | None = None
        self.pending: dict[tuple, trio.Event] = {}  # keys somebody waits for
        self.results: dict[tuple, object] = {}
        self.accepted: dict[int, deque] = defaultdict(deque)
        self.owner: dict[int, ApiClient | None] = {}  # vc -> the client it belongs to (None: orphaned)
        self.port_owner: dict[int, ApiClient] = {}  # listened ULP port -> the client listening
        self.accept_wake: dict[int, trio.Event] = {}
        self.read_requests: dict[int, deque] = {}  # vc -> the peer's RTRs waiting for a `serve`
        self.vc_wake: dict[int, trio.Event] = {}  # vc -> set when an RTR arrives or the VC closes
        self.api_counters: dict[str, int] = defaultdict(int)
        self.api_clients = 0
        self.shared: dict[tuple[int, int], FdHandle] = {}  # exposed memory by (device, inode)
        self.drops = CounterLog(log)
        self.status_line = StatusLine()
        self.transfers: Counter[tuple[bool, bool]] = Counter()  # (incoming, ok) -> transfers ended

    # --- core glue ---------------------------------------------------------------------------
    def _expect(self, key: tuple) -> None:
        self.pending[key] = trio.Event()

    def _signal(self, key: tuple, value) -> None:
        ev = self.pending.get(key)
        if ev is not None and not ev.is_set():  # nobody waits: dropped, never stored
            self.results[key] = value
            ev.set()

    @staticmethod
    def _owner(buf):
        return buf.obj if isinstance(buf, memoryview) else buf

    def _buf_key(self, vid: int, buf) -> tuple:
        return ("buf", vid, id(self._owner(buf)))

    def _wake_vc(self, vid: int) -> None:
        ev = self.vc_wake.pop(vid, None)
        if ev is not None:
            ev.set()

    def _events(self, events: list) -> None:
        orphans = False
        for ev in events:
            if isinstance(ev, Connected):
                self._signal(("conn", ev.vc), None)
            elif isinstance(ev, Closed):
                self._signal(("conn", ev.vc), ev.reason)
                log.info("st.closed", vc=ev.vc, reason=ev.reason)
                self.read_requests.pop(ev.vc, None)
                owner = self.owner.pop(ev.vc, None)
                if owner is not None:
                    owner.vcs.discard(ev.vc)
                self._wake_vc(ev.vc)
                for key in [k for k in self.pending if k[0] in ("buf", "op", "xfer", "status") and k[1] == ev.vc]:
                    self._signal(key, Closed(ev.vc, ev.reason))
                self._sweep_shared()
            elif isinstance(ev, Accepted):
                owner = self.port_owner.get(ev.uport)
                if owner is None:  # nobody listens any more (never expected: listens are owned)
                    self.api_counters["accepted_without_listener"] += 1
                    self.core.close(ev.vc, trio.current_time())
                    orphans = True
                    continue
                self.owner[ev.vc] = owner  # only the client listening on the port may accept it
                owner.vcs.add(ev.vc)
                self.accepted[ev.uport].append((ev.vc, ev.peer))
                wake = self.accept_wake.pop(ev.uport, None)
                if wake is not None:
                    wake.set()
            elif isinstance(ev, TransferDone):
                self.transfers[(bool(ev.incoming), bool(ev.ok))] += 1
                if not ev.ok:
                    log.warning("st.transfer_failed", vc=ev.vc, xid=ev.xid, incoming=ev.incoming, reason=ev.reason)
                if ev.incoming and ev.buf is not None:
                    self._signal(self._buf_key(ev.vc, ev.buf), ev)
                else:
                    self._signal(("xfer", ev.vc, ev.xid), ev)
            elif isinstance(ev, (OpDone, RegionReady)):
                self._signal(("op", ev.vc, ev.gid), ev)
            elif isinstance(ev, StatusReply):
                self._signal(("status", ev.vc), ev)
            elif isinstance(ev, ReadRequested):
                q = self.read_requests.setdefault(ev.vc, deque())
                if len(q) >= K.MAX_READ_REQUESTS:
                    q.popleft()  # the oldest reader times out
                    self.api_counters["read_requests_dropped"] += 1
                q.append(ev)
                self._wake_vc(ev.vc)
        if orphans:
            self.runner.step()

    def _receive(self, ula: bytes, packet: memoryview, now: float) -> None:
        self.core.receive(ula, packet, now)

    def _frame(self, frame, now: float) -> None:  # what UlpReceiver.drain leaves: none of ST's
        self._receive(frame.ula, frame.payload, now)

    def _ulp_error(self, frame) -> None:
        self.core.counters["ulp_error"] += 1
        log.warning("ulp.error", vc=frame.vc, text=bytes(frame.payload[:200]).decode(errors="replace"))

    def _set_client(self, client) -> None:
        self.client = client
        self.sender.attach(client.sock if client is not None else None)
        log.info("ulp.connected" if client else "ulp.lost", path=self.cfg.ulp_path)

    def _set_ula(self, ula: bytes | None) -> None:
        self.ula = ula

    async def _wait(self, key: tuple, timeout: float | None = None, progress=None):
        """Wait for the core's answer for ``key`` (registered with ``_expect`` before the
        core call); ``progress()`` is called now and then."""
        ev = self.pending.setdefault(key, trio.Event())
        try:
            with trio.move_on_after(timeout if timeout is not None else float("inf")) as scope:
                while not ev.is_set():
                    with trio.move_on_after(K.API_PROGRESS_EVERY):
                        await ev.wait()
                    if progress is not None and not ev.is_set():
                        progress()
            if scope.cancelled_caught:
                raise ApiError("timed out")
            value = self.results.pop(key)
        finally:
            self.pending.pop(key, None)
            self.results.pop(key, None)
        if isinstance(value, Closed):
            raise ApiError(f"connection {value.vc} closed: {value.reason}")
        return value

    def _sweep_shared(self) -> None:
        """Close the descriptor of every exposed memory object no VC uses any more."""
        live = {id(b.obj) for vc in self.core.vcs.values()
                for b in chain(vc.exposed, (r.buf for r in vc.regions.values())) if isinstance(b, FileBuffer)}
        for key, handle in list(self.shared.items()):
            if id(handle) not in live:
                handle.close()
                del self.shared[key]

    # --- resolution --------------------------------------------------------------------------
    async def resolve(self, host: str) -> bytes:
        try:
            ip = IPv4Address(host)
        except ValueError:
            raise ApiError(f"{host!r} is not an IPv4 address") from None
        if ip in self.cfg.peers:
            return self.cfg.peers[ip]
        try:
            reply = await trio.to_thread.run_sync(control_request, self.cfg.harpd_socket,
                                                  {"cmd": "resolve", "ip": str(ip)}, 8.0)
        except OSError:
            raise ApiError(f"{ip}: not in the static peer table and harpd is not reachable") from None
        if not isinstance(reply, dict) or not reply.get("ok"):
            raise ApiError(str(reply.get("error", f"{ip}: unresolved"))[:200] if isinstance(reply, dict)
                           else f"{ip}: unresolved")
        try:
            return bytes.fromhex(str(reply["ula"]).replace(":", ""))
        except (KeyError, ValueError):
            raise ApiError(f"{ip}: harpd answered no usable ULA") from None

    # --- API socket ----------------------------------------------------------------------------
    async def serve_api(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        lsock = claim_api_path(self.cfg.api_path)
        task_status.started()
        try:
            async with trio.open_nursery() as nursery:
                while True:
                    conn = await accept_ready(lsock)
                    if isinstance(conn, OSError):
                        self.api_counters[f"accept_failed_{errno_name(conn).lower()}"] += 1
                        if conn.errno in NO_FDS_ERRNOS:  # out of descriptors/memory: back off, never exit
                            await trio.sleep(K.API_ACCEPT_BACKOFF)
                        continue
                    if self.api_clients >= self.cfg.api_max_clients:
                        self.api_counters["refused_too_many_clients"] += 1
                        try:
                            conn.setblocking(False)
                            api.send_msg(conn, {"ok": False, "error": f"too many API clients "
                                                                      f"({self.cfg.api_max_clients}); try later"})
                        except OSError:
                            pass
                        conn.close()
                        continue
                    conn.setblocking(False)
                    self.api_clients += 1
                    nursery.start_soon(self._api_conn, ApiClient.of(conn))
        finally:
            unlink_unix(self.cfg.api_path, lsock)

    async def _api_conn(self, client: ApiClient) -> None:
        try:
            await self._api_loop(client)
        except Exception as exc:  # no client may end stpd: one line, counted
            self.api_counters["internal_error"] += 1
            log.error("api.internal_error", error=f"{type(exc).__name__}: {exc}"[:200])
        finally:
            self.api_clients -= 1
            client.conn.close()
            self._forget(client)

    def _forget(self, client: ApiClient) -> None:
        """A client hung up: its ports are withdrawn.  Its connections stay up (the peer
        may still be using what it exposed) but belong to nobody: no other client may
        use them; the peer's END/close or root's `close` ends them."""
        for uport in client.ports:
            if self.port_owner.get(uport) is client:
                del self.port_owner[uport]
                self.core.unlisten(uport)
                self.accepted.pop(uport, None)  # not yet accepted: orphaned below with the rest
        for vid in sorted(client.vcs):
            if self.owner.get(vid) is client:
                self.owner[vid] = None  # orphaned: nobody's (root may close it)
                self.api_counters["orphaned_client_gone"] += 1
        client.ports.clear()
        client.vcs.clear()
        self.runner.step()

    async def _reply(self, conn: socket.socket, msg: dict) -> bool:
        data = api.encode(msg)
        if len(data) > api.MAX_MSG:  # e.g. the status of very many connections
            self.api_counters["answer_too_large"] += 1
            data = api.encode({"ok": False, "error": f"answer larger than {api.MAX_MSG} bytes; ask for less"})
        try:
            conn.send(data)
            return True
        except BlockingIOError:
            pass
        except OSError:
            return False
        with trio.move_on_after(K.API_REPLY_TIMEOUT):  # a client slow to read its answers
            while True:
                await trio.lowlevel.wait_writable(conn)
                try:
                    conn.send(data)
                    return True
                except BlockingIOError:
                    continue
                except OSError:
                    return False
        self.api_counters["dropped_not_reading"] += 1
        return False

    async def _api_loop(self, client: ApiClient) -> None:
        conn = client.conn
        first = True
        while True:
            timeout = self.cfg.api_first_request_timeout if first else self.cfg.api_idle_timeout
            with trio.move_on_after(timeout) as idle:
                await trio.lowlevel.wait_readable(conn)
            if idle.cancelled_caught:
                self.api_counters["closed_silent" if first else "closed_idle"] += 1
                await self._reply(conn, {"ok": False, "error": f"no request for {timeout:g} s: closing"})
                return
            try:
                data, fds, flags = api.recv_raw(conn)
            except BlockingIOError:
                continue
            except OSError:
                return
            if not data:
                for fd in fds:
                    os.close(fd)
                return
            first = False
            op = "?"
            try:
                if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                    raise api.RequestError(f"request larger than {api.MAX_MSG} bytes or {api.MAX_FDS} descriptors")
                msg = api.decode(data)
                op = msg["op"]
                if op in K.API_UNBOUNDED_OPS:
                    reply = await self._guarded(msg, fds, client)
                else:  # bounded by a core or API timeout: no hang-up watch needed
                    reply = await self._api(msg, fds, client)
                reply["ok"] = True
            except api.RequestError as exc:
                self.api_counters["refused_bad_request"] += 1
                reply = {"ok": False, "error": f"bad request: {exc}"}
            except (ApiError, BufferGone) as exc:
                reply = {"ok": False, "error": f"{op}: {exc}" if isinstance(exc, BufferGone) else str(exc)}
            except OSError as exc:  # e.g. a descriptor that cannot be read, written or resized
                reply = {"ok": False, "error": f"{op}: {exc.strerror or exc} (the file must be open read/write "
                                               f"for recv/read/expose, readable for send/serve)"}
            except Exception as exc:  # a bug: this request fails, stpd and the client carry on
                self.api_counters["internal_error"] += 1
                log.error("api.internal_error", op=op, error=f"{type(exc).__name__}: {exc}"[:200])
                reply = {"ok": False, "error": f"internal error ({type(exc).__name__})"}
            finally:
                for fd in fds:  # whatever a handler did not take over
                    os.close(fd)
            self.api_counters[f"{op}_{'ok' if reply['ok'] else 'failed'}"] += 1
            if not await self._reply(conn, reply):
                return

    async def _guarded(self, msg: dict, fds: list[int], client: ApiClient) -> dict:
        """Run one request; if the client hangs up meanwhile, the request is cancelled
        (its transfer ended, its buffers released)."""
        result: dict = {}
        conn = client.conn

        async def watch(scope: trio.CancelScope) -> None:
            await trio.lowlevel.wait_readable(conn)
            try:
                peek = conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            except OSError:
                peek = b""
            if not peek:
                scope.cancel()

        async with trio.open_nursery() as nursery:
            async def run() -> None:
                try:
                    result["reply"] = await self._api(msg, fds, client)
                except Exception as exc:  # re-raised below, not as an exception group
                    result["error"] = exc
                finally:
                    nursery.cancel_scope.cancel()

            nursery.start_soon(watch, nursery.cancel_scope)
            nursery.start_soon(run)
        if "error" in result:
            raise result["error"]
        if "reply" not in result:
            self.api_counters["cancelled_client_gone"] += 1
            raise ApiError("client went away")
        return result["reply"]

    def _progress(self, conn: socket.socket, xid: int, count: Callable[[], int]) -> Callable[[], None]:
        def progress() -> None:
            try:
                api.send_msg(conn, {"progress": count(), "xid": xid})
            except OSError:  # a client that does not read its progress just misses some
                pass
        return progress

    def _vc(self, msg: dict, client: ApiClient) -> int:
        """The request's connection, if it is the client's own (an administrator may
        also name another's for ``API_ADMIN_OPS``)."""
        vid = msg["vc"]
        if vid not in self.core.vcs:
            raise ApiError(f"no connection {vid}")
        if self.owner.get(vid) is not client and not (client.admin and msg["op"] in K.API_ADMIN_OPS):
            self.api_counters["refused_not_owner"] += 1
            raise ApiError(f"{msg['op']}: connection {vid} belongs to another client")
        return vid

    def _claim_port(self, op: str, uport: int, client: ApiClient) -> None:
        """``listen``/``accept``: the port becomes the client's until it hangs up; a port
        another client listens on is refused."""
        owner = self.port_owner.get(uport)
        if owner is client:
            return
        if owner is not None:
            self.api_counters["refused_not_owner"] += 1
            raise ApiError(f"{op}: port {uport} belongs to another client")
        if len(self.core.listeners) >= K.MAX_LISTENERS:
            self.api_counters["refused_listeners"] += 1
            raise ApiError(f"{op}: {K.MAX_LISTENERS} ports are listened on already")
        self.port_owner[uport] = client
        client.ports.add(uport)

    @staticmethod
    def _take(fds: list[int]) -> FdHandle:
        """Take ownership of the request's first descriptor (the others are closed)."""
        return FdHandle(fds.pop(0))

    async def _api(self, msg: dict, fds: list[int], client: ApiClient) -> dict:
        op = msg["op"]
        now = trio.current_time()
        core = self.core
        if fds and op not in ("send", "recv", "read", "serve", "expose"):
            raise ApiError(f"{op} takes no file descriptor")
        if op == "listen":
            self._claim_port(op, msg["uport"], client)
            core.listen(msg["uport"])
            return {}
        if op == "accept":
            uport = msg["uport"]
            self._claim_port(op, uport, client)
            core.listen(uport)
            while not self.accepted[uport]:
                await self.accept_wake.setdefault(uport, trio.Event()).wait()
            vid, peer = self.accepted[uport].popleft()
            return {"vc": vid, "peer": format_ula(peer)}
        if op == "connect":
            if len(core.vcs) >= K.MAX_CONNECT_VCS:
                self.api_counters["refused_connect_vcs"] += 1
                raise ApiError(f"connect: {K.MAX_CONNECT_VCS} connections exist already")
            ula = await self.resolve(msg["host"])
            vid = core.connect(ula, msg["uport"], trio.current_time())
            self.owner[vid] = client
            client.vcs.add(vid)
            self._expect(("conn", vid))
            self.runner.step()
            reason = await self._wait(("conn", vid))
            if reason is not None:
                raise ApiError(f"connect to {msg['host']}: {reason}")
            return {"vc": vid}
        if op == "close":
            core.close(self._vc(msg, client), now)
            self.runner.step()
            return {}
        if op == "status":
            if "vc" in msg:
                vid = self._vc(msg, client)
                if not core.status(vid, now):
                    raise ApiError(f"connection {vid} is not open")
                self._expect(("status", vid))
                self.runner.step()
                st = await self._wait(("status", vid), timeout=5.0)
                return {"slots": st.slots}
            if client.admin:  # every client's objects
                vcs, ports = core.status_table(), core.listeners
            else:  # the caller's own
                vcs = [v for v in core.status_table() if self.owner.get(v["vc"]) is client]
                ports = client.ports
            return {"vcs": vcs, "listeners": sorted(ports), "scope": "all" if client.admin else "own",
                    "counters": dict(core.counters), "api": dict(self.api_counters),
                    "api_clients": self.api_clients, "exposed_objects": len(self.shared),
                    "ula": format_ula(self.ula) if self.ula else None}
        if op in ("send", "serve"):
            return await self._send(msg, fds, client)
        if op in ("recv", "read"):
            return await self._recv(msg, fds, client)
        if op == "abort":
            vid = self._vc(msg, client)
            vc = core.vcs[vid]
            if msg["xid"] not in vc.tx and msg["xid"] not in vc.rx:
                raise ApiError(f"no transfer {msg['xid']} on connection {vid}")
            core.end(vid, msg["xid"], now)
            self.runner.step()
            return {}
        if op == "release":
            vid = self._vc(msg, client)
            if msg["rid"] not in core.vcs[vid].remote_regions:
                raise ApiError(f"no region {msg['rid']} of the peer on connection {vid}")
            core.end(vid, msg["rid"], now)
            self.runner.step()
            return {}
        if op == "expose":
            return self._expose(msg, fds, client)
        if op == "region":
            vid = self._vc(msg, client)
            gid = core.request_region(vid, msg["size"], now)
            if gid is None:
                raise ApiError(f"connection {vid} is not open")
            self._expect(("op", vid, gid))
            self.runner.step()
            r = await self._wait(("op", vid, gid), timeout=30.0)
            if not r.ok:
                raise ApiError(f"region refused: {r.reason}")
            return {"rid": r.rid, "size": r.size}
        if op in ("put", "get", "fetchop"):
            vid = self._vc(msg, client)
            rid, off = msg["rid"], msg["offset"]
            if op == "put":
                gid = core.put(vid, rid, off, msg["data"], now)
            elif op == "get":
                gid = core.get(vid, rid, off, msg["length"], now)
            else:
                gid = core.fetchop(vid, rid, off, FUNCTIONS[msg.get("function", "inc")], now)
            if gid is None:
                raise ApiError(f"{op}: unknown region or out of bounds")
            self._expect(("op", vid, gid))
            self.runner.step()
            r = await self._wait(("op", vid, gid), timeout=30.0)
            if not r.ok:
                raise ApiError(f"{op} failed: {r.reason}")
            return {"value": r.value} if op == "fetchop" else (
                {"data": base64.b64encode(r.data).decode()} if op == "get" else {})
        raise ApiError(f"unknown op {op!r}")  # unreachable: the schema knows every op

    def _expose(self, msg: dict, fds: list[int], client: ApiClient) -> dict:
        vid = self._vc(msg, client)
        if not fds:
            raise ApiError("expose needs a file descriptor (memfd or shared memory)")
        size = msg["size"]
        st = os.fstat(fds[0])
        if st.st_size < size:
            raise ApiError(f"expose: the memory object has {st.st_size} bytes, fewer than size {size}")
        if len(self.core.vcs[vid].exposed) >= K.MAX_EXPOSED_PER_VC:
            self.api_counters["refused_expose_per_vc"] += 1
            raise ApiError(f"expose: {K.MAX_EXPOSED_PER_VC} exposures already wait for the peer's RMR")
        key = (st.st_dev, st.st_ino)
        handle = self.shared.get(key)
        if handle is None:  # one handle per memory object: FETCHOP locks are per word
            if len(self.shared) >= K.MAX_SHARED_OBJECTS:
                self._sweep_shared()
            if len(self.shared) >= K.MAX_SHARED_OBJECTS:
                self.api_counters["refused_expose_objects"] += 1
                raise ApiError(f"expose: {K.MAX_SHARED_OBJECTS} memory objects exposed already")
            handle = self.shared[key] = FdHandle(fds.pop(0), key)
        self.core.expose(vid, FileBuffer(handle, size))
        return {}

    def _abandon(self, vid: int, buf) -> None:
        """The request that owns ``buf`` is over: withdraw it from the core (a transfer
        still running is ended, an unused receive unposted)."""
        vc = self.core.vcs.get(vid)
        if vc is None:
            return
        self.core.unpost(vid, self._owner(buf))
        for x in list(chain(vc.tx.values(), vc.rx.values())):
            if self._owner(x.buf) is self._owner(buf):
                self.core.end(vid, x.xid, trio.current_time())
        self.runner.step()

    def _source(self, msg: dict, fds: list[int]) -> tuple[bytes | memoryview | FileBuffer, FdHandle | None]:
        """What a send/serve sends: the passed file's first ``length`` bytes, or inline data."""
        if fds and "data" in msg:
            raise ApiError(f"{msg['op']}: a file descriptor or inline data, not both")
        if fds:
            handle = self._take(fds)
            try:
                size = handle.size()
                length = msg.get("length", size)
                if size < length:
                    raise ApiError(f"{msg['op']}: the file has {size} bytes, fewer than length {length}")
            except BaseException:
                handle.close()
                raise
            return FileBuffer(handle, length), handle
        if "data" in msg:
            return msg["data"], None
        raise ApiError(f"{msg['op']} needs a file descriptor or inline data")

    async def _send(self, msg: dict, fds: list[int], client: ApiClient) -> dict:
        conn = client.conn
        vid = self._vc(msg, client)
        buf, handle = self._source(msg, fds)
        try:
            reply_to, asked = NO_ID, None
            if msg["op"] == "serve":  # wait for the peer's RTR, answer it with (at most) its length
                while not self.read_requests.get(vid):
                    if vid not in self.core.vcs:
                        raise ApiError(f"connection {vid} closed")
                    await self.vc_wake.setdefault(vid, trio.Event()).wait()
                req = self.read_requests[vid].popleft()
                reply_to, asked = req.rid, req.t_len
                n = min(asked, len(buf))
                buf = FileBuffer(handle, n) if handle is not None else memoryview(buf)[:n]  # type: ignore[arg-type]
            xid = self.core.send(vid, buf, trio.current_time(), dc=msg.get("dc"), reply_to=reply_to)
            if xid is None:
                raise ApiError("cannot send now (connection not open or too many transfers)")
            key = ("xfer", vid, xid)
            self._expect(key)
            self.runner.step()
            vc = self.core.vcs[vid]
            try:
                done = await self._wait(key, progress=self._progress(
                    conn, xid, lambda: x.done_bytes if (x := vc.tx.get(xid)) is not None else 0))
            finally:
                self._abandon(vid, buf)
            if not done.ok:
                raise ApiError(f"transfer failed: {done.reason}")
            reply = {"bytes": done.nbytes, "xid": xid}
            if asked is not None:
                reply["asked"] = asked
            return reply
        finally:
            if handle is not None:
                handle.close()

    async def _recv(self, msg: dict, fds: list[int], client: ApiClient) -> dict:
        conn = client.conn
        vid = self._vc(msg, client)
        reading = msg["op"] == "read"
        size = msg["length"] if reading else msg["max"]
        handle = None
        if fds:
            handle = self._take(fds)
        elif size > K.INLINE_MAX:
            raise ApiError(f"inline {msg['op']} is at most {K.INLINE_MAX} bytes; pass a file descriptor")
        try:
            buf: FileBuffer | bytearray
            if handle is not None:
                os.ftruncate(handle.fd, size)
                buf = FileBuffer(handle, size)
            else:
                buf = bytearray(size)
            key = self._buf_key(vid, buf)
            now = trio.current_time()
            if reading:
                xid = self.core.read(vid, buf, size, now)
                if xid is None:
                    raise ApiError("cannot read now (connection not open)")
            else:
                xid = None
                if not self.core.post_receive(vid, buf, now):
                    raise ApiError("cannot receive now (connection not open)")
            self._expect(key)  # nothing reaches the driver before runner.step()
            self.runner.step()
            vc = self.core.vcs[vid]

            def count() -> int:
                return sum(x.done_bytes for x in vc.rx.values() if self._owner(x.buf) is buf)

            try:
                done = await self._wait(key, progress=self._progress(conn, xid or 0, count))
            finally:
                self.pending.pop(key, None)
                self._abandon(vid, buf)
            if not done.ok:
                raise ApiError(f"transfer failed: {done.reason}")
            if handle is not None:
                os.ftruncate(handle.fd, done.nbytes)
                return {"bytes": done.nbytes, "xid": done.xid}
            return {"bytes": done.nbytes, "xid": done.xid,
                    "data": base64.b64encode(bytes(buf[: done.nbytes])).decode()}
        finally:
            if handle is not None:
                handle.close()

    # --- run ---------------------------------------------------------------------------------
    def metrics(self) -> list[Family]:
        vcs = self.core.vcs.values()
        active = Family("gsn_st_transfers_active", "gauge", "ST transfers in progress, by direction.")
        active.add(sum(len(v.tx) for v in vcs), direction="send").add(sum(len(v.rx) for v in vcs), direction="receive")
        done = Family("gsn_st_transfers_total", "counter", "ST transfers ended, by direction and result.")
        for (incoming, ok), n in sorted(self.transfers.items()):
            done.add(n, direction="receive" if incoming else "send", result="ok" if ok else "failed")
        return [Family("gsn_st_connections", "gauge", "ST connections (VCs) open.").add(len(self.core.vcs)),
                Family("gsn_st_api_clients", "gauge", "Clients on the API socket.").add(self.api_clients),
                active, done, *counter_families(self.core.counters, "st"),
                *counter_families(self.api_counters, "api")]

    def _notify_status(self) -> None:
        ula = format_ula(self.ula) if self.ula else "none"
        self.status_line.update(f"ULP {'connected' if self.client is not None else 'not connected'}, ULA {ula}, "
                                f"{len(self.core.vcs)} connections, {self.api_clients} API clients")

    async def _stats(self) -> None:
        while True:
            await trio.sleep(1.0)
            self.drops.update("st", self.core.counters, trio.current_time())
            self._sweep_shared()
            self._notify_status()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.serve_api)
            nursery.start_soon(partial(
                ulp_session, self.cfg.ulp_path, ETHERTYPE_ST, on_client=self._set_client, on_status=self._set_ula,
                on_frame=self._frame, after_burst=self.runner.step, on_error=self._ulp_error,
                drain=self.receiver.drain))
            nursery.start_soon(self.sender.run)
            nursery.start_soon(self.runner.run)
            nursery.start_soon(self._stats)
            log.info("stpd.started", api=self.cfg.api_path, ulp=self.cfg.ulp_path)
            sd_notify("READY=1")
            self._notify_status()
            task_status.started()
