"""ipoibd: one IPoIB port.  A UDP cable to its switch, a management socket to the SM,
one TAP per interface (ib0 and its P_Key children) presented the eIPoIB way, and a
control socket."""

from __future__ import annotations

import time
from collections import Counter
from functools import partial

import ipaddress

import structlog
import trio

from daemons.io.tap import Tap
from daemons.runtime.control import serve_control
from daemons.runtime.log import CounterLog
from daemons.runtime.notify import sd_notify
from daemons.wire.errors import LocalProtocolError

from . import kgroups
from .config import IpoibConfig
from .control import IPOIB_SCHEMA
from .portcore import PortCore
from .constants import DROPLOG_PERIOD_S, KERNEL_GROUPS_POLL_S, PUMP_BUDGET
from .fastpath import Port, PortFast, SettledCore
from daemons.runtime.corerunner import CoreRunner
from .udp import Udp

log = structlog.get_logger("ipoibd")


class IpoibDaemon:
    def __init__(self, cfg: IpoibConfig) -> None:
        self.cfg = cfg
        ifs: list[tuple[str, int | None]] = [(cfg.interface, None)] + [(f"{cfg.interface}.{pk:04x}", pk) for pk in cfg.children]
        self.core = PortCore(cfg.guid, cfg.guid, ifs)
        self.cable = Udp(cfg.local, cfg.peer)
        self.mgmt = Udp((cfg.local[0], 0), cfg.sm)
        self.taps: dict[str, Tap] = {}
        self.fast: PortFast | None = None  # the compiled steady state, once the TAPs are open
        self.runner = CoreRunner(self.core, self.flush)
        self.droplog = CounterLog(log)
        self.control_counters: Counter[str] = Counter()

    def flush(self) -> None:
        for item in self.core.outgoing():
            match item:
                case ("cable", data):
                    self.cable.send(data)
                case ("sm", data):
                    self.mgmt.send(data)
                case ("tap", name, frame):
                    self.taps[name].write(frame)
                case ("carrier", name, up, mtu):
                    tap = self.taps[name]
                    if up:
                        tap.configure(mtu=mtu)
                    tap.set_carrier(up)
                    log.info("carrier", interface=name, up=up, mtu=mtu)
        if self.fast is not None:
            self.fast.sync()

    @property
    def _fast(self) -> PortFast:
        """The compiled steady state: run() opens it before any task that uses it starts."""
        if self.fast is None:
            raise LocalProtocolError("ipoibd", "not running", "the data path used before run()")
        return self.fast

    async def _pumped(self) -> None:
        """ib/_ibfast.c's thread carries the steady state (TAPs <-> cable, no GIL); each frame
        or datagram it hands back goes through the core, whose output is flushed before that
        source is read again, so the order holds."""
        port = self._fast.port
        fd = port.start(trio.current_time() - time.perf_counter(), PUMP_BUDGET)  # trio's clock offset
        try:
            while True:
                await trio.lowlevel.wait_readable(fd)
                for src, data in port.take_slow():
                    now = trio.current_time()
                    self._fast.settle()
                    if src < 0:
                        self.core.on_cable(data, now)
                    else:
                        self.core.on_tap(self.core.ifaces[src].name, data, now)
                    self.runner.step()
                    port.resume(src)
        finally:
            port.stop()

    async def _mgmt(self) -> None:
        while True:
            await self.mgmt.wait_readable()
            now = trio.current_time()
            self._fast.settle()
            for data, _ in self.mgmt.drain():
                self.core.on_sm(data, now)
            self.runner.step()

    async def _kernel_groups(self) -> None:
        while True:
            now = trio.current_time()
            for ifc in self.core.ifaces:
                if ifc.tr is not None:
                    self.core.set_kernel_groups(ifc.name, kgroups.read(ifc.name, ifc.pkey), now)
            self.runner.step()
            await trio.sleep(KERNEL_GROUPS_POLL_S)

    def counters(self) -> tuple[Counter, dict[str, Counter], Counter]:
        """(port, per TAP, cable socket) counters: the Python path's and the compiled one's together."""
        port, taps, cable = self._fast.counters()
        port.update(self.core.counters)
        for name, tap in self.taps.items():
            taps[name].update(tap.counters)
        cable.update(self.cable.counters)
        return port, taps, cable

    async def _control(self, req: dict) -> dict:
        cmd = req["cmd"]
        self._fast.settle()  # the REMAC cache and shadow entries as the core would hold them
        if cmd == "status":
            port, taps, cable = self.counters()
            return {"ok": True, **self.core.status(), "counters": dict(port),
                    "taps": {n: dict(c) for n, c in taps.items()},
                    "sockets": {"cable": dict(cable), "sm": dict(self.mgmt.counters)},
                    "control": dict(self.control_counters)}
        if cmd == "neighbours":
            return {"ok": True, "neighbours": self.core.neighbours()}
        if cmd == "groups":
            return {"ok": True, "groups": self.core.groups()}
        return self._path(req["ip"])

    def _path(self, ip: str) -> dict:
        """The seed's path-info query: the kernel's neighbour entry for ``ip`` names the
        MAC; the shadow-ARP entry behind it holds the PathRecord."""
        try:
            target = ipaddress.ip_address(ip)
        except ValueError:
            return {"ok": False, "error": f"{ip!r} is not an IP address"}
        from pyroute2 import IPRoute

        with IPRoute() as ipr:
            for n in ipr.get_neighbours(family=10 if target.version == 6 else 2):
                if n.get_attr("NDA_DST") == str(target) and n.get_attr("NDA_LLADDR"):
                    mac = bytes.fromhex(n.get_attr("NDA_LLADDR").replace(":", ""))
                    info = self.core.path_info(mac)
                    if info is not None:
                        return {"ok": True, "ip": str(target), **info}
        return {"ok": False, "error": f"{target}: no neighbour entry (EAGAIN: not resolved yet)"}

    async def _drops(self) -> None:
        """New drop reasons logged, then at most every 10 s per reason (off the data path)."""
        while True:
            await trio.sleep(DROPLOG_PERIOD_S)
            self.droplog.update("port", self.counters()[0], trio.current_time())

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self.cfg.runtime_dir.mkdir(parents=True, exist_ok=True)
        for ifc in self.core.ifaces:
            tap = self.taps[ifc.name] = Tap(ifc.name)
            tap.configure(mac=self.core.mac)
            tap.set_carrier(False)  # up only after the broadcast join
        self.fast = PortFast(self.core, Port(self.cable.sock.fileno(), *self.cfg.peer),
                             [self.taps[i.name].fd for i in self.core.ifaces])
        self.fast.sync()
        self.runner = CoreRunner(SettledCore(self.fast), self.flush)
        log.info("port.start", guid=f"{self.cfg.guid:#x}", interfaces=list(self.taps))
        try:
            async with trio.open_nursery() as n:
                sock = self.cfg.runtime_dir / f"{self.cfg.interface}.ctl"
                await n.start(partial(serve_control, str(sock), self._control, IPOIB_SCHEMA,
                                  counters=self.control_counters))
                n.start_soon(self._pumped)
                n.start_soon(self._mgmt)
                n.start_soon(self._kernel_groups)
                n.start_soon(self.runner.run)
                n.start_soon(self._drops)
                sd_notify("READY=1")
                task_status.started()
        finally:
            for tap in self.taps.values():
                tap.set_carrier(False)
                tap.close()
