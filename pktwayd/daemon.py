"""pktwayd's trio driver: one router = two half-routers.  Each half sits on a GSN
fabric through that fabric's gsnd ULP socket (the L2RH of a GSN SAN is the
destination ULA) and follows the switch's ULA list through gsnd's control socket.
The twins share this process (the inter-SAN link is a function call), or the other
half runs in another pktwayd and the two are joined by a GSN cable over UDP."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Protocol, TypeVar

import structlog
import trio

from daemons.constants import ULA_BROADCAST, ULA_HARP_SERVER
from daemons.runtime.config import ConfigError
from daemons.runtime.control import request, serve_control
from daemons.runtime.schema import Schema
from daemons.runtime.metrics import Family, counter_families
from daemons.runtime.notify import StatusLine, sd_notify
from daemons.ulpclient import ulp_session
from daemons.wire.ula import format_ula, parse_ula
from ib.udport import AsyncIbPort
from servernet.pwport import AsyncSnetPort

from .config import HalfConfig, RouterConfig
from .constants import ETHERTYPE_PKTWAY
from . import fastpath
from .eep import L2RH, Packet, Symbol
from .engine import Engine
from .routing import HalfRouter, native_route
from .twinlink import TwinLink
from .udpsan import AsyncSanPort, native

log = structlog.get_logger("pktwayd")

# The control socket's requests (pktway routes).
CONTROL_SCHEMA = Schema({"routes": {}})
VC = 1
T = TypeVar("T")



def _hop(r: L2RH | Symbol) -> str:
    """One source-route element as the routes command shows it: an L2RH's route bytes in hex,
    a symbol as S<type>."""
    return r.route.hex() if isinstance(r, L2RH) else f"S{r.stype:05x}"

class SanClient(Protocol):
    """What a half sends through: gsnd's ULP client, or its port on an emulated SAN."""

    def send_nowait(self, route: bytes, payload: bytes, /, *, vc: int = ..., ethertype: int) -> None: ...


def _given(value: T | None, half: HalfConfig, what: str) -> T:
    """A field of ``half`` its kind needs (config.load sets it for that kind)."""
    if value is None:
        raise ConfigError(f"half {half.addr:#x} ({half.kind}): {what} missing")
    return value
NOT_NODES = {ULA_BROADCAST, ULA_HARP_SERVER}  # switch-table entries that are no port's node


def map_routes(reply: dict) -> set[bytes] | None:
    """The node routes (ULAs) of gsnd's ``ulas`` answer, or None if it is not one."""
    try:
        return {parse_ula(u["ula"]) for u in reply["ulas"]} - NOT_NODES
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


class Half:
    def __init__(self, cfg: HalfConfig, twin_addr: int, rcfg: RouterConfig) -> None:
        self.cfg = cfg
        sn = int(time.time()) & 0xFFFFFFFF or 1  # spec §3.2: restarts still look newer
        hr = HalfRouter(cfg.addr, cfg.san_id, cfg.mtu, twin_addr, cfg.nodes, sn=sn, k=rcfg.k)
        self.engine = Engine(hr, name=rcfg.name_bytes, k=rcfg.k or 3, liveness=rcfg.liveness,
                             now=trio.current_time())
        self.client: SanClient | None = None
        self.to_twin: Callable[[Packet], None] = self._no_twin  # set by Pktwayd
        self.up = False
        self.on_change: Callable[[], None] = lambda: None  # after every engine action (fastpath follows)

    def _no_twin(self, pkt: Packet) -> None:
        self.engine.counters["twin_unset"] += 1

    def act(self, actions: list) -> None:
        c = self.engine.counters
        for where, to, pkt in actions:
            if where == "twin":
                self.to_twin(pkt)
            elif where in ("san", "route"):
                route = self.engine.route_of(to) if where == "san" else to
                if route is None or self.client is None:
                    c["tx_unreachable"] += 1
                    continue
                try:
                    raw = pkt.encode(self.cfg.dialect)
                except ValueError:  # e.g. an address MessageWay cannot express
                    c["tx_untranslatable"] += 1
                    continue
                self.client.send_nowait(route, raw, vc=VC, ethertype=ETHERTYPE_PKTWAY)
                c["tx_packets"] += 1
            else:
                c["local_packets"] += 1
        self.on_change()

    def from_twin(self, pkt: Packet) -> None:
        self.engine.now = trio.current_time()
        self.act(self.engine.from_twin(pkt))

    def on_frame(self, frame, now: float) -> None:
        self.engine.now = now
        self.act(self.engine.from_san_bytes(bytes(frame.payload), self.cfg.dialect, src_route=bytes(frame.ula)))

    def on_status(self, ula) -> None:
        up = ula is not None
        if up and not self.up:  # power-up: LRT to the twin, GVRT to the buddies, Hey-You
            log.info("half.up", addr=hex(self.cfg.addr), route=bytes(ula).hex())
            self.engine.now = trio.current_time()
            self.engine.own_route = bytes(ula)
            self.act(self.engine.powerup())
        self.up = up

    def set_client(self, client: SanClient | None) -> None:
        self.client = client

    async def timers(self) -> None:
        while True:
            await trio.sleep_until(min(self.engine.timer(), trio.current_time() + 1.0))
            self.act(self.engine.handle_timer(trio.current_time()))

    async def mapper(self) -> None:
        """Every liveness period: the switch's ULA list is my SAN's map."""
        while True:
            await trio.sleep(self.engine.liveness)
            if not self.up:
                continue
            try:
                reply = await trio.to_thread.run_sync(request, self.cfg.control, {"cmd": "ulas"}, 2.0)
            except OSError:
                reply = {"ok": False}
            if not isinstance(reply, dict) or not reply.get("ok"):
                self.engine.counters["map_unavailable"] += 1  # back-to-back, or gsnd busy: keep the LRT
                continue
            routes = map_routes(reply)
            if routes is None:
                self.engine.counters["map_bad_reply"] += 1
                continue
            self.engine.now = trio.current_time()
            self.act(self.engine.map_update(routes))


class Pktwayd:
    def __init__(self, cfg: RouterConfig) -> None:
        self.cfg = cfg
        self.link: TwinLink | None = None
        self.fast: fastpath.RouterFast | None = None  # twins in this process, both on gsnd: compiled forwarding
        self.control_counters: Counter[str] = Counter()
        self.status_line = StatusLine()
        # ports on emulated SANs, bound now so that a taken address fails at start
        self.udp_ports = {h.addr: AsyncSanPort(_given(h.switch, h, "switch"), _given(h.local, h, "local"))
                          for h in cfg.halves if h.kind == "udp"}
        self.ib_ports = {h.addr: AsyncIbPort(h.guid, _given(h.local, h, "local"), _given(h.switch, h, "switch"),
                                             _given(h.sm, h, "sm"), h.pkey) for h in cfg.halves if h.kind == "infiniband"}
        self.snet_ports = {h.addr: AsyncSnetPort(_given(h.snet, h, "servernet"), h.rings)
                           for h in cfg.halves if h.kind == "servernet"}
        self.san_ports: dict[int, AsyncSanPort | AsyncIbPort | AsyncSnetPort] = {
            **self.udp_ports, **self.ib_ports, **self.snet_ports}
        if cfg.twin is None:
            a, b = cfg.halves
            self.halves = [Half(a, b.addr, cfg), Half(b, a.addr, cfg)]
            self.halves[0].to_twin, self.halves[1].to_twin = self.halves[1].from_twin, self.halves[0].from_twin
            if fastpath.enabled() and all(h.kind == "gsn" and h.dialect == "pw0" for h in cfg.halves):
                self.fast = fastpath.RouterFast(self.halves)
                for h in self.halves:
                    h.on_change = self.fast.refresh
        else:
            (a,) = cfg.halves
            self.halves = [Half(a, cfg.twin.addr, cfg)]
            self.link = link = TwinLink(cfg.twin.local, cfg.twin.peer, a.addr, cfg.twin.addr,
                                        self._from_link, self._link_state, mtu=cfg.twin.mtu, key=cfg.twin.key,
                                        on_mtu=lambda st: log.info("twin.cable.mtu", **st))
            self.halves[0].to_twin = partial(self._to_link, link)

    def _fast_client(self, h: Half, client) -> None:
        h.set_client(client)
        if self.fast is not None:
            self.fast.attach()

    # --- the twin in another process -------------------------------------------------------
    def _to_link(self, link: TwinLink, pkt: Packet) -> None:
        c = self.halves[0].engine.counters
        try:
            raw = pkt.encode()
        except ValueError:
            c["twin_untranslatable"] += 1
            return
        if not link.send(raw):
            c["twin_tx_dropped"] += 1

    def _from_link(self, raw: bytes, now: float) -> None:
        h = self.halves[0]
        h.engine.now = trio.current_time()
        h.act(h.engine.from_twin_bytes(raw))

    def _link_state(self, up: bool) -> None:
        h = self.halves[0]
        log.info("twin.link", up=up, twin=hex(h.engine.hr.twin))
        if up:  # say hello at once rather than at the next WRU
            h.engine.now = trio.current_time()
            h.act(h.engine.twin_up())

    # --- control socket ----------------------------------------------------------------------
    async def _control(self, req: dict) -> dict:
        out = []  # "routes", the only command CONTROL_SCHEMA lets through
        for h in self.halves:
            hr = h.engine.hr
            out.append({
                "addr": hr.addr, "san_id": hr.san_id, "mtu": hr.mtu, "ulp_connected": h.client is not None, "up": h.up,
                "kind": h.cfg.kind, "dialect": h.cfg.dialect, "twin": hr.twin, "twin_alive": h.engine.twin_alive,
                "buddies": sorted(hr.buddies),
                "rts": [{"san_id": rt.san_id, "sn": rt.sn, "rcvf": list(rt.rcvf), "csr_q": rt.q,
                         "csr": [_hop(r) for r in rt.csr], "min_mtu": rt.min_mtu,
                         "nodes": [{"addr": n.addr, "q": n.q, "sr": [_hop(r) for r in n.sr]} for n in rt.nodes]}
                        for rt in hr.rts.values()],
                "counters": dict(h.engine.counters) | (dict(self.san_ports[hr.addr].counters)
                                                       if hr.addr in self.san_ports else {}),
                "lrt_ulas": {hex(n.addr): format_ula(r) for n in hr.lrt_nodes
                             if (r := native_route(n)) is not None and len(r) == 6},
            })
            if h.cfg.kind == "servernet":
                out[-1]["servernet_paths"] = self.snet_ports[hr.addr].paths()
        reply = {"ok": True, "router": self.cfg.name, "halves": out, "control": dict(self.control_counters)}
        if self.link is not None:
            reply["twin_link"] = self.link.status()
        return reply

    def metrics(self) -> list[Family]:
        up = Family("gsn_pktway_half_up", "gauge", "1 while the half-router's SAN is up.")
        rts = Family("gsn_pktway_rrp_tables", "gauge", "RRP routing tables held (one per remote SAN).")
        nodes = Family("gsn_pktway_rrp_nodes", "gauge", "Node entries across the RRP routing tables.")
        lrt = Family("gsn_pktway_lrt_nodes", "gauge", "Nodes in the local routing table (this SAN).")
        twin = Family("gsn_pktway_twin_alive", "gauge", "1 while the twin answers.")
        fams = [up, rts, nodes, lrt, twin]
        for h in self.halves:
            hr, half = h.engine.hr, {"router": self.cfg.name, "half": hex(h.engine.hr.addr)}
            up.add(int(h.up), **half)
            rts.add(len(hr.rts), **half)
            nodes.add(sum(len(rt.nodes) for rt in hr.rts.values()), **half)
            lrt.add(len(hr.lrt_nodes), **half)
            twin.add(int(bool(h.engine.twin_alive)), **half)
            fams += counter_families(h.engine.counters, "pktway", **half)
            if hr.addr in self.san_ports:
                fams += counter_families(self.san_ports[hr.addr].counters, "san", **half)
        return fams + counter_families(self.control_counters, "control", router=self.cfg.name)

    def _notify_status(self) -> None:
        halves = [f"{h.engine.hr.addr:#x} {'up' if h.up else 'down'} ({len(h.engine.hr.rts)} SANs routed)"
                  for h in self.halves]
        twin = "" if self.link is None else f", twin link {'up' if self.link.up else 'down'}"
        self.status_line.update(f"router {self.cfg.name}: " + ", ".join(halves) + twin)

    async def _status(self) -> None:
        while True:
            self._notify_status()
            await trio.sleep(1.0)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        os.makedirs(os.path.dirname(self.cfg.control) or ".", exist_ok=True)
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(serve_control, self.cfg.control, self._control, CONTROL_SCHEMA,
                                        counters=self.control_counters))
            if self.link is not None:
                nursery.start_soon(self.link.run)
            for h in self.halves:
                if h.cfg.kind == "udp":
                    udp = self.udp_ports[h.cfg.addr]
                    h.set_client(udp)
                    h.on_status(native(h.cfg.port))
                    nursery.start_soon(udp.run, h.on_frame)
                elif h.cfg.kind == "infiniband":  # up once the SM gave the port its LID
                    ib = self.ib_ports[h.cfg.addr]
                    h.set_client(ib)
                    nursery.start_soon(ib.run, h.on_frame, h.on_status)
                elif h.cfg.kind == "servernet":
                    snet = self.snet_ports[h.cfg.addr]
                    h.set_client(snet)
                    nursery.start_soon(snet.run, h.on_frame)
                    h.on_status(snet.own_route)
                elif self.fast is not None:
                    nursery.start_soon(partial(ulp_session, h.cfg.ulp, ETHERTYPE_PKTWAY,
                                               on_client=partial(self._fast_client, h), on_status=h.on_status,
                                               on_frame=h.on_frame, after_burst=lambda: None,
                                               drain=self.fast.drain(self.halves.index(h)),
                                               counters=h.engine.counters))
                else:
                    nursery.start_soon(partial(ulp_session, h.cfg.ulp, ETHERTYPE_PKTWAY, on_client=h.set_client,
                                               on_status=h.on_status, on_frame=h.on_frame, after_burst=lambda: None,
                                               counters=h.engine.counters))
                nursery.start_soon(h.timers)
                if h.cfg.map:
                    nursery.start_soon(h.mapper)
            if self.fast is not None:
                for i in (0, 1):
                    nursery.start_soon(self.fast.send_held, i)
            log.info("pktwayd.started", router=self.cfg.name, halves=[hex(h.cfg.addr) for h in self.halves],
                     twin_link=bool(self.link))
            sd_notify("READY=1")
            nursery.start_soon(self._status)
            task_status.started()
