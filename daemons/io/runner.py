"""Drive one link: wait for datagrams or the link's next timer, hand both to the core."""

from __future__ import annotations

from typing import Callable

import trio

from ..link.clink import CLink
from ..link.link import Link


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

    def flush(self, now: float) -> None:
        send = self.transport.send
        for dgram in self.link.datagrams(now):
            send(dgram)
        if self._scope is not None:
            self._scope.deadline = min(self._scope.deadline, self._timer())

    async def run(self) -> None:
        receive = self.link.receive
        while True:
            with trio.CancelScope(deadline=self._timer()) as self._scope:
                await self.transport.wait_readable()
            self._scope = None
            now = trio.current_time()
            for dgram in self.transport.drain():
                receive(dgram, now)
            for dgram in self._handle_timer(now):
                self.transport.send(dgram)
            self.on_input(now)
            self.after(now)
            await trio.lowlevel.checkpoint()
