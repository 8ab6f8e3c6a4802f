"""Drive a sans-IO core on trio (harpd, stpd, the IB daemons): sleep until its next
timer or a wake-up, run the timer, then flush what the core produced.

The core has ``timer()`` (its next deadline) and ``handle_timer(now)``; ``flush`` takes
what it produced.  :func:`drain` builds the usual flush for a core with ``outgoing()``
and ``events()``.  A core may keep ``timers_changed``: set when it adds or moves a
timer, so that feeding it a packet re-reads its next timer only when that can have
moved (the data path then costs no extra task switch)."""

from __future__ import annotations

from collections.abc import Callable

import trio


def drain(core, send: Callable[[tuple], None], on_events: Callable[[list], None] = lambda evs: None
          ) -> Callable[[], None]:
    """A flush that hands each of the core's outgoing items to ``send`` and its events,
    if any, to ``on_events``."""
    def flush() -> None:
        for item in core.outgoing():
            send(item)
        evs = core.events()
        if evs:
            on_events(evs)
    return flush


class CoreRunner:
    def __init__(self, core, flush: Callable[[], None]) -> None:
        self.core = core
        self.flush = flush
        self._wake = trio.Event()

    def step(self) -> None:
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
