"""gsnd's ULP socket server: local daemons bind EtherTypes and exchange Messages.

Every byte from a client is hostile: frames are read into one receive buffer
shared by all clients (a frame's payload is copied out of it, so an idle client
costs no buffer), at most ``ULP_MAX_CLIENTS`` clients are served (more, or an
accept that finds no free fd, are refused and counted, never fatal), a client
binds at most ``ULP_MAX_BINDINGS`` EtherTypes, and every malformed frame is
answered with ERROR and counted.  IP's EtherTypes (``ULP_PRIVILEGED_ETHERTYPES``)
are bound and sent only by a privileged client: one whose peer uid (SO_PEERCRED,
taken at accept) is root or gsnd's own user; others get ERROR, counted.  Received Messages reach clients through the
sans-IO :class:`~daemons.gsnd.delivery.Delivery`, which holds them (and, through
gsnd, the link's credits) while a client's socket is full.

With gsnd's data plane attached (``use_dataplane``), the common case skips Python
(daemons/_ulploop.h): the data plane reads every client's socket and queues the SENDs
a client may make itself, handing every other frame (and the client's end) to
``frame_in`` / ``closed``, which answer it as ``_reader`` would; and a received Message
whose EtherType exactly one client binds is written to that client from C while the
Delivery holds nothing for it.  This server keeps the C registry in step (bindings,
privilege, and ``direct``: backlog empty and not stalled); a write C cannot make comes
back up as an ordinary delivery.
"""

from __future__ import annotations

import enum
import fcntl
import math
import socket
import struct
import termios
from collections import Counter
from collections.abc import Callable

import trio

from ..runtime.oserrors import NO_FDS_ERRNOS, ReserveFd, accept_ready, errno_name
from ..constants import (
    ETHERTYPE_OUI_EXTENDED,
    ULP_ACCEPT_BACKOFF_S,
    ULP_CLIENT_SOCKET_BYTES,
    ULP_MAX_BINDINGS,
    ULP_MAX_CLIENTS,
    ULP_MAX_PAYLOAD,
    ULP_NOTICE_PROTOCOL,
    ULP_PRIVILEGED_ETHERTYPES,
    ULP_PUMP_RETRY_S,
)
from ..gsnd.delivery import Delivery
from ..runtime.control import NOBODY, bind_unix, peer_cred, privileged, unlink_unix
from ..wire.errors import DecodeError
from ..wire.message import Message
from ..wire.ulp import HEADER, Frame, Op

BURST = 64  # frames taken from one client before flushing and yielding


class BadFrame(enum.StrEnum):
    """A client's frame that did not decode (daemons/wire/ulp.py ``Frame.decode``): the
    field that was wrong, as the counter; each is answered with an ERROR frame."""

    EMPTY = "rx_bad_frame_empty"  # a 0-byte record
    SHORT = "rx_bad_frame_ulp"  # shorter than the 10-byte header
    OP = "rx_bad_frame_op"  # an op the protocol does not have
    VC = "rx_bad_frame_vc"  # VC beyond 3
    OTHER = "rx_bad_frame_other"  # a field this list does not name (a codec change not counted here yet)

    @classmethod
    def of(cls, exc: DecodeError) -> BadFrame:
        return _BAD_FRAME.get(exc.field, cls.OTHER)


_BAD_FRAME = {"ulp": BadFrame.SHORT, "op": BadFrame.OP, "vc": BadFrame.VC}
_FRAME_MAX = HEADER.size + ULP_MAX_PAYLOAD
_CREDS = socket.CMSG_SPACE(12)  # struct ucred: every record carries one, EOF none
_REFUSE_DRAIN = 16  # frames read and discarded from a refused client


class _Client:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        try:
            self.pid, self.uid, _gid = peer_cred(sock)
        except OSError:
            self.pid, self.uid, _gid = NOBODY
        self.privileged = privileged(self.uid)  # may bind and send ULP_PRIVILEGED_ETHERTYPES
        self.ethertypes: set[int] = set()
        self.wake = trio.Event()  # the delivery backlog has something for the writer
        self.closed = trio.Event()  # the data plane, which reads it, saw its end


class UlpServer:
    """``send(vc, ula, ethertype, payload) -> str | None`` queues a Message (None = ok,
    else the reason it was dropped); ``wait_room(vc)`` blocks while the link's queue
    for ``vc`` is too long, which back-pressures the client socket; ``changed(now)``
    runs after delivery state changed outside the link's input (a client took
    held frames, a hold timed out, a client left): gsnd re-syncs credit holds and
    sends drop notices there (it must take them: ``delivery.take_notices``)."""

    def __init__(self, path: str, send: Callable, wait_room: Callable, status: Callable[[], Frame],
                 flush: Callable[[], None], changed: Callable[[float], None] | None = None,
                 delivery: Delivery[_Client] | None = None) -> None:
        self.path = path
        self._send = send
        self._flush = flush
        self._wait_room = wait_room
        self._status = status
        self.delivery: Delivery[_Client] = delivery or Delivery()
        if self.delivery.unread is None:
            self.delivery.unread = self._unread
        self._changed = changed or self.delivery.take_notices  # nobody to notify: discard
        self.clients: list[_Client] = []
        self.counters: Counter[str] = Counter()
        self._buf = bytearray(_FRAME_MAX + 1)  # one receive buffer for every client
        self._reserve: ReserveFd | None = None
        self._timer_moved = trio.Event()
        self._armed = math.inf  # the deadline _timeouts waits for (woken only when one comes earlier)
        self._dp = None  # gsnd's DataPlane: it writes RECV frames to the clients it may (use_dataplane)

    def use_dataplane(self, dp) -> None:
        """Let ``dp`` (daemons/gsnd/dataplane.DataPlane) read the clients' frames and write
        RECV frames to them itself.  Before ``serve``: a client accepted without it is read
        by its own task."""
        self._dp = dp

    def _sync(self, client: _Client) -> None:
        """The data plane's copy of ``client``: C writes to it only while the Delivery
        holds nothing for it and it is not marked stalled (else a Message written from C
        would overtake the held ones, or skip the not-reading drop)."""
        if self._dp is not None:
            bl = self.delivery.backlogs.get(client)
            self._dp.ulp_client(client.sock.fileno(), client.ethertypes, client.privileged,
                                bl is not None and not bl.queue and not bl.stalled)

    # --- accepting -----------------------------------------------------------------
    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        lsock = bind_unix(self.path, socket.SOCK_SEQPACKET, 0o660)
        lsock.setblocking(False)
        # Credentials ride on every record, so a 0-byte record is told from EOF.
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        lsock.listen(64)
        self._reserve = ReserveFd()
        task_status.started()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._timeouts)
                while True:
                    conn = await accept_ready(lsock)
                    if isinstance(conn, OSError):
                        if conn.errno in NO_FDS_ERRNOS:
                            await self._refuse_without_fds(lsock)
                        else:
                            self.counters[f"accept_error_{errno_name(conn)}"] += 1
                        continue
                    if len(self.clients) >= ULP_MAX_CLIENTS:
                        self.counters["refused_client_cap"] += 1
                        self._refuse(conn, f"too many ULP clients (at most {ULP_MAX_CLIENTS})")
                        continue
                    try:
                        conn.setblocking(False)  # sync sends; reads wait for readability
                        conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, ULP_CLIENT_SOCKET_BYTES)
                        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, ULP_CLIENT_SOCKET_BYTES)
                    except OSError:
                        conn.close()
                        self.counters["accept_error_setup"] += 1
                        continue
                    client = _Client(conn)
                    self.clients.append(client)
                    self.delivery.add(client)
                    self._sync(client)
                    nursery.start_soon(self._client, client)
        finally:
            unlink_unix(self.path, lsock)
            if self._reserve is not None:
                self._reserve.close()

    def _refuse(self, conn: socket.socket, why: str) -> None:
        try:
            conn.send(Frame(Op.ERROR, payload=why.encode()).encode(), socket.MSG_DONTWAIT)
            # Closing with frames unread would reset the connection and hide the ERROR.
            scrap = bytearray(HEADER.size)
            for _ in range(_REFUSE_DRAIN):
                conn.recv_into(scrap, 0, socket.MSG_DONTWAIT)
        except OSError:
            pass
        conn.close()

    async def _refuse_without_fds(self, lsock: socket.socket) -> None:
        """No fd for the connection waiting in the backlog: free the reserve fd,
        accept it, refuse it, take the reserve back.  Never exits the server."""
        self.counters["refused_no_fds"] += 1
        if self._reserve is not None:
            self._reserve.refuse_waiting(lsock, lambda c: self._refuse(c, "gsnd is out of file descriptors"))
        await trio.sleep(ULP_ACCEPT_BACKOFF_S)  # the backlog stays readable: do not spin

    # --- one client ------------------------------------------------------------------
    async def _client(self, client: _Client) -> None:
        try:
            with client.sock:
                try:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._writer, client)
                        await self._reader(client)
                        nursery.cancel_scope.cancel()
                finally:
                    if self._dp is not None:  # before the fd is closed (and its number reused)
                        self._dp.ulp_forget(client.sock.fileno())
        finally:
            self.clients.remove(client)
            self.delivery.remove(client)
            self._changed(trio.current_time())

    async def _reader(self, client: _Client) -> None:
        if self._dp is not None:  # the data plane reads this client: frame_in, closed
            await client.closed.wait()
            return
        sock, buf = client.sock, self._buf
        burst = 0
        while True:
            try:
                n, anc, flags, _ = sock.recvmsg_into([buf], _CREDS, socket.MSG_TRUNC)
            except BlockingIOError:
                self._flush()  # one flush per burst of frames, not per frame
                burst = 0
                await trio.lowlevel.wait_readable(sock)
                continue
            except ConnectionResetError:  # it closed with RECVs unread: reported once, then
                continue  # the frames it sent before closing, then its end
            except OSError:
                return
            if n == 0 and not anc:
                return  # end of connection: no record, so no credentials
            frame = self._decode(client, memoryview(buf), n)
            if frame is None:
                continue
            if frame.op is Op.SEND:
                if self._may_send(client, frame):
                    await self._wait_room(frame.vc)
                    self._send_now(client, frame)
            else:
                self._control(client, frame)
            burst += 1
            if burst >= BURST:
                self._flush()
                burst = 0
                await trio.lowlevel.checkpoint()

    async def _writer(self, client: _Client) -> None:
        """Hands held RECV frames to the client as its socket drains."""
        while True:
            await client.wake.wait()
            client.wake = trio.Event()
            while self.delivery.backlog(client):
                with trio.move_on_after(ULP_PUMP_RETRY_S):
                    await trio.lowlevel.wait_writable(client.sock)
                now = trio.current_time()
                waiting = self.delivery.backlog(client)
                self.delivery.pump(client, now, self._send_frame)
                if self.delivery.backlog(client) != waiting:
                    self._sync(client)
                    self._changed(now)

    def frame_in(self, fd: int, data: bytes, size: int) -> None:
        """A frame the data plane read from client ``fd`` and did not queue itself
        (``size``: its length; ``data`` holds at most one byte more than a whole frame):
        answered as if this server had read it.  A SEND among them needs no wait for room
        (the data plane waits before it reads one)."""
        client = next((c for c in self.clients if c.sock.fileno() == fd), None)
        if client is None:
            self.counters["rx_frame_of_unknown_client"] += 1
            return
        frame = self._decode(client, memoryview(data), size)
        if frame is None:
            return
        if frame.op is Op.SEND:
            if self._may_send(client, frame):
                self._send_now(client, frame)
        else:
            self._control(client, frame)

    def closed(self, fd: int) -> None:
        """The data plane saw client ``fd``'s end: its task ends and it is forgotten."""
        for c in self.clients:
            if c.sock.fileno() == fd:
                c.closed.set()

    def _decode(self, client: _Client, buf: memoryview, n: int) -> Frame | None:
        """The frame of ``n`` bytes in ``buf``, or None when malformed (answered, counted)."""
        if n > _FRAME_MAX:
            self.counters["rx_oversized_frame"] += 1
            self._reply(client, Frame(Op.ERROR, payload=f"frame of {n} bytes: payload exceeds the "
                                      f"{ULP_MAX_PAYLOAD}-byte limit (ULP_MAX_PAYLOAD)".encode()))
            return None
        if n == 0:
            self.counters[BadFrame.EMPTY] += 1
            self._reply(client, Frame(Op.ERROR, payload=b"empty frame (a frame has a 10-byte header)"))
            return None
        try:
            return Frame.decode(buf[:n])  # copies the payload out
        except DecodeError as exc:
            self.counters[BadFrame.of(exc)] += 1
            self._reply(client, Frame(Op.ERROR, payload=str(exc).encode()))
            return None

    def _may_send(self, client: _Client, frame: Frame) -> bool:
        """A SEND's own checks (reserved protocol, privilege); a refusal is answered."""
        if frame.ethertype == ETHERTYPE_OUI_EXTENDED and frame.payload[:5] == ULP_NOTICE_PROTOCOL:
            self.counters["tx_refused_reserved_protocol"] += 1
            self._reply(client, Frame(Op.ERROR, frame.vc, frame.ethertype, frame.ula,
                                      b"protocol 02-47-53-00-01 is reserved for gsnd's drop notices"))
            return False
        if frame.ethertype in ULP_PRIVILEGED_ETHERTYPES and not client.privileged:
            self.counters["tx_refused_unprivileged"] += 1
            self._reply(client, Frame(Op.ERROR, frame.vc, frame.ethertype, frame.ula, self._unprivileged(
                client, frame.ethertype, "send")))
            return False
        return True

    def _send_now(self, client: _Client, frame: Frame) -> None:
        why = self._send(frame.vc, frame.ula, frame.ethertype, frame.payload)
        if why:
            self.counters[f"tx_dropped_{why}"] += 1
            self._reply(client, Frame(Op.ERROR, frame.vc, frame.ethertype, frame.ula, why.encode()))
        else:
            self.counters["tx_messages"] += 1

    def _control(self, client: _Client, frame: Frame) -> None:
        """Every frame but SEND."""
        if frame.op is Op.BIND:
            if frame.ethertype in ULP_PRIVILEGED_ETHERTYPES and not client.privileged:
                self.counters["refused_bind_unprivileged"] += 1
                self._reply(client, Frame(Op.ERROR, 0, frame.ethertype, payload=self._unprivileged(
                    client, frame.ethertype, "bind")))
                return
            if frame.ethertype not in client.ethertypes and len(client.ethertypes) >= ULP_MAX_BINDINGS:
                self.counters["refused_binding_cap"] += 1
                self._reply(client, Frame(Op.ERROR, 0, frame.ethertype, payload=(
                    f"a client binds at most {ULP_MAX_BINDINGS} EtherTypes").encode()))
                return
            client.ethertypes.add(frame.ethertype)
            self._sync(client)
            self._reply(client, self._status())
        elif frame.op is Op.UNBIND:
            client.ethertypes.discard(frame.ethertype)
            self._sync(client)
        else:
            self.counters["rx_unexpected_op"] += 1
            self._reply(client, Frame(Op.ERROR, payload=f"op {frame.op.name} is not for clients".encode()))

    @staticmethod
    def _unprivileged(client: _Client, ethertype: int, what: str) -> bytes:
        return (f"uid {client.uid} may not {what} EtherType 0x{ethertype:04X} (IP's: root or gsnd's own user "
                f"only)").encode()

    # --- to clients ------------------------------------------------------------------
    def _send_frame(self, client: _Client, frame: bytes) -> str:
        try:
            client.sock.send(frame, socket.MSG_DONTWAIT)
            return "ok"
        except BlockingIOError:
            return "full"
        except OSError:
            return "gone"

    @staticmethod
    def _unread(client: _Client) -> int | None:
        """Bytes gsnd sent to ``client`` that it has not read yet (SIOCOUTQ: a Unix
        socket's sent records stay charged to the sender until the peer reads them)."""
        try:
            return struct.unpack("i", fcntl.ioctl(client.sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]
        except (OSError, ValueError):
            return None

    def _reply(self, client: _Client, frame: Frame) -> bool:
        how = self._send_frame(client, frame.encode())
        if how != "ok":
            self.counters["tx_client_full" if how == "full" else "tx_client_gone"] += 1
        return how == "ok"

    def wants(self, ethertype: int) -> bool:
        return any(ethertype in c.ethertypes for c in self.clients)

    def deliver(self, msg: Message, now: float) -> None:
        """A received Message: to every client bound to its EtherType, held while a
        client's socket is full (gsnd must call ``changed`` afterwards)."""
        keys = [c for c in self.clients if msg.ethertype in c.ethertypes]
        if not keys:
            self.counters["rx_dropped_no_binding"] += 1
            return
        self.delivery.deliver(msg, keys, now, self._send_frame)
        for c in keys:
            if self.delivery.backlog(c):
                c.wake.set()
            self._sync(c)
        if self.delivery.timer() < self._armed:  # a hold or a notice due before what _timeouts waits for
            self._timer_moved.set()

    async def _timeouts(self) -> None:
        """Runs the delivery's bound (dropping the backlog of a client that reads
        nothing) and releases aggregated drop notices."""
        while True:
            self._armed = self.delivery.timer()
            with trio.move_on_at(self._armed):
                await self._timer_moved.wait()
            self._timer_moved = trio.Event()
            now = trio.current_time()
            if now >= self.delivery.timer():
                self.delivery.handle_timer(now)
                for client in self.clients:
                    self._sync(client)
                self._changed(now)

    def error_to_bound(self, ethertype: int, frame: Frame) -> int:
        """An ERROR frame to every client bound to ``ethertype``; how many got it."""
        return sum(self._reply(c, frame) for c in self.clients if ethertype in c.ethertypes)

    def broadcast_status(self) -> None:
        for client in self.clients:
            if client.ethertypes:
                self._reply(client, self._status())
