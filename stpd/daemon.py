"""stpd's trio driver: ST through gsnd's ULP socket, the local API socket, IP->ULA
resolution (static table, then harpd)."""

from __future__ import annotations

import base64
import mmap
import os
import socket
from collections import defaultdict, deque
from dataclasses import dataclass, field
from functools import partial
from ipaddress import IPv4Address

import structlog
import trio

from daemons.runtime.control import request as control_request
from daemons.runtime.corerunner import CoreRunner
from daemons.runtime.log import CounterLog
from daemons.runtime.notify import sd_notify
from daemons.ulpclient import AsyncUlpClient, ulp_session
from daemons.wire.ula import format_ula

from . import api
from .constants import ETHERTYPE_ST, Function
from .core import (Accepted, Closed, Connected, OpDone, Params, RegionReady, StatusReply, StCore, Timers,
                   TransferDone)

log = structlog.get_logger("stpd")
FUNCTIONS = {"inc": Function.INCREMENT, "dec": Function.DECREMENT, "clear": Function.CLEAR}
PROGRESS_EVERY = 0.25
INLINE_MAX = 65536


@dataclass
class StpdConfig:
    ulp_path: str = "/run/gsnd/gsn0.ulp"
    api_path: str = "/run/stpd/api.sock"
    harpd_socket: str = "/run/harpd/control.sock"
    peers: dict[IPv4Address, bytes] = field(default_factory=dict)
    params: Params = field(default_factory=Params)
    timers: Timers = field(default_factory=Timers)


class ApiError(Exception):
    pass


class Stpd:
    def __init__(self, cfg: StpdConfig) -> None:
        self.cfg = cfg
        self.core = StCore(trio.current_time(), params=cfg.params, timers=cfg.timers)
        self.runner = CoreRunner(self.core, self._out, self._events)
        self.client: AsyncUlpClient | None = None
        self.ula: bytes | None = None
        self.results: dict[tuple, object] = {}
        self.waiting: dict[tuple, trio.Event] = {}
        self.accepted: dict[int, deque] = defaultdict(deque)
        self.accept_wake: dict[int, trio.Event] = defaultdict(trio.Event)
        self.recv_waiters: dict[int, deque] = defaultdict(deque)  # vc -> keys of posted receives
        self.api_counters: dict[str, int] = defaultdict(int)
        self.shared: dict[tuple[int, int], mmap.mmap] = {}  # exposed memory by (device, inode)
        self.drops = CounterLog(log)

    # --- core glue ---------------------------------------------------------------------------
    def _out(self, item) -> None:
        ula, vc, hdr, payload = item
        if self.client is None:
            self.core.counters["tx_dropped_no_gsnd"] += 1
            return
        self.client.send_nowait(ula, hdr, payload, vc=vc, ethertype=ETHERTYPE_ST)

    def _signal(self, key: tuple, value) -> None:
        self.results[key] = value
        ev = self.waiting.pop(key, None)
        if ev is not None:
            ev.set()

    def _events(self, events: list) -> None:
        for ev in events:
            if isinstance(ev, Connected):
                self._signal(("conn", ev.vc), None)
            elif isinstance(ev, Closed):
                self._signal(("conn", ev.vc), ev.reason)
                log.info("st.closed", vc=ev.vc, reason=ev.reason)
            elif isinstance(ev, Accepted):
                self.accepted[ev.uport].append((ev.vc, ev.peer))
                self.accept_wake[ev.uport].set()
            elif isinstance(ev, TransferDone):
                if ev.incoming and self.recv_waiters[ev.vc]:
                    self._signal(self.recv_waiters[ev.vc].popleft(), ev)
                else:
                    self._signal(("xfer", ev.vc, ev.xid), ev)
            elif isinstance(ev, (OpDone, RegionReady)):
                self._signal(("op", ev.vc, ev.gid), ev)
            elif isinstance(ev, StatusReply):
                self._signal(("status", ev.vc), ev)

    def _frame(self, frame, now: float) -> None:
        self.core.receive(frame.ula, frame.payload, now)

    def _set_client(self, client) -> None:
        self.client = client
        log.info("ulp.connected" if client else "ulp.lost", path=self.cfg.ulp_path)

    def _set_ula(self, ula: bytes | None) -> None:
        self.ula = ula

    async def _wait(self, key: tuple, timeout: float | None = None, progress=None):
        """Wait for the core's answer for ``key``; ``progress()`` is called now and then."""
        if key not in self.results:
            ev = self.waiting.setdefault(key, trio.Event())
            with trio.move_on_after(timeout if timeout is not None else float("inf")) as scope:
                while not ev.is_set():
                    with trio.move_on_after(PROGRESS_EVERY):
                        await ev.wait()
                    if progress is not None and not ev.is_set():
                        await progress()
            if scope.cancelled_caught:
                self.waiting.pop(key, None)
                raise ApiError("timed out")
        return self.results.pop(key)

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
        if not reply.get("ok"):
            raise ApiError(reply.get("error", f"{ip}: unresolved"))
        return bytes.fromhex(reply["ula"].replace(":", ""))

    # --- API ---------------------------------------------------------------------------------------
    async def serve_api(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        path = self.cfg.api_path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.exists(path):
            os.unlink(path)
        lsock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        lsock.bind(path)
        os.chmod(path, 0o660)
        lsock.listen(64)
        lsock.setblocking(False)
        task_status.started()
        async with trio.open_nursery() as nursery:
            while True:
                await trio.lowlevel.wait_readable(lsock)
                try:
                    conn, _ = lsock.accept()
                except BlockingIOError:
                    continue
                conn.setblocking(False)
                nursery.start_soon(self._api_conn, conn)

    async def _api_conn(self, conn: socket.socket) -> None:
        mine: set[int] = set()  # ULP ports this client listens on
        try:
            await self._api_loop(conn, mine)
        finally:
            conn.close()
            for uport in mine:  # nobody will accept these any more
                self.core.unlisten(uport)
                while self.accepted[uport]:
                    self.core.close(self.accepted[uport].popleft()[0], trio.current_time())
            self.runner.step()

    async def _api_loop(self, conn: socket.socket, mine: set[int]) -> None:
        while True:
            try:
                await trio.lowlevel.wait_readable(conn)
                msg, fds = api.recv_msg(conn)
            except BlockingIOError:
                continue
            except (EOFError, OSError):
                return
            except ValueError as exc:
                api.send_msg(conn, {"ok": False, "error": f"bad request: {exc}"})
                continue
            try:
                if msg.get("op") in ("listen", "accept"):
                    mine.add(int(msg["uport"]))
                reply = await self._api(msg, fds, conn)
                reply["ok"] = True
            except ApiError as exc:
                reply = {"ok": False, "error": str(exc)}
            except (KeyError, TypeError, ValueError) as exc:
                reply = {"ok": False, "error": f"bad request: {type(exc).__name__}: {exc}"}
            except OSError as exc:  # e.g. a descriptor that cannot be mapped
                reply = {"ok": False, "error": f"{exc.strerror or exc} (the file must be open read/write "
                                               f"for recv/expose, readable for send)"}
            finally:
                for fd in fds:
                    os.close(fd)
            self.api_counters[f"{msg.get('op')}_{'ok' if reply['ok'] else 'failed'}"] += 1
            try:
                api.send_msg(conn, reply)
            except OSError:
                return

    def _vc(self, msg: dict) -> int:
        vid = int(msg["vc"])
        if vid not in self.core.vcs:
            raise ApiError(f"no connection {vid}")
        return vid

    async def _api(self, msg: dict, fds: list[int], conn) -> dict:
        op = msg.get("op")
        now = trio.current_time()
        core = self.core
        if op == "listen":
            core.listen(int(msg["uport"]))
            return {}
        if op == "accept":
            uport = int(msg["uport"])
            core.listen(uport)
            while not self.accepted[uport]:
                self.accept_wake[uport] = trio.Event()
                await self.accept_wake[uport].wait()
            vid, peer = self.accepted[uport].popleft()
            return {"vc": vid, "peer": format_ula(peer)}
        if op == "connect":
            ula = await self.resolve(msg["host"])
            vid = core.connect(ula, int(msg["uport"]), now)
            self.runner.step()
            reason = await self._wait(("conn", vid))
            if reason is not None:
                raise ApiError(f"connect to {msg['host']}: {reason}")
            return {"vc": vid}
        if op == "close":
            core.close(self._vc(msg), now)
            self.runner.step()
            return {}
        if op == "status":
            if "vc" in msg:
                vid = self._vc(msg)
                core.status(vid, now)
                self.runner.step()
                st = await self._wait(("status", vid), timeout=5.0)
                return {"slots": st.slots}
            return {"vcs": core.status_table(), "listeners": sorted(core.listeners),
                    "counters": dict(core.counters), "api": dict(self.api_counters),
                    "ula": format_ula(self.ula) if self.ula else None}
        if op == "send":
            return await self._send(msg, fds, conn)
        if op == "recv":
            return await self._recv(msg, fds, conn)
        if op == "expose":
            vid = self._vc(msg)
            if not fds:
                raise ApiError("expose needs a file descriptor (memfd or shared memory)")
            st = os.fstat(fds[0])
            size = int(msg["size"])
            mm = self.shared.get((st.st_dev, st.st_ino))
            if mm is None or len(mm) < size:  # one mapping per memory object: FETCHOP locks are per word
                mm = self.shared[(st.st_dev, st.st_ino)] = mmap.mmap(fds[0], size)
            core.expose(vid, memoryview(mm)[:size])
            return {}
        if op == "region":
            vid = self._vc(msg)
            gid = core.request_region(vid, int(msg["size"]), now)
            self.runner.step()
            r = await self._wait(("op", vid, gid), timeout=30.0)
            if not r.ok:
                raise ApiError(f"region refused: {r.reason}")
            return {"rid": r.rid, "size": r.size}
        if op in ("put", "get", "fetchop"):
            vid = self._vc(msg)
            rid, off = int(msg["rid"]), int(msg["offset"])
            if op == "put":
                gid = core.put(vid, rid, off, base64.b64decode(msg["data"]), now)
            elif op == "get":
                gid = core.get(vid, rid, off, int(msg["length"]), now)
            else:
                fn = FUNCTIONS.get(msg.get("function", "inc"))
                if fn is None:
                    raise ApiError("function must be inc, dec or clear")
                gid = core.fetchop(vid, rid, off, fn, now)
            if gid is None:
                raise ApiError(f"{op}: unknown region or out of bounds")
            self.runner.step()
            r = await self._wait(("op", vid, gid), timeout=30.0)
            if not r.ok:
                raise ApiError(f"{op} failed: {r.reason}")
            return {"value": r.value} if op == "fetchop" else (
                {"data": base64.b64encode(r.data).decode()} if op == "get" else {})
        raise ApiError(f"unknown op {op!r}")

    async def _send(self, msg: dict, fds: list[int], conn) -> dict:
        vid = self._vc(msg)
        if fds:
            length = int(msg["length"])
            buf = mmap.mmap(fds[0], length, prot=mmap.PROT_READ) if length else b""
        elif "data" in msg:
            buf = base64.b64decode(msg["data"])
        else:
            raise ApiError("send needs a file descriptor or inline data")
        xid = self.core.send(vid, buf, trio.current_time(), dc=msg.get("dc"))
        if xid is None:
            raise ApiError("cannot send now (connection not open or too many transfers)")
        self.runner.step()
        vc = self.core.vcs[vid]

        async def progress():
            x = vc.tx.get(xid)
            if x is not None:
                api.send_msg(conn, {"progress": x.done_bytes})

        done = await self._wait(("xfer", vid, xid), progress=progress)
        if not done.ok:
            raise ApiError(f"transfer failed: {done.reason}")
        return {"bytes": done.nbytes}

    async def _recv(self, msg: dict, fds: list[int], conn) -> dict:
        vid = self._vc(msg)
        size = int(msg["max"])
        if fds:
            os.ftruncate(fds[0], size)
            buf = mmap.mmap(fds[0], size) if size else bytearray()
        elif size <= INLINE_MAX:
            buf = bytearray(size)
        else:
            raise ApiError(f"inline receives are at most {INLINE_MAX} bytes; pass a file descriptor")
        key = ("recv", vid, id(buf))
        self.recv_waiters[vid].append(key)
        self.core.post_receive(vid, buf, trio.current_time())
        self.runner.step()
        vc = self.core.vcs[vid]

        async def progress():
            got = sum(x.done_bytes for x in vc.rx.values())
            api.send_msg(conn, {"progress": got})

        done = await self._wait(key, progress=progress)
        if not done.ok:
            raise ApiError(f"transfer failed: {done.reason}")
        if fds:
            if isinstance(buf, mmap.mmap):
                buf.close()
            os.ftruncate(fds[0], done.nbytes)
            return {"bytes": done.nbytes}
        return {"bytes": done.nbytes, "data": base64.b64encode(bytes(buf[: done.nbytes])).decode()}

    # --- run ---------------------------------------------------------------------------------
    async def _stats(self) -> None:
        while True:
            await trio.sleep(1.0)
            self.drops.update("st", self.core.counters, trio.current_time())

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.serve_api)
            nursery.start_soon(partial(
                ulp_session, self.cfg.ulp_path, ETHERTYPE_ST, on_client=self._set_client, on_status=self._set_ula,
                on_frame=self._frame, after_burst=self.runner.step))
            nursery.start_soon(self.runner.run)
            nursery.start_soon(self._stats)
            log.info("stpd.started", api=self.cfg.api_path, ulp=self.cfg.ulp_path)
            sd_notify("READY=1")
            task_status.started()
