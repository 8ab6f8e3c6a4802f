"""The trio driver of an end node: the X and Y fabric sockets (each taking datagrams
only from its router), the compiled engine's I/O thread, the timer task, and sending
what the Python core queued.  Used by snetd and by PacketWay's ServerNet ports.

The engine (servernet._snetnode via servernet.fastnode) receives on both fabrics in a
thread of its own without the GIL, answers what it can and sends block WRITEs; it
writes an eventfd when it has something for Python, and a trio task then applies its
events to the core.  The core's own datagrams leave by sendmmsg
(servernet._snetfwd.FabricSocket), one call per fabric."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import Counter

import structlog
import trio

from daemons.runtime.log import CounterLog

from ._snetfwd import FabricSocket
from .constants import FABRIC_NAMES, FORWARD_POLL_MS, SOCKET_BUFFER_BYTES, Fabric
from .endpoint import Endpoint
from .fastnode import FastNode

log = structlog.get_logger("servernet")
IDLE_TICK_S = 0.5  # the timer task looks at the core at least this often


class FabricDriver:
    def __init__(self, core: Endpoint, fabrics: dict[Fabric, tuple[tuple[str, int], tuple[str, int]]],
                 label: str = "node") -> None:
        self.core = core
        self.routers = {f: router for f, (_local, router) in fabrics.items()}
        self.socks: dict[Fabric, socket.socket] = {}
        self.notify_fd = -1
        try:
            for fabric, (local, _router) in fabrics.items():
                s = socket.socket(socket.AF_INET6 if ":" in local[0] else socket.AF_INET, socket.SOCK_DGRAM)
                self.socks[fabric] = s
                for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
                    s.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER_BYTES)
                s.bind(local)
                s.setblocking(False)
            self.notify_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        except BaseException:
            self._close_files()
            raise
        self.tx: dict[int, FabricSocket] = {f: FabricSocket(s.fileno(), self.routers[f]) for f, s in self.socks.items()}
        self.fast = FastNode(core, clock=time.monotonic)
        fx, fy = self.socks.get(Fabric.X), self.socks.get(Fabric.Y)
        self.fast.engine.attach(fx.fileno() if fx else -1, self.routers.get(Fabric.X), fy.fileno() if fy else -1,
                                self.routers.get(Fabric.Y), self.notify_fd)
        self.label = label
        self.counters: Counter[str] = Counter()
        self.drops = CounterLog(log)
        self.kick = trio.Event()
        self.wake_at = float("inf")  # when the timer task wakes next
        self.thread: threading.Thread | None = None

    def close(self) -> None:
        self.fast.engine.stop()
        if self.thread is not None and self.thread.is_alive():
            self.thread.join()  # at most FORWARD_POLL_MS: the sockets outlive the loop using them
        self._close_files()

    def _close_files(self) -> None:
        for s in self.socks.values():
            s.close()
        if self.notify_fd >= 0:
            os.close(self.notify_fd)
            self.notify_fd = -1

    def all_counters(self) -> dict[str, Counter[str]]:
        """node (the driver's added), avt and bte counters, the engine's included."""
        c = self.fast.counters()
        c["node"] += self.counters
        return c

    def flush(self) -> None:
        """Send what the core queued; wake the timer task if a deadline moved earlier."""
        out = self.core.out
        if out:
            by_fabric: dict[int, list[bytes]] = {}
            for fabric, dgram in out:
                by_fabric.setdefault(fabric, []).append(dgram)
            out.clear()
            for fabric, dgrams in by_fabric.items():
                wire = self.tx.get(fabric)
                if wire is None:
                    self.counters[f"tx_error_{FABRIC_NAMES[fabric]}"] += len(dgrams)  # no socket on that fabric
                    continue
                full, errors = wire.send(dgrams)
                if full:
                    self.counters[f"drop_tx_full_{FABRIC_NAMES[fabric]}"] += full
                if errors:  # e.g. ICMP unreachable while the router is gone
                    self.counters[f"tx_error_{FABRIC_NAMES[fabric]}"] += errors
        self.fast.sync_paths()
        if self.core.timer_moved(self.wake_at):
            self.kick.set()

    def _serve(self) -> None:
        self.fast.engine.serve(FORWARD_POLL_MS)  # until close() stops it

    async def _events(self) -> None:
        while True:
            await trio.lowlevel.wait_readable(self.notify_fd)
            try:
                os.eventfd_read(self.notify_fd)
            except BlockingIOError:
                pass
            self.fast.poll(trio.current_time())
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
            c = self.all_counters()
            self.drops.update(self.label, c["node"] + c["bte"], trio.current_time())
            if self.thread is not None and not self.thread.is_alive():  # it never ends on its own
                raise RuntimeError(f"{self.label}: the fabric thread ended")

    def start(self, nursery: trio.Nursery) -> None:
        self.thread = threading.Thread(target=self._serve, name="snet-node", daemon=True)
        self.thread.start()
        nursery.start_soon(self._events)
        nursery.start_soon(self._timers)
