"""Drive a sans-IO core on trio: sleep until its next timer or a wake-up, run the
timer, then let the daemon flush what the core produced.

A core may keep ``timers_changed``: set when it adds or moves a timer, so that feeding
it a packet re-reads its next timer only when that can have moved (the data path then
costs no extra task switch)."""

from __future__ import annotations

from collections.abc import Callable

import trio


class Runner:
    def __init__(self, core, flush: Callable[[], None]) -> None:
        self.core = core
        self.flush = flush
        self._wake = trio.Event()

    def poke(self) -> None:
        """The core was fed: flush now; re-read its next timer if it may have moved."""
        self.flush()
        if getattr(self.core, "timers_changed", True):
            self._wake.set()

    async def run(self) -> None:
        while True:
            self._wake = trio.Event()
            if hasattr(self.core, "timers_changed"):
                self.core.timers_changed = False
            deadline = self.core.timer()
            if trio.current_time() < deadline:
                with trio.move_on_at(deadline):
                    await self._wake.wait()
            now = trio.current_time()
            if now >= self.core.timer():
                self.core.handle_timer(now)
                self.flush()
            await trio.lowlevel.checkpoint()
