"""In-memory lossy cable for simulations on trio's virtual clock.

Seeded drop, duplication and reordering (a reordered datagram is delayed by a few
extra delivery times).  Each end looks like a transport to a link runner.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter, deque

import trio


class _End:
    def __init__(self, cable: MemoryCable, index: int) -> None:
        self.cable = cable
        self.index = index
        self.inbox: deque[bytes] = deque()
        self.readable = trio.Event()
        self.counters: Counter[str] = Counter()

    async def wait_readable(self) -> None:
        if not self.inbox:
            await self.readable.wait()

    def drain(self, limit: int = 256) -> list[bytes]:
        out = [self.inbox.popleft() for _ in range(min(limit, len(self.inbox)))]
        if not self.inbox:
            self.readable = trio.Event()
        return out

    def send(self, data: bytes) -> None:
        self.cable._send(1 - self.index, data)

    def _deliver(self, data: bytes) -> None:
        self.inbox.append(data)
        self.readable.set()


class MemoryCable:
    def __init__(self, rng: random.Random, *, delay=0.0002, drop=0.0, duplicate=0.0, reorder=0.0) -> None:
        self.rng = rng
        self.delay, self.drop, self.duplicate, self.reorder = delay, drop, duplicate, reorder
        self.ends = (_End(self, 0), _End(self, 1))
        self._heap: list = []
        self._seq = 0
        self._wake = trio.Event()
        self.counters: Counter[str] = Counter()
        self.connected = True

    def _send(self, to: int, data: bytes) -> None:
        if not self.connected:
            self.counters["unplugged"] += 1
            return
        r = self.rng.random()
        if r < self.drop:
            self.counters["dropped"] += 1
            return
        copies = 2 if self.rng.random() < self.duplicate else 1
        self.counters["duplicated"] += copies - 1
        now = trio.current_time()
        for _ in range(copies):
            extra = self.delay * self.rng.randint(2, 6) if self.rng.random() < self.reorder else 0.0
            self.counters["reordered"] += bool(extra)
            self._seq += 1
            heapq.heappush(self._heap, (now + self.delay + extra, self._seq, to, bytes(data)))
        self._wake.set()

    async def run(self) -> None:
        while True:
            if not self._heap:
                self._wake = trio.Event()
                await self._wake.wait()
                continue
            when = self._heap[0][0]
            if trio.current_time() < when:
                with trio.move_on_at(when):
                    self._wake = trio.Event()
                    await self._wake.wait()
                continue
            while self._heap and self._heap[0][0] <= trio.current_time():
                _, _, to, data = heapq.heappop(self._heap)
                self.ends[to]._deliver(data)
