"""Drive one link: wait for datagrams or the link's next timer, hand both to the core."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from .. import constants as C
from ..link.clink import CLink
from ..link.link import Link
from .trioprivate import wait_all_tasks_blocked


def cable_window(max_mps: int) -> int:
    """The link window (micropackets) for datagrams of ``max_mps``: counted in
    micropackets, not datagrams, so a 1500-byte underlay (36 per datagram) gets the same
    window as a 64 KB one; bounded by what the peer's receive buffer holds in datagrams
    of this size.  CLink's is fixed when it is made, so the daemons make it with this
    (the runner narrows Link's later)."""
    per_datagram = C.SHIM_BYTES + max_mps * C.MP_BYTES + C.RX_DATAGRAM_OVERHEAD_BYTES
    return max(max_mps, min(C.SEQ_WINDOW_MPS, C.SOCKET_BUFFER_BYTES // per_datagram * max_mps))


async def alone(waiting: Callable[[], bool] = lambda: False) -> bool:
    """True once every other task waits for a descriptor or a timer (trio's poll found
    nothing ready and nothing is runnable, and none waits on ``waiting()``), False if
    they kept running for C.DP_SLICE_S.  Only trio's epoll descriptor or its next
    deadline can wake one of them then, and a C loop that watches both (gsnd's dp_run,
    gsn-switch's SwitchPlane.run) may then wait in C until that deadline."""
    LinkRunner._idle_waiters += 1
    try:
        with trio.move_on_after(C.DP_SLICE_S):
            await wait_all_tasks_blocked()
            # two loops in one run (tests) woke together: one waiting in C would starve the other
            return LinkRunner._idle_waiters == 1 and not waiting()
        return False
    finally:
        LinkRunner._idle_waiters -= 1


class LinkRunner:
    """Owns the loop of one cable.

    ``on_input(now)`` lets the core consume the link's events after datagrams or
    timers (and forward, deliver, ...); ``after(now)`` flushes whatever the core
    queued, on this and other links.
    """

    _idle_waiters = 0  # runners of this process in _alone()

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
        # gsnd's data plane (daemons/gsnd/dataplane.py) replaces the loop: run_dataplane
        self.dataplane: Any = None
        self._high_water = 0
        self._own_timer: Callable[[], float] = lambda: float("inf")
        self._waiting: Callable[[], bool] = lambda: False

    def use(self, dataplane, high_water: int, own_timer: Callable[[], float],
            waiting: Callable[[], bool] = lambda: False) -> None:
        """Run the cable and the TAP through ``dataplane`` (DataPlane.run in C).
        ``own_timer()``: the core's next deadline besides the link's (the C loop keeps
        the link's ack, credit and keepalive times itself).  ``waiting()``: a task waits
        for what only a return from the loop tells it (room on a VC the loop drained):
        the loop then keeps its slice even while idle."""
        self.dataplane, self._high_water, self._own_timer = dataplane, high_water, own_timer
        self._waiting = waiting
        self._send_many = dataplane.send_many

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
        if self.dataplane is not None:
            return await self._run_dataplane()
        receive = self.link.receive
        while True:
            with trio.CancelScope(deadline=self._timer()) as self._scope:
                await self.transport.wait_readable()
            self._scope = None
            now = trio.current_time()
            dgrams = self.transport.drain()
            if dgrams:
                self.last_heard = now
            for dgram in dgrams:
                receive(dgram, now)
            self._handled(now)
            await trio.lowlevel.checkpoint()

    async def _run_dataplane(self) -> None:
        """The C loop (daemons/_loop.h) while the data plane is busy; trio's wait while it
        is idle.  Between two calls the other tasks run (a checkpoint), so a control
        socket waits at most until the loop sees trio's epoll descriptor ready, and
        trio's timers at most C.DP_SLICE_S.  While no other task can run (each waits for
        a descriptor of trio's or a timer), the loop waits in C too, until trio's next
        deadline: a frame or datagram after a quiet spell is then handled at once,
        without a trio pass first (one wake-up, not trio's epoll plus the loop's)."""
        dp = self.dataplane
        trio_fd = dp.trio_fd
        alone = False
        while True:
            now = trio.current_time()
            until = now + C.DP_SLICE_S
            if alone:
                until = now + min(trio.lowlevel.current_statistics().seconds_to_next_deadline, C.DP_IDLE_MAX_S)
            self.fit()  # the C link cuts datagrams at the cable's MTU (configured or the path's), as flush() does
            ran = dp.run(now, min(until, self._own_timer()), self._high_water, trio_fd)
            now = trio.current_time()
            if ran.datagrams:
                self.last_heard = now
            self._handled(now)
            alone = False
            if ran.idle and trio_fd >= 0:
                alone = await self._alone()
            elif ran.idle:
                with trio.CancelScope(deadline=self._timer()) as self._scope:
                    await dp.wait_readable()
                self._scope = None
            else:
                await trio.lowlevel.checkpoint()
                if ran.control:
                    # trio's poll wakes the task whose descriptor was ready only now, into
                    # the batch this task runs in, in either order: one more checkpoint lets
                    # it run before the next dp.run blocks the thread (else it waited for the
                    # loop's slice, ~2 ms: a ULP round trip took 2.8 ms instead of 0.7)
                    await trio.lowlevel.checkpoint()

    async def _alone(self) -> bool:
        return await alone(self._waiting)

    def _handled(self, now: float) -> None:
        """After input or a timer: retransmissions, the core's events, what it queued."""
        rtx = self._handle_timer(now)
        if rtx:
            self._send_many(rtx)
        self.on_input(now)
        # what came in took time to handle: acks and credits due by now leave now
        self.after(trio.current_time())
