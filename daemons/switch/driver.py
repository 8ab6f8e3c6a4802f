"""The trio side of a switch's fabric agent: sleep until its next deadline (a walk to
start, a request to give up on), run it, flush what it queued."""

from __future__ import annotations

from collections.abc import Callable

import trio


class AgentTimer:
    def __init__(self, switch, flush: Callable[[float], None]) -> None:
        self.switch = switch
        self.flush = flush
        self._scope: trio.CancelScope | None = None

    def poke(self) -> None:
        """The agent may have an earlier deadline now (call after feeding the switch)."""
        if self._scope is not None:
            self._scope.deadline = min(self._scope.deadline, self.switch.agent.timer())

    async def run(self) -> None:
        while True:
            with trio.CancelScope(deadline=self.switch.agent.timer()) as self._scope:
                await trio.sleep_forever()
            self._scope = None
            now = trio.current_time()
            self.switch.handle_timer(now)
            self.flush(now)
            await trio.lowlevel.checkpoint()
