"""Drive one link: wait for datagrams or the link's next timer, hand both to the core."""

from __future__ import annotations

from collections.abc import Callable

import trio

from .. import constants as C

from ..link.clink import CLink
from ..link.link import Link

# At most this many datagrams in flight on a cable.  Go-back-N retransmits on a
# timer (20 ms by default) and the peer handles each datagram at a cost; a window of
# ~1,000 small datagrams (1500-byte underlay) takes it longer than that to ack, the
# timer fires though nothing was lost, and the copies bury it.  64 KB datagrams
# never reach the bound (the default window is ~25 of them).
WINDOW_DATAGRAMS = 128


def cable_window(max_mps: int) -> int:
    """The link window (micropackets) for datagrams of ``max_mps``: CLink's is fixed when
    it is made, so the daemons make it with this (the runner narrows Link's later)."""
    return min(C.SEQ_WINDOW_MPS, max_mps * WINDOW_DATAGRAMS)


class LinkRunner:
    """Owns the loop of one cable.

    ``on_input(now)`` lets the core consume the link's events after datagrams or
    timers (and forward, deliver, ...); ``after(now)`` flushes whatever the core
    queued, on this and other links.
    """

    def __init__(self, link: CLink | Link, transport, on_input: Callable[[float], None],
                 after: Callable[[float], None], timer: Callable[[], float] | None = None,
                 handle_timer: Callable[[float], list] | None = None) -> None:
        self.link = link
        self.transport = transport
        self.on_input = on_input
        self.after = after
        self._timer = timer or link.timer
        self._handle_timer = handle_timer or link.handle_timer
        self._scope: trio.CancelScope | None = None
        self.last_heard: float | None = None  # trio time of the last datagram from the peer
        # a UDP cable sends a batch at once (GSO) and bounds the micropackets per
        # datagram by its path MTU; other transports (the in-memory cable) one by one
        self._send_many = getattr(transport, "send_many", None) or self._send_each
        # gsnd's data plane replaces both ends: pump(now) receives a batch in C, the
        # link's datagrams leave through send_many (daemons/gsnd/dataplane.py)
        self.pump: Callable[[float], int] | None = None

    def use(self, pump: Callable[[float], int], send_many: Callable[[list], None]) -> None:
        self.pump, self._send_many = pump, send_many

    def _send_each(self, dgrams) -> None:
        for dgram in dgrams:
            self.transport.send(dgram)

    def fit(self) -> None:
        """New datagrams follow the cable's current path MTU (the Link reads max_mps and
        its window per batch)."""
        max_mps = getattr(self.transport, "max_mps", None)
        if max_mps is not None and max_mps != self.link.max_mps:
            self.link.max_mps = max_mps
            self.link.window = cable_window(max_mps)  # Link reads it per batch; CLink keeps its own

    def heard_ago(self) -> float | None:
        """Seconds since the peer's last datagram (None: never heard)."""
        return None if self.last_heard is None else round(trio.current_time() - self.last_heard, 3)

    def flush(self, now: float) -> None:
        self.fit()
        dgrams = self.link.datagrams(now)
        if dgrams:
            self._send_many(dgrams)
        self.rearm()

    def rearm(self) -> None:
        """The link's next deadline may be earlier now (after its datagrams were taken)."""
        if self._scope is not None:
            self._scope.deadline = min(self._scope.deadline, self._timer())

    async def run(self) -> None:
        receive = self.link.receive
        while True:
            with trio.CancelScope(deadline=self._timer()) as self._scope:
                await self.transport.wait_readable()
            self._scope = None
            now = trio.current_time()
            if self.pump is not None:
                if self.pump(now):
                    self.last_heard = now
            else:
                dgrams = self.transport.drain()
                if dgrams:
                    self.last_heard = now
                for dgram in dgrams:
                    receive(dgram, now)
            rtx = self._handle_timer(now)
            if rtx:
                self._send_many(rtx)
            self.on_input(now)
            # what came in took time to handle: acks and credits due by now leave now
            self.after(trio.current_time())
            await trio.lowlevel.checkpoint()
