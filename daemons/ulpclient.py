"""Client library for gsnd's ULP socket: the interface harpd, stpd and pktwayd use.

Blocking::

    with UlpClient("/run/gsnd/gsn0.ulp") as ulp:
        status = ulp.bind(0x88B5)              # our own ULA, link state
        ulp.send(peer_ula, b"hello", vc=1, ethertype=0x88B5)
        frame = ulp.recv(timeout=1.0)          # Frame(op=RECV, vc, ethertype, ula=source, payload)
        op, vc, ethertype, n = ulp.recv_into(buf)  # the same, in the caller's buffer (no copy)

trio::

    async with await AsyncUlpClient.connect(path) as ulp:
        status = await ulp.bind(0x88B5)
        ulp.send_nowait(peer_ula, b"hello", vc=1, ethertype=0x88B5); await ulp.flush()
        for frame in ulp.drain(): ...          # after `await ulp.wait_readable()`
"""

from __future__ import annotations

import socket
import threading
from collections import Counter, deque

import trio

from collections.abc import Callable, MutableMapping

from .constants import ULP_CLIENT_BACKLOG_BYTES, ULP_CLIENT_SOCKET_BYTES, ULP_MAX_PAYLOAD
from .wire.errors import DecodeError
from .wire.ulp import HEADER, Frame, Op, decode_header

# drop reasons of AsyncUlpClient's SENDs
BACKLOG_FULL, SOCKET_ERROR = "tx_drop_ulp_backlog_full", "tx_drop_ulp_socket_error"

_BUF = ULP_MAX_PAYLOAD + HEADER.size + 1
# A drained burst stops after this many bytes (16 frames of 64 KiB ST DATA): the
# caller handles each burst before it reads again.
DRAIN_MAX_BYTES = 1 << 20
_local = threading.local()


def _recv_buffer() -> bytearray:
    """One receive buffer per thread, shared by its clients (a frame is decoded,
    payload copied, before the next receive), not one pinned per connection."""
    buf = getattr(_local, "buf", None)
    if buf is None:
        buf = _local.buf = bytearray(_BUF)
    return buf


class UlpError(Exception):
    pass


class UlpClient:
    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.connect(path)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, ULP_CLIENT_SOCKET_BYTES)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, ULP_CLIENT_SOCKET_BYTES)

    def __enter__(self) -> UlpClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def bind(self, ethertype: int, timeout: float = 5.0) -> Frame:
        """Receive Messages of ``ethertype``; returns the STATUS frame that answers."""
        self.sock.send(Frame(Op.BIND, ethertype=ethertype).encode())
        while True:
            frame = self.recv(timeout)
            if frame.op is Op.STATUS:
                return frame
            if frame.op is Op.ERROR:
                raise UlpError(frame.payload.decode(errors="replace"))

    def send(self, ula: bytes, payload: bytes, *, vc: int = 1, ethertype: int) -> None:
        """One SEND frame: header and payload in one sendmsg (the payload is not copied
        into a joined frame first)."""
        self.sock.sendmsg([HEADER.pack(Op.SEND, vc, ethertype, ula), payload])

    def recv(self, timeout: float | None = None) -> Frame:
        if self.sock.gettimeout() != timeout:  # settimeout is a syscall (FIONBIO) every time
            self.sock.settimeout(timeout)
        buf = _recv_buffer()
        n = self.sock.recv_into(buf)
        if n == 0:  # gsnd never sends an empty frame
            raise UlpError("gsnd closed the ULP socket")
        return Frame.decode(memoryview(buf)[:n])

    def recv_into(self, buf: bytearray | memoryview, timeout: float | None = None) -> tuple[Op, int, int, int]:
        """One frame into the caller's ``buf``, nothing allocated for its payload:
        ``(op, vc, ethertype, size)``; the frame is ``buf[:size]``, its ULA
        ``buf[4:10]`` and its payload ``buf[10:size]`` (valid until the next call).
        A frame larger than ``buf`` raises UlpError (the socket drops its tail), a
        malformed one DecodeError, as ``recv`` does."""
        if self.sock.gettimeout() != timeout:
            self.sock.settimeout(timeout)
        n, _, flags, _ = self.sock.recvmsg_into((buf,))
        if n == 0:  # gsnd never sends an empty frame
            raise UlpError("gsnd closed the ULP socket")
        if flags & socket.MSG_TRUNC:
            raise UlpError(f"a frame did not fit the {len(buf)}-byte buffer")
        op, vc, ethertype, _ = decode_header(buf, n)
        return op, vc, ethertype, n


class AsyncUlpClient:
    """trio client on a non-blocking socket: frames are drained in bursts and sends
    never await per frame (a backlog is flushed when the socket has room)."""

    def __init__(self, sock: socket.socket, drops: MutableMapping[str, int] | None = None) -> None:
        self.sock = sock
        self._backlog: deque[bytes] = deque()
        self._backlog_bytes = 0
        self._ready: deque[Frame] = deque()
        self._room = trio.Event()
        # a send that failed (gsnd went away): later SENDs are dropped until the session
        # reconnects with a new client; every dropped SEND counted by reason in ``drops``
        # (the owner's counters when it passes them)
        self.error: OSError | None = None
        self.drops: MutableMapping[str, int] = Counter() if drops is None else drops

    @classmethod
    async def connect(cls, path: str, drops: MutableMapping[str, int] | None = None) -> AsyncUlpClient:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sock.setblocking(False)
        for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            sock.setsockopt(socket.SOL_SOCKET, opt, ULP_CLIENT_SOCKET_BYTES)
        try:
            sock.connect(path)
        except BaseException:
            sock.close()
            raise
        return cls(sock, drops)

    async def __aenter__(self) -> AsyncUlpClient:
        return self

    async def __aexit__(self, *exc) -> None:
        self.sock.close()

    async def bind(self, ethertype: int) -> Frame:
        await self.send_frame(Frame(Op.BIND, ethertype=ethertype))
        while True:
            frame = await self.recv()
            if frame.op is Op.STATUS:
                return frame
            if frame.op is Op.ERROR:
                raise UlpError(frame.payload.decode(errors="replace"))

    # sending
    def send_nowait(self, ula: bytes, *parts, vc: int = 1, ethertype: int) -> None:
        """Queue one Message whose payload is ``parts`` joined (sent with one sendmsg,
        so a large memoryview is not copied on the way)."""
        head = HEADER.pack(Op.SEND, vc, ethertype, ula)
        if self.error is not None:
            self.drops[SOCKET_ERROR] += 1
            return
        if not self._backlog:
            try:
                self.sock.sendmsg([head, *parts])
                return
            except BlockingIOError:
                pass
            except OSError as exc:
                self._failed(exc, 1)
                return
        self.queue_frames([b"".join([head, *map(bytes, parts)])])

    def queue_frames(self, frames: list[bytes]) -> None:
        """Encoded frames behind the backlog, sent as the socket has room; beyond
        ULP_CLIENT_BACKLOG_BYTES (or after the socket failed) dropped and counted."""
        for data in frames:
            if self.error is not None:
                self.drops[SOCKET_ERROR] += 1
            elif self._backlog_bytes + len(data) > ULP_CLIENT_BACKLOG_BYTES:
                self.drops[BACKLOG_FULL] += 1
            else:
                self._backlog.append(data)
                self._backlog_bytes += len(data)
        self._room.set()

    def _queue(self, data: bytes) -> None:
        if not self._backlog and self.error is None:
            try:
                self.sock.send(data)
                return
            except BlockingIOError:
                pass
            except OSError as exc:
                self._failed(exc, 1)
                return
        self.queue_frames([data])

    def _failed(self, exc: OSError, lost: int) -> None:
        """The socket refused a send (gsnd closed it, reset it): what waits is dropped."""
        self.error = self.error or exc
        self.drops[SOCKET_ERROR] += lost + len(self._backlog)
        self._backlog.clear()
        self._backlog_bytes = 0
        self._room.set()

    async def flush(self) -> None:
        """Wait until every queued frame is in the socket (or the socket failed: see
        ``error``; the frames are dropped and counted then, never raised to the caller)."""
        while self._backlog:
            await trio.lowlevel.wait_writable(self.sock)
            while self._backlog:
                try:
                    self.sock.send(self._backlog[0])
                except BlockingIOError:
                    break
                except OSError as exc:
                    self._failed(exc, 0)
                    break
                self._backlog_bytes -= len(self._backlog.popleft())

    async def flush_loop(self) -> None:
        """Keep flushing whatever send_nowait had to queue, until the socket fails."""
        while self.error is None:
            await self._room.wait()
            self._room = trio.Event()
            await self.flush()

    async def send_frame(self, frame: Frame) -> None:
        self._queue(frame.encode())
        await self.flush()

    async def send(self, ula: bytes, payload: bytes, *, vc: int = 1, ethertype: int) -> None:
        self.send_nowait(ula, payload, vc=vc, ethertype=ethertype)
        await self.flush()

    # receiving
    def drain(self, limit: int = 256, max_bytes: int = DRAIN_MAX_BYTES) -> list[Frame]:
        """Frames available now, without waiting: at most ``limit`` frames, and no
        more once ``max_bytes`` are taken, so the caller, which handles the burst
        before reading again, comes back to its socket often (gsnd judges a client
        that reads nothing for ULP_HOLD_S as stalled)."""
        out = list(self._ready)
        self._ready.clear()
        buf = _recv_buffer()
        taken = 0
        while len(out) < limit and taken < max_bytes:
            try:
                n = self.sock.recv_into(buf)
            except BlockingIOError:
                break
            if n == 0:  # gsnd never sends an empty frame
                raise UlpError("gsnd closed the ULP socket")
            out.append(Frame.decode(memoryview(buf)[:n]))
            taken += n
        return out

    async def wait_readable(self) -> None:
        if not self._ready:
            await trio.lowlevel.wait_readable(self.sock)

    async def recv(self) -> Frame:
        while not self._ready:
            await self.wait_readable()
            self._ready.extend(self.drain())
        return self._ready.popleft()


async def ulp_session(path: str, ethertype: int, *, on_client: Callable[[AsyncUlpClient | None], None],
                      on_status: Callable[[bytes | None], None], on_frame: Callable[[Frame, float], None],
                      after_burst: Callable[[], None], reconnect: float = 1.0,
                      on_error: Callable[[Frame], None] | None = None,
                      drain: Callable[[AsyncUlpClient], list[Frame]] = AsyncUlpClient.drain,
                      counters: MutableMapping[str, int] | None = None) -> None:
    """Stay connected to gsnd's ULP socket, bound to ``ethertype``, for ever.

    ``on_status`` gets the port's ULA (None while the link or gsnd is down),
    ``on_frame`` every RECV frame, ``on_error`` every ERROR frame (e.g. gsnd's drop
    notice: a peer's gsnd dropped Messages we sent), ``after_burst`` runs once per
    drained burst; ``drain`` takes a burst (a compiled fast path may forward some frames
    itself and return the rest); SENDs dropped (backlog full, socket failed) are counted
    in ``counters``."""
    while True:
        try:
            client = await AsyncUlpClient.connect(path, counters)
        except OSError:
            await trio.sleep(reconnect)
            continue
        async with client, trio.open_nursery() as nursery:
            try:
                status = await client.bind(ethertype)
            except (UlpError, OSError):
                nursery.cancel_scope.cancel()
                continue
            on_client(client)
            on_status(status.ula if status.vc == 1 else None)
            nursery.start_soon(client.flush_loop)
            try:
                while True:
                    await client.wait_readable()
                    now = trio.current_time()
                    for frame in drain(client):
                        if frame.op is Op.STATUS:
                            on_status(frame.ula if frame.vc == 1 else None)
                        elif frame.op is Op.RECV and frame.ethertype == ethertype:
                            on_frame(frame, now)
                        elif frame.op is Op.ERROR and on_error is not None:
                            on_error(frame)
                    after_burst()
                    if client.error is not None:  # a send failed: gsnd is gone, connect again
                        raise client.error
                    await trio.lowlevel.checkpoint()
            except (UlpError, OSError, DecodeError):
                nursery.cancel_scope.cancel()
        on_client(None)
        on_status(None)
        await trio.sleep(reconnect)
