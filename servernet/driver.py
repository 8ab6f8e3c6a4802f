"""The trio driver of an end node's sans-IO core: the X and Y fabric sockets (each
taking datagrams only from its router), the timer task, and sending what the core
queued.  Used by snetd and by PacketWay's ServerNet ports."""

from __future__ import annotations

import socket
from collections import Counter

import structlog
import trio

from daemons.runtime.log import CounterLog

from .constants import FABRIC_NAMES, MAX_DATAGRAM_II, RX_BURST, SOCKET_BUFFER_BYTES
from .endpoint import Endpoint

log = structlog.get_logger("servernet")
IDLE_TICK_S = 0.5  # the timer task looks at the core at least this often


class FabricDriver:
    def __init__(self, core: Endpoint, fabrics: dict[int, tuple[tuple, tuple]], label: str = "node") -> None:
        self.core = core
        self.routers = {f: router for f, (_local, router) in fabrics.items()}
        self.socks: dict[int, socket.socket] = {}
        try:
            for fabric, (local, _router) in fabrics.items():
                s = socket.socket(socket.AF_INET6 if ":" in local[0] else socket.AF_INET, socket.SOCK_DGRAM)
                self.socks[fabric] = s
                for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
                    s.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER_BYTES)
                s.bind(local)
                s.setblocking(False)
        except BaseException:
            self.close()
            raise
        self.label = label
        self.counters: Counter[str] = Counter()
        self.drops = CounterLog(log)
        self.kick = trio.Event()
        self.wake_at = float("inf")  # when the timer task wakes next

    def close(self) -> None:
        for s in self.socks.values():
            s.close()

    def flush(self) -> None:
        """Send what the core queued; wake the timer task if a deadline moved earlier."""
        out = self.core.out
        if out:
            for fabric, dgram in out:
                try:
                    self.socks[fabric].sendto(dgram, self.routers[fabric])
                except BlockingIOError:
                    self.counters[f"drop_tx_full_{FABRIC_NAMES[fabric]}"] += 1
                except OSError:  # e.g. ICMP unreachable while the router is gone
                    self.counters[f"tx_error_{FABRIC_NAMES[fabric]}"] += 1
            out.clear()
        if self.core.next_deadline() < self.wake_at:
            self.kick.set()

    async def _rx(self, fabric: int) -> None:
        sock, router, core = self.socks[fabric], self.routers[fabric], self.core
        while True:
            await trio.lowlevel.wait_readable(sock)
            now = trio.current_time()
            for _ in range(RX_BURST):
                try:
                    data, src = sock.recvfrom(MAX_DATAGRAM_II + 1)
                except BlockingIOError:
                    break
                except OSError:
                    self.counters[f"rx_error_{FABRIC_NAMES[fabric]}"] += 1
                    continue
                if src[:2] != router:
                    self.counters["drop_foreign_sender"] += 1
                    continue
                core.receive(fabric, data, now)
            self.flush()

    async def _timers(self) -> None:
        while True:
            self.kick = trio.Event()
            self.wake_at = min(self.core.next_deadline(), trio.current_time() + IDLE_TICK_S)
            with trio.move_on_at(self.wake_at):
                await self.kick.wait()
            self.core.tick(trio.current_time())
            self.flush()
            self.drops.update(self.label, self.counters | self.core.counters, trio.current_time())

    def start(self, nursery: trio.Nursery) -> None:
        for fabric in self.socks:
            nursery.start_soon(self._rx, fabric)
        nursery.start_soon(self._timers)
