"""Drive a HarpCore on trio: timers, inbound HARP payloads, outbound sends."""

from __future__ import annotations

from typing import Callable

import trio

from .core import HarpCore


class HarpRunner:
    def __init__(self, core: HarpCore, send: Callable[[bytes, bytes], None],
                 on_events: Callable[[list], None] = lambda evs: None) -> None:
        self.core = core
        self._send = send
        self._on_events = on_events
        self._wake = trio.Event()

    def step(self) -> None:
        """Flush what the core produced (call after feeding it)."""
        for d_ula, payload in self.core.outgoing():
            self._send(d_ula, payload)
        evs = self.core.events()
        if evs:
            self._on_events(evs)
        self._wake.set()  # the core's next timer may have moved

    def receive(self, src_ula: bytes, payload: bytes) -> None:
        self.core.receive(src_ula, payload, trio.current_time())
        self.step()

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
