"""``pktway ip``'s trio driver: the pw0 TUN device on one side, the node's port on
its SAN on the other (gsnd's ULP socket on a GSN fabric, or a port on an
InfiniBand-style fabric, a ServerNet SAN or the datagram SAN), the sans-IO
:class:`~pktwayd.ipnode.IpNode` in between.  pw0 is created when the driver starts and vanishes
when it stops; address it with ``ip``.

Bounded: pw0 is read in bursts of at most ``TUN_BURST`` packets, and the next burst
waits until what the last one queued for gsnd is in its socket."""

from __future__ import annotations

from collections import Counter
from functools import partial

import structlog
import trio

from daemons.io.tap import Tap
from daemons.runtime.control import serve_control
from daemons.runtime.schema import Schema
from daemons.ulpclient import ulp_session

from . import constants as K
from . import fastpath, ipgroups
from .constants import ETHERTYPE_PKTWAY
from .ipnode import IpNode

log = structlog.get_logger("pktway.ip")
TUN_BURST = 64
CONTROL_SCHEMA = Schema({"status": {}})


class PwIp:
    def __init__(self, core: IpNode, *, dev: str, dialect: str = "pw0",
                 ulp: str | None = None, san_port=None, own_route: bytes | None = None,
                 port_reports_status: bool = False, control: str | None = None) -> None:
        if (ulp is None) == (san_port is None):
            raise ValueError("PwIp: give one of ulp (gsnd's ULP socket) or san_port")
        self.core = core  # its router (None: none yet) is where packets go that name no route
        self.dev = dev
        self.dialect = dialect
        self.ulp = ulp
        self.san_port = san_port  # send_nowait(route, raw) + run(on_frame[, on_status]): udpsan, ib, servernet
        self.own_route = own_route
        self.port_reports_status = port_reports_status  # the port calls on_status (IB: once the SM gave a LID)
        self.control = control
        self.client = san_port
        self.tun: Tap | None = None
        self.up = False
        self.control_counters: Counter[str] = Counter()
        # gsnd's ULP socket: packets to and from configured peers go through the compiled path
        self.fast = fastpath.IpFast(core) if ulp is not None and dialect == "pw0" \
            and fastpath.enabled() else None

    def act(self, actions: list) -> None:
        c = self.core.counters
        tun = self.tun
        for action in actions:
            if action[0] in ("tun", "mtu"):
                if tun is None:
                    c["tun_not_open"] += 1  # run() opens it before anything can arrive
                elif action[0] == "tun":
                    tun.write(action[1])
                else:
                    tun.configure(mtu=action[1])
                    log.info("pw0.mtu", dev=self.dev, mtu=action[1])
            else:
                _, pkt, route = action
                if self.client is None:
                    c["tx_drop_no_port"] += 1
                    continue
                try:
                    raw = pkt.encode(self.dialect)
                except ValueError:
                    c["tx_drop_untranslatable"] += 1
                    continue
                to = route or self.core.router
                if to is None:
                    c["tx_drop_no_router"] += 1  # none chosen yet (HRTO): resolution and TCP retry
                    continue
                self.client.send_nowait(to, raw, vc=1, ethertype=ETHERTYPE_PKTWAY)
        if self.fast is not None:
            self.fast.refresh()

    def _now(self) -> float:
        self.core.now = trio.current_time()
        return self.core.now

    def on_frame(self, frame, now: float) -> None:
        self.act(self.core.from_pw_bytes(bytes(frame.payload), self.dialect, bytes(frame.ula), now))

    def on_status(self, ula) -> None:
        up = ula is not None
        if up:
            self.core.own_route = bytes(ula)  # my native route: a redirected-to node answers me there
        if up and not self.up:  # link (back) up: announce myself, ask the routes' MTUs
            self._now()
            self.act(self.core.start())
        self.up = up

    def set_client(self, client) -> None:
        self.client = client
        if self.fast is not None:
            self.fast.attach(self.tun, client)

    async def _tun_loop(self, tun: Tap) -> None:
        while True:
            await tun.wait_readable()
            now = self._now()
            burst = self.fast.tun_burst(tun) if self.fast is not None else None
            for raw in tun.drain(TUN_BURST) if burst is None else burst:
                self.act(self.core.from_tun(raw, now))
            if self.san_port is None and self.client is not None:  # gsnd's ULP socket: wait for room
                await self.client.flush()
            await trio.lowlevel.checkpoint()

    async def _memberships(self) -> None:
        """Follow the IP stack's multicast memberships on pw0 (sockets, ``ip maddr``)."""
        while True:
            groups = ipgroups.read(self.dev)  # procfs: never blocks
            if self.up:
                self._now()
                self.act(self.core.set_kernel_groups(groups))
            await trio.sleep(K.IP_GROUPS_POLL_S)

    async def _timers(self) -> None:
        while True:
            await trio.sleep_until(min(self.core.timer(), trio.current_time() + 1.0))
            self.act(self.core.handle_timer(self._now()))

    async def _status(self, req: dict) -> dict:
        core = self.core
        return {"ok": True, "dev": self.dev, "addr": core.addr, "mtu": core.mtu, "up": self.up,
                "peers": {str(ip): a for ip, a in core.static.items()},
                "learned": {str(ip): a for ip, (a, _, _) in core.learned.items()},
                "confirmed": sorted(str(ip) for ip, (_, _, sure) in core.learned.items() if sure),
                "groups": [hex(a) for a in core.groups],
                "route_mtu": {hex(a): m for a, m in core.route_mtu.items()},
                "router": core.router.hex() if core.router is not None else None,
                "routers": {r.hex(): a for r, a in core.hrs.items()},
                "redirects": {hex(d): hex(h) for d, (h, _) in core.redirects.items()},
                "native_routes": {hex(h): r.hex() for h, r in core.native.items()},
                "counters": dict(core.counters) | dict(self.tun.counters if self.tun else {})
                | (dict(self.san_port.counters) if self.san_port else {})}

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self.tun = tun = Tap(self.dev, persist=False, tun=True)
        tun.configure(mtu=self.core.mtu)
        try:
            async with trio.open_nursery() as nursery:
                if self.control:
                    await nursery.start(partial(serve_control, self.control, self._status, CONTROL_SCHEMA,
                                                counters=self.control_counters))
                nursery.start_soon(self._tun_loop, tun)
                nursery.start_soon(self._timers)
                nursery.start_soon(self._memberships)
                if self.san_port is not None and self.port_reports_status:
                    nursery.start_soon(self.san_port.run, self.on_frame, self.on_status)
                elif self.san_port is not None:
                    self.on_status(self.own_route)
                    nursery.start_soon(self.san_port.run, self.on_frame)
                elif self.ulp is not None and self.fast is not None:
                    nursery.start_soon(partial(ulp_session, self.ulp, ETHERTYPE_PKTWAY, on_client=self.set_client,
                                               on_status=self.on_status, on_frame=self.on_frame,
                                               after_burst=lambda: None, drain=self.fast.drain,
                                               counters=self.core.counters))
                elif self.ulp is not None:
                    nursery.start_soon(partial(ulp_session, self.ulp, ETHERTYPE_PKTWAY, on_client=self.set_client,
                                               on_status=self.on_status, on_frame=self.on_frame,
                                               after_burst=lambda: None, counters=self.core.counters))
                log.info("pw0.started", dev=self.dev, addr=hex(self.core.addr), mtu=self.core.mtu)
                task_status.started()
        finally:
            tun.close()
