"""gsn-switch's trio driver: one UDP cable per port, a control socket."""

from __future__ import annotations

import os
import select
from collections import Counter
from functools import partial
from typing import cast

import structlog
import trio

from ..io.runner import LinkRunner, cable_window
from ..io.runner import alone as wait_alone
from ..io.trioprivate import trio_epoll_fd
from ..io.udp import UdpTransport
from ..runtime.control import serve_control
from ..runtime.schema import Schema
from ..runtime.log import CounterLog
from ..runtime.metrics import Family, counter_families, link_families
from ..runtime.notify import StatusLine, sd_notify
from .. import constants as C
from ..link.clink import CONTROL, DEADLINE, IDLE, REASONS
from ..wire.errors import LocalProtocolError
from .config import SwitchConfig
from .core import Switch
from .driver import AgentTimer

log = structlog.get_logger("gsn-switch")

# The control socket's requests (gsnctl -s .../control.sock status).
CONTROL_SCHEMA = Schema({"status": {}, "fabric": {}})


def plane_usable(transports: dict) -> bool:
    """The compiled data path (Switch(plane=True), daemons/_switchloop.h) receives the
    cables itself: UDP cables to known peers, without a key (the C receive knows nothing
    of the MAC), at most SWITCH_PLANE_PORTS ports."""
    return len(transports) <= C.SWITCH_PLANE_PORTS and all(
        t.peer is not None and t.auth is None for t in transports.values())


def _mtu_changed(port: int, status: dict) -> None:
    log.info("cable.mtu", port=port, **status)


class SwitchDaemon:
    def __init__(self, cfg: SwitchConfig) -> None:
        self.cfg = cfg
        now = trio.current_time()
        self.transports: dict[int, UdpTransport] = {
            p.number: UdpTransport(p.local, p.peer, mtu=p.mtu, key=p.key, on_mtu=partial(_mtu_changed, p.number))
            for p in cfg.ports}
        self.core = Switch(cfg.switch_id, [p.number for p in cfg.ports], now, broadcast=cfg.broadcast,
                           static=cfg.static, cable_ids={p.number: p.cable_id for p in cfg.ports},
                           buffers=cfg.buffers, timers=cfg.timers,
                           management_ports=[p.number for p in cfg.ports if p.management],
                           trust_source_ports=[p.number for p in cfg.ports if p.trust_source],
                           fabric_ports=[p.number for p in cfg.ports if p.switch],
                           windows={n: cable_window(t.max_mps) for n, t in self.transports.items()},
                           plane=cfg.data_path == "compiled" and plane_usable(self.transports))
        self.runners = {
            n: LinkRunner(self.core.ports[n].link, self.transports[n],
                          on_input=partial(self._input, n), after=self._flush)
            for n in self.transports
        }
        if self.core.plane is not None:
            # one C loop (SwitchPlane.run) receives every cable, forwards, pumps and sends: _run_plane
            for n, t in self.transports.items():
                self.core.plane.cable(n, t)
        self.agent_timer = AgentTimer(self.core, self._flush)
        self._generation = 0
        self.drops = CounterLog(log)
        self.control_counters: Counter[str] = Counter()
        self.loop_returns: Counter[str] = Counter()  # why SwitchPlane.run returned (gsnctl status: "loop")
        self.status_line = StatusLine()
        self.ports_cfg = {p.number: p for p in cfg.ports}

    async def _run_plane(self) -> None:
        """The compiled data path: SwitchPlane.run (daemons/_switchrun.h) receives every
        cable, forwards, pumps and sends in C, waiting with the GIL released, until Python
        has work (a link's events or timer, a control socket, a refused send, the slice or
        the fabric agent's deadline); then one pass here.  While nothing arrives and no
        other task can run, it waits in C until trio's next deadline (io/runner.py alone(),
        as gsnd's loop does): a datagram after a quiet spell is forwarded at once, without a
        trio pass first (that pass was most of a ping's time through the switch).  Without
        trio's epoll descriptor it waits in trio on every cable (no wake-ups while idle)."""
        plane = self.core.plane
        if plane is None:
            raise LocalProtocolError("gsn-switch", "python data path", "the compiled plane's loop started without it")
        trio_fd = trio_epoll_fd()
        ready = select.epoll()  # readable when a cable is: the idle wait
        for t in self.transports.values():
            ready.register(t.sock.fileno(), select.EPOLLIN)
        links = [p.link for p in self.core.ports.values()]
        alone = False
        try:
            while True:
                now = trio.current_time()
                until = now + C.SWITCH_SLICE_S
                if alone:  # no other task can run before trio's next deadline: wait in C until then
                    until = now + min(trio.lowlevel.current_statistics().seconds_to_next_deadline, C.DP_IDLE_MAX_S)
                reason, got, refused = plane.run(now, min(until, self.core.agent.timer()), trio_fd)
                now = trio.current_time()
                self.loop_returns[REASONS[reason]] += 1
                for n, dgrams in refused.items():
                    self.transports[n].send_many(dgrams)  # the Python path re-cuts, learns, counts
                for n in got:
                    self.runners[n].last_heard = now
                if reason != DEADLINE:  # the slice only ran out: the plane pumped and sent all, no timer is due
                    self._plane_pass(now)
                alone = False
                if reason == IDLE and trio_fd >= 0:
                    alone = await wait_alone()
                elif reason == IDLE:
                    with trio.move_on_at(min(link.timer() for link in links)):
                        await trio.lowlevel.wait_readable(ready.fileno())
                else:
                    await trio.lowlevel.checkpoint()
                    if reason == CONTROL:  # the woken task runs before run() blocks again (io/runner.py)
                        await trio.lowlevel.checkpoint()
        finally:
            ready.close()

    def _plane_pass(self, now: float) -> None:
        """After SwitchPlane.run: retransmissions and dead links (handle_timer), each port's
        events, then what they queued."""
        for n, r in self.runners.items():
            rtx = r.link.handle_timer(now)
            if rtx:
                self.transports[n].send_many(rtx)
            self._input(n, now)
        self._flush(trio.current_time())

    def _notify_status(self) -> None:
        up = sum(p.link.up for p in self.core.ports.values())
        self.status_line.update(f"{up} of {len(self.core.ports)} ports up, {len(self.core.table)} ULAs")

    def _input(self, n: int, now: float) -> None:
        link = self.core.ports[n].link
        was_up = link.up
        self.core.process(n, now)
        if link.up != was_up or link.counters["link_up"] != getattr(self, f"_ups{n}", 0):
            setattr(self, f"_ups{n}", link.counters["link_up"])
            if link.up:
                log.info("port.up", port=n)
            else:
                log.warning("port.down", port=n)

    def _flush(self, now: float) -> None:
        if self.core.plane is not None:  # every port's datagrams built and sent in one C call
            for r in self.runners.values():
                r.fit()
            for n, refused in self.core.plane.flush(now).items():
                self.transports[n].send_many(refused)  # the Python path re-cuts, learns, counts
            for r in self.runners.values():
                r.rearm()
        else:
            for r in self.runners.values():
                r.flush(now)
        self.agent_timer.poke()
        agent = self.core.agent
        if agent.generation != self._generation:
            self._generation = agent.generation
            m = agent.map
            if m is None:  # a new generation comes with its map
                return
            log.info("fabric.mapped", generation=agent.generation, switches=len(m.switches), links=len(m.links),
                     manager=m.manager, endpoints=None if agent.endpoints is None else len(agent.endpoints),
                     **agent.last_run)

    async def _control(self, req: dict) -> dict:
        if req["cmd"] == "fabric":
            return {"ok": True, "fabric": self.core.agent.describe(), "switch_id": self.core.switch_id}
        st = self.core.status()  # "status", the only command CONTROL_SCHEMA lets through
        ports = cast("dict[str, dict[str, object]]", st["ports"])  # SwitchCore.status: a dict per port
        for n, t in self.transports.items():
            ports[str(n)]["cable"] = {**t.status(), **t.counters, "last_heard_s": self.runners[n].heard_ago(),
                                            "local": list(self.ports_cfg[n].local), "peer": list(self.ports_cfg[n].peer)}
        st["control"] = dict(self.control_counters)
        st["data_path"] = "compiled" if self.core.plane is not None else "python"
        if self.core.plane is not None:
            st["loop"] = dict(self.loop_returns)
        return {"ok": True, "status": st}

    def metrics(self) -> list[Family]:
        fams = [Family("gsn_switch_ulas", "gauge", "Entries in the switch's ULA table.").add(len(self.core.table))]
        heard = Family("gsn_link_last_heard_seconds", "gauge", "Seconds since the cable peer's last datagram.")
        for n, p in self.core.ports.items():
            fams += link_families(p.link.status(), port=n)
            ago = self.runners[n].heard_ago()
            heard.add(float("nan") if ago is None else ago, port=n)
            fams += counter_families(p.link.counters, "link", port=n)
            fams += counter_families(p.counters, "port", port=n)
            fams += counter_families(self.transports[n].counters, "cable", port=n)
        fams += [heard, *counter_families(self.core.counters, "switch"),
                 *counter_families(self.control_counters, "control")]
        return fams

    async def _stats(self) -> None:
        while True:
            await trio.sleep(1.0)
            now = trio.current_time()
            for n, p in self.core.ports.items():
                self.transports[n].refresh_mtu()
                self.drops.update(f"port{n}.link", p.link.counters, now)
                self.drops.update(f"port{n}", p.counters, now)
                self.drops.update(f"port{n}.cable", self.transports[n].counters, now)
            self.drops.update("switch", self.core.counters, now)
            self._notify_status()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        os.makedirs(self.cfg.runtime_dir, exist_ok=True)
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(serve_control, self.cfg.control_path, self._control, CONTROL_SCHEMA,
                                        counters=self.control_counters))
            if self.core.plane is not None:
                nursery.start_soon(self._run_plane)
            else:
                for r in self.runners.values():
                    nursery.start_soon(r.run)
            nursery.start_soon(self._stats)
            nursery.start_soon(self.agent_timer.run)
            log.info("switch.started", id=self.cfg.switch_id, ports=len(self.runners), broadcast=self.cfg.broadcast,
                     data_path="compiled" if self.core.plane is not None else "python",
                     management=[p.number for p in self.cfg.ports if p.management] or None,
                     trust_source=[p.number for p in self.cfg.ports if p.trust_source] or None,
                     switch_ports=[p.number for p in self.cfg.ports if p.switch] or None)
            sd_notify("READY=1")
            self._notify_status()
            task_status.started()
