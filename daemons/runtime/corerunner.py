"""Drive any sans-IO core that has ``outgoing()``, ``events()``, ``timer()`` and
``handle_timer(now)`` on trio (harpd, stpd)."""

from __future__ import annotations

from collections.abc import Callable

import trio


class CoreRunner:
    def __init__(self, core, send: Callable[[tuple], None], on_events: Callable[[list], None] = lambda evs: None):
        self.core = core
        self._send = send
        self._on_events = on_events
        self._wake = trio.Event()

    def step(self) -> None:
        """Flush what the core produced (call after feeding it)."""
        for item in self.core.outgoing():
            self._send(item)
        evs = self.core.events()
        if evs:
            self._on_events(evs)
        self._wake.set()  # the core's next timer may have moved

    async def run(self) -> None:
        while True:
            self._wake = trio.Event()
            deadline = self.core.timer()
            if trio.current_time() < deadline:
                with trio.move_on_at(deadline):
                    await self._wake.wait()
            if trio.current_time() >= self.core.timer():
                self.core.handle_timer(trio.current_time())
                self.step()
            await trio.lowlevel.checkpoint()
