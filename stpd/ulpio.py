"""stpd's data path on gsnd's ULP socket, both directions, with no copy of its own.

Sending (``UlpSender``): each ST op leaves as one ``sendmsg`` of the ULP header, the
40-byte ST header and the STU, so the kernel's copy is the only one.  While the
socket is full, ops wait in order in a bounded queue holding references, not copies;
an STU that comes from a file (a ``FileSlice``, see ``StCore(defer_file_reads=True)``)
is read only when its Message can leave, into one buffer that is reused for every STU.

Receiving (``UlpReceiver``): Messages are read with ``recv_into`` into one buffer and
each ST op is handed to the core as a view of it (the core writes a DATA's STU to its
destination from there); only the rare non-ST frames are decoded as copies.
"""

from __future__ import annotations

import socket
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from daemons.constants import ULP_MAX_PAYLOAD
from daemons.ulpclient import AsyncUlpClient, UlpError
from daemons.wire.ulp import HEADER, Frame, Op

from . import constants as K
from .constants import ETHERTYPE_ST
from .core import Out, StCore
from .membuf import BufferGone, FileSlice

if TYPE_CHECKING:
    from typing_extensions import Buffer

Entry = tuple[bytes, bytes, "Buffer | FileSlice"]  # (ULP header, ST header, STU)


class UlpSender:
    def __init__(self, core: StCore, on_failure: Callable[[], None]) -> None:
        """``on_failure`` runs (from ``run``) after a deferred STU could not be read and
        its transfer was failed in the core: the driver flushes the core's END."""
        self.core = core
        self.on_failure = on_failure
        self.sock: socket.socket | None = None
        self.queue: deque[Entry] = deque()
        self._stu = bytearray()
        self._staged: Entry | None = None  # the queued entry whose STU is in _stu already
        self._failed = False
        self._room = trio.Event()
        self._waiting: trio.CancelScope | None = None

    def attach(self, sock: socket.socket | None) -> None:
        """A new ULP socket (None: gsnd is gone): what was queued for the old one is dropped."""
        if self.queue:
            self.core.counters["tx_dropped_ulp_lost"] += len(self.queue)
        self.queue.clear()
        self._staged = None
        self.sock = sock
        if self._waiting is not None:
            self._waiting.cancel()

    def send(self, item: Out) -> None:
        ula, vc, hdr, payload = item
        if self.sock is None:
            self.core.counters["tx_dropped_no_gsnd"] += 1
            return
        entry: Entry = (HEADER.pack(Op.SEND, vc, ETHERTYPE_ST, ula), hdr, payload)
        if not self.queue and self._send(entry):
            return
        if len(self.queue) >= K.ULP_TX_QUEUE_MAX:
            self.core.counters["tx_dropped_ulp_queue_full"] += 1
            if self._staged is entry:
                self._staged = None
            return
        if isinstance(payload, memoryview) and not isinstance(payload.obj, bytes):
            entry = (entry[0], hdr, bytes(payload))  # a view of memory its owner may change: copied
        self.queue.append(entry)
        self._room.set()

    def _send(self, entry: Entry) -> bool:
        """Send one entry: True once it is done with (sent, or dropped and counted),
        False while the socket has no room (a deferred STU stays read, staged)."""
        assert self.sock is not None
        head, hdr, payload = entry
        stu: Buffer
        if isinstance(payload, FileSlice):
            n = len(payload)
            if self._staged is not entry:
                if not self.core.sending(payload):
                    self.core.counters["tx_skipped_transfer_ended"] += 1
                    return True
                if len(self._stu) < n:
                    self._stu = bytearray(n)
                try:
                    payload.buf.read_into(payload.start, memoryview(self._stu)[:n])
                except BufferGone as exc:
                    self.core.source_failed(payload, str(exc), trio.current_time())
                    self._failed = True
                    self._room.set()
                    return True
                self._staged = entry
            stu = memoryview(self._stu)[:n]
        else:
            stu = payload
        try:
            self.sock.sendmsg([head, hdr, stu])
        except BlockingIOError:
            if isinstance(payload, FileSlice) and self._staged is not entry:
                self._staged = entry
            return False
        except OSError:  # the session sees the socket fail and reconnects
            self.core.counters["tx_dropped_ulp_error"] += 1
            self._staged = None
            return True
        self._staged = None
        return True

    async def run(self) -> None:
        """Send what had to wait, as the socket makes room; report failed reads."""
        while True:
            await self._room.wait()
            self._room = trio.Event()
            while True:
                if self._failed:  # the core's END goes out (after what already waits) at once
                    self._failed = False
                    self.on_failure()
                if not self.queue or self.sock is None:
                    break
                if self._send(self.queue[0]):
                    self.queue.popleft()
                    continue
                with trio.CancelScope() as self._waiting:
                    await trio.lowlevel.wait_writable(self.sock)
                self._waiting = None


class UlpReceiver:
    def __init__(self, on_st: Callable[[bytes, memoryview, float], None]) -> None:
        """``on_st(source ULA, ST op, now)`` gets every ST Message as a view of the one
        receive buffer: valid only during the call."""
        self.on_st = on_st
        self._buf = bytearray(ULP_MAX_PAYLOAD + HEADER.size + 1)  # a larger frame would show as truncated
        self._view = memoryview(self._buf)

    def drain(self, client: AsyncUlpClient, limit: int = 256, max_bytes: int = K.ULP_DRAIN_MAX_BYTES) -> list[Frame]:
        """``ulp_session``'s drain: ST Messages go to ``on_st`` at once; the other frames
        (status, errors) are returned, decoded."""
        out = AsyncUlpClient.drain(client, limit=0)  # frames read before (while binding), if any
        now = trio.current_time()
        frames = taken = 0
        while frames < limit and taken < max_bytes:
            try:
                n = client.sock.recv_into(self._buf)
            except BlockingIOError:
                break
            if n == 0:  # gsnd never sends an empty frame
                raise UlpError("gsnd closed the ULP socket")
            frames += 1
            taken += n
            frame = self._view[:n]
            if n >= HEADER.size and frame[0] == Op.RECV and frame[1] <= 3 and \
                    int.from_bytes(frame[2:4], "big") == ETHERTYPE_ST:
                self.on_st(bytes(frame[4:HEADER.size]), frame[HEADER.size:], now)
            else:
                out.append(Frame.decode(frame))  # copies: the buffer is reused
        return out
