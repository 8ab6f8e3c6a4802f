"""The trio driver of an end node's sans-IO core: the X and Y fabric sockets (each
taking datagrams only from its router), the timer task, and sending what the core
queued.  Used by snetd and by PacketWay's ServerNet ports.  Datagrams move in batches
(recvmmsg / sendmmsg, servernet._snetfwd.FabricSocket): a wake-up drains both fabrics,
then everything the core queued leaves in one call per fabric."""

from __future__ import annotations

import socket
from collections import Counter

import structlog
import trio

from daemons.runtime.log import CounterLog

from ._snetfwd import FabricSocket
from .constants import FABRIC_NAMES, NODE_BATCH, Fabric, RX_BURST, SOCKET_BUFFER_BYTES
from .endpoint import Endpoint

log = structlog.get_logger("servernet")
IDLE_TICK_S = 0.5  # the timer task looks at the core at least this often


class FabricDriver:
    def __init__(self, core: Endpoint, fabrics: dict[Fabric, tuple[tuple[str, int], tuple[str, int]]],
                 label: str = "node") -> None:
        self.core = core
        self.routers = {f: router for f, (_local, router) in fabrics.items()}
        self.socks: dict[Fabric, socket.socket] = {}
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
        self.wires = [(f, FabricSocket(s.fileno(), self.routers[f])) for f, s in self.socks.items()]
        self.tx: dict[int, FabricSocket] = dict(self.wires)  # by the fabric bit of the core's output
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
            by_fabric: dict[int, list[bytes]] = {}
            for fabric, dgram in out:
                by_fabric.setdefault(fabric, []).append(dgram)
            out.clear()
            for fabric, dgrams in by_fabric.items():
                full, errors = self.tx[fabric].send(dgrams)
                if full:
                    self.counters[f"drop_tx_full_{FABRIC_NAMES[fabric]}"] += full
                if errors:  # e.g. ICMP unreachable while the router is gone
                    self.counters[f"tx_error_{FABRIC_NAMES[fabric]}"] += errors
        if self.core.timer_moved(self.wake_at):
            self.kick.set()

    def drain(self, now: float) -> None:
        """Hand the core every datagram waiting on either fabric (up to RX_BURST each)."""
        core, counters = self.core, self.counters
        for fabric, wire in self.wires:
            for _ in range(RX_BURST // NODE_BATCH):
                dgrams, foreign, errors = wire.recv(NODE_BATCH)
                if foreign:
                    counters["drop_foreign_sender"] += foreign
                if errors:
                    counters[f"rx_error_{FABRIC_NAMES[fabric]}"] += errors
                for data in dgrams:
                    core.receive(fabric, data, now)
                if len(dgrams) + foreign + errors < NODE_BATCH:
                    break

    async def _rx(self, fabric: Fabric) -> None:
        sock = self.socks[fabric]
        while True:
            await trio.lowlevel.wait_readable(sock)
            self.drain(trio.current_time())
            self.flush()

    async def _timers(self) -> None:
        while True:
            self.kick = trio.Event()
            self.core.timer_moved(0.0)  # forget what moved: next_deadline sees it all
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
