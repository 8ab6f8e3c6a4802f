"""ib-switch: UDP cables to its neighbours, a management socket to the SM, a control
socket; forwarding is the switch core's."""

from __future__ import annotations

from collections import Counter
from functools import partial

import structlog
import trio

from daemons.runtime.control import serve_control
from daemons.runtime.log import CounterLog
from daemons.runtime.notify import sd_notify

from .config import SwitchConfig
from .control import SWITCH_SCHEMA
from .constants import DROPLOG_PERIOD_S
from .fastpath import Switch, SwitchFast
from daemons.runtime.corerunner import CoreRunner
from .switchcore import SwitchCore
from .udp import Udp

log = structlog.get_logger("ib-switch")


class SwitchDaemon:
    def __init__(self, cfg: SwitchConfig) -> None:
        self.cfg = cfg
        self.core = SwitchCore(cfg.guid, [p.number for p in cfg.ports])
        self.cables = {p.number: Udp(p.local, p.peer) for p in cfg.ports}
        self.mgmt = Udp(cfg.mgmt_local or ("0.0.0.0", 0), cfg.sm)
        self.fast = SwitchFast(self.core, Switch([(p.number, self.cables[p.number].sock.fileno(), *p.peer) for p in cfg.ports]))
        self.runner = CoreRunner(self.core, self.flush)
        self.droplog = CounterLog(log)
        self.control_counters: Counter[str] = Counter()

    def flush(self) -> None:
        for item in self.core.outgoing():
            if item[0] == "cable":
                self.cables[item[1]].send(item[2])
            else:
                self.mgmt.send(item[1])

    async def _pumped(self) -> None:
        """ib/_ibfast.c's thread forwards unicast by the LFT (no GIL); what it hands back
        (hellos, multicast, unrouted) goes through the core and out before that port is
        read again."""
        sw = self.fast.switch
        fd = sw.start()
        try:
            while True:
                await trio.lowlevel.wait_readable(fd)
                now = trio.current_time()
                for number, data in sw.take_slow():
                    for out, d in self.core.on_cable(number, data, now):
                        self.cables[out].send(d)
                    sw.resume(number)
                if self.core.timer() <= now:  # e.g. a new neighbour to report
                    self.runner.step()
        finally:
            sw.stop()

    async def _mgmt(self) -> None:
        while True:
            await self.mgmt.wait_readable()
            for data, _ in self.mgmt.drain():
                self.core.on_sm(data)
            self.fast.sync()
            self.runner.step()

    def counters(self) -> tuple[Counter, dict[int, Counter]]:
        """(switch core, per cable socket) counters: the Python path's and the compiled one's together."""
        core, socks = self.fast.counters()
        core.update(self.core.counters)
        for n, u in self.cables.items():
            socks.setdefault(n, Counter()).update(u.counters)
        return core, socks

    async def _control(self, req: dict) -> dict:
        core, socks = self.counters()
        return {"ok": True, **self.core.status(), "counters": dict(core),
                "sockets": {str(n): dict(c) for n, c in socks.items()} | {"sm": dict(self.mgmt.counters)},
                "control": dict(self.control_counters)}

    async def _drops(self) -> None:
        """New drop reasons logged, then at most every 10 s per reason (off the data path)."""
        while True:
            await trio.sleep(DROPLOG_PERIOD_S)
            self.droplog.update("switch", self.counters()[0], trio.current_time())

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self.cfg.runtime_dir.mkdir(parents=True, exist_ok=True)
        log.info("switch.start", guid=f"{self.cfg.guid:#x}", ports=[p.number for p in self.cfg.ports])
        async with trio.open_nursery() as n:
            await n.start(partial(serve_control, str(self.cfg.runtime_dir / "control.sock"), self._control, SWITCH_SCHEMA,
                                  counters=self.control_counters))
            n.start_soon(self._pumped)
            n.start_soon(self._mgmt)
            n.start_soon(self.runner.run)
            n.start_soon(self._drops)
            sd_notify("READY=1")
            task_status.started()
