"""pktwayd's trio driver: a router made of two half-routers (twins in one process,
so the inter-SAN link is a function call), each on a GSN fabric through that
fabric's gsnd ULP socket (the L2RH of a GSN SAN is the destination ULA)."""

from __future__ import annotations

import os
from functools import partial

import structlog
import trio

from daemons.runtime.control import serve_control
from daemons.runtime.notify import sd_notify
from daemons.ulpclient import ulp_session
from daemons.wire.errors import DecodeError
from daemons.wire.ula import format_ula

from . import messages as M
from .config import HalfConfig, RouterConfig
from .constants import ETHERTYPE_PKTWAY, RrpTE
from .eep import decode
from .engine import Engine
from .routing import HalfRouter

log = structlog.get_logger("pktwayd")
VC = 1


class Half:
    def __init__(self, cfg: HalfConfig, twin_addr: int, k: int | None) -> None:
        self.cfg = cfg
        hr = HalfRouter(cfg.addr, cfg.san_id, cfg.mtu, twin_addr, cfg.nodes, sn=int(trio.current_time()) or 1, k=k)
        self.engine = Engine(hr)
        self.client = None
        self.twin: "Half" | None = None
        self.up = False

    def act(self, actions: list) -> None:
        for where, to, pkt in actions:
            if where == "twin":
                self.twin.engine.now = trio.current_time()
                self.twin.act(self.twin.engine.from_twin(pkt))
            elif where == "san":
                ula = self.cfg.ula_of.get(to)
                if ula is None or self.client is None:
                    self.engine.counters["tx_unreachable"] += 1
                    continue
                try:
                    raw = pkt.encode(self.cfg.dialect)
                except ValueError:  # e.g. an address MessageWay cannot express
                    self.engine.counters["tx_untranslatable"] += 1
                    continue
                self.client.send_nowait(ula, raw, vc=VC, ethertype=ETHERTYPE_PKTWAY)
                self.engine.counters["tx_packets"] += 1
            else:
                self.engine.counters["local_packets"] += 1

    def on_frame(self, frame, now: float) -> None:
        self.engine.now = now
        try:
            pkt = decode(frame.payload, self.cfg.dialect)
        except DecodeError as exc:
            self.engine.counters[f"rx_bad_{exc.field}"] += 1
            return
        self.act(self.engine.from_san(pkt))

    def on_status(self, ula) -> None:
        up = ula is not None
        if up and not self.up:  # power-up: LRT to the twin, GVRT to the buddies
            self.act(self.engine.start())
            self.act([("san", b, M.rrp(RrpTE.GVRT, b, self.cfg.addr)) for b in sorted(self.engine.hr.buddies)])
        self.up = up

    def set_client(self, client) -> None:
        self.client = client

    async def timers(self) -> None:
        while True:
            await trio.sleep(0.25)
            self.act(self.engine.handle_timer(trio.current_time()))


class Pktwayd:
    def __init__(self, cfg: RouterConfig) -> None:
        self.cfg = cfg
        a, b = cfg.halves
        self.halves = [Half(a, b.addr, cfg.k), Half(b, a.addr, cfg.k)]
        self.halves[0].twin, self.halves[1].twin = self.halves[1], self.halves[0]

    async def _control(self, req: dict) -> dict:
        if req.get("cmd") != "routes":
            return {"ok": False, "error": f"unknown command {req.get('cmd')!r}"}
        out = []
        for h in self.halves:
            hr = h.engine.hr
            out.append({
                "addr": hr.addr, "san_id": hr.san_id, "mtu": hr.mtu, "ulp_connected": h.client is not None,
                "dialect": h.cfg.dialect,
                "rts": [{"san_id": rt.san_id, "sn": rt.sn, "rcvf": list(rt.rcvf), "csr_q": rt.q,
                         "csr": [r.route.hex() for r in rt.csr], "min_mtu": rt.min_mtu,
                         "nodes": [{"addr": n.addr, "q": n.q, "sr": [r.route.hex() for r in n.sr]} for n in rt.nodes]}
                        for rt in hr.rts.values()],
                "counters": dict(h.engine.counters),
                "lrt_ulas": {hex(a): format_ula(u) for a, u in h.cfg.ula_of.items()},
            })
        return {"ok": True, "router": self.cfg.name, "halves": out}

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        os.makedirs(os.path.dirname(self.cfg.control) or ".", exist_ok=True)
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_control, self.cfg.control, self._control)
            for h in self.halves:
                nursery.start_soon(partial(ulp_session, h.cfg.ulp, ETHERTYPE_PKTWAY, on_client=h.set_client,
                                           on_status=h.on_status, on_frame=h.on_frame, after_burst=lambda: None))
                nursery.start_soon(h.timers)
            log.info("pktwayd.started", router=self.cfg.name, halves=[hex(h.cfg.addr) for h in self.halves])
            sd_notify("READY=1")
            task_status.started()
