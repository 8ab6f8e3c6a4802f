"""gsnd's trio driver: the cable, the ULP socket and the control socket."""

from __future__ import annotations

import os
from collections import Counter
from functools import partial

import structlog
import trio

from ..constants import ETHERTYPE_ARP, ULA_BROADCAST, ULA_NONE, ULP_MAX_PAYLOAD, VC_IP
from ..io.runner import LinkRunner, cable_window
from ..io.udp import UdpTransport
from ..io.ulp import UlpServer
from ..runtime.control import PEER, privileged, serve_control
from ..runtime.schema import Int, List, Schema, Str
from ..runtime.log import CounterLog
from ..runtime.metrics import Family, counter_families, link_families
from ..runtime.notify import sd_notify
from ..io.tap import Tap
from ..wire.admin import parse_ula_list
from ..wire.ether import IP_ETHERTYPES, FrameDrop, frame_to_message, message_to_frame
from ..wire.message import max_payload
from ..wire.ula import format_ula
from ..wire.ulp import Frame, Op
from .config import GsndConfig
from ..endpoint.core import AdminResponse, Endpoint, LinkState, MessageIn, UlaChanged
from ..link.clink import UlpClosed, UlpFrameIn
from .dataplane import DataPlane, usable
from .delivery import is_notice, notice_in, settle
from ..constants import ADMIN_MAX_HOPS, ADMIN_ROUTE_SLOTS, ADMIN_ROUTE_UNUSED, HIGH_WATER_MPS, SWITCH_TABLE_MAX, AdminCmd
from ..wire.admin import ARGS_BYTES

log = structlog.get_logger("gsnd")

# The control socket's requests (gsnctl; pktwayd and the pktway CLI ask "ulas").
CONTROL_SCHEMA = Schema({
    "status": {},
    "ulas": {},
    "admin": {
        "command": Str(32),
        "args": Str(2 * ARGS_BYTES, pattern="[0-9a-fA-F]*", optional=True),
        # hop 0 = this host's own adapter (gsnd answers), 1 = the element across the cable
        "hops": Int(0, ADMIN_MAX_HOPS, optional=True),
        # output port at each multi-port switch on the way (ROUTE[0..6], 0xFF = unused)
        "route": List(Int(0, ADMIN_ROUTE_UNUSED - 1), max_len=ADMIN_ROUTE_SLOTS, optional=True),
    },
})


class Gsnd:
    def __init__(self, cfg: GsndConfig) -> None:
        self.cfg = cfg
        if cfg.peer is None:
            raise ValueError("gsnd needs the cable's peer (config.load refuses a file without one)")
        self.peer: tuple[str, int] = cfg.peer
        now = trio.current_time()
        self.transport = UdpTransport(cfg.local, self.peer, mtu=cfg.cable_mtu, key=cfg.key,
                                      on_mtu=lambda st: log.info("cable.mtu", interface=cfg.interface, **st))
        self.ep = Endpoint(cfg.cable_id, now, ula=cfg.ula, buffers=cfg.buffers, timers=cfg.timers,
                           max_payload=ULP_MAX_PAYLOAD, window=cable_window(self.transport.max_mps))
        self.runner = LinkRunner(self.ep.link, self.transport, self._on_input, self._after,
                                 timer=self.ep.timer, handle_timer=self.ep.handle_timer)
        self.ulp = UlpServer(cfg.ulp_path, self._send, self._wait_room, self._status_frame,
                             lambda: self.runner.flush(trio.current_time()), changed=self._delivery_changed)
        self.drained = trio.Event()
        self.admin_waiters: dict[int, trio.MemorySendChannel] = {}
        self.drops = CounterLog(log)
        self.tap: Tap | None = None
        self.dp: DataPlane | None = None  # IP between TAP and cable in C (run() attaches it)
        self.ip_counters: Counter[str] = Counter()
        self.control_counters: Counter[str] = Counter()

    # --- core glue ---------------------------------------------------------------
    def _on_input(self, now: float) -> None:
        self.ep.process(now)
        delivered = False
        for ev in self.ep.events():
            if isinstance(ev, MessageIn):
                msg = ev.message
                if is_notice(msg):
                    frame = notice_in(self.ulp.delivery, msg)
                    if frame is not None:
                        self.ulp.error_to_bound(frame.ethertype, frame)
                    continue
                if self.tap is not None and msg.ethertype in IP_ETHERTYPES and msg.vc == VC_IP:
                    self._to_tap(self.tap, msg)
                if msg.ethertype not in IP_ETHERTYPES or self.ulp.wants(msg.ethertype):
                    self.ulp.deliver(msg, now)
                    delivered = True
            elif isinstance(ev, UlpFrameIn):
                self.ulp.frame_in(ev.fd, ev.data, ev.size)
            elif isinstance(ev, UlpClosed):
                self.ulp.closed(ev.fd)
            elif isinstance(ev, LinkState):
                if ev.up:
                    log.info("link.up", interface=self.cfg.interface)
                else:
                    log.warning("link.down", interface=self.cfg.interface, reason=ev.reason)
                self.ulp.broadcast_status()
                self._notify_status()
                self._carrier()
            elif isinstance(ev, UlaChanged):
                if self.tap is not None and ev.ula:
                    self.tap.configure(mac=ev.ula)
                if self.dp is not None:
                    self.dp.set_ula(ev.ula)
                self._carrier()
                log.info("ula.assigned", interface=self.cfg.interface, ula=format_ula(ev.ula) if ev.ula else None,
                         neighbour=self.ep.neighbour)
                self.ulp.broadcast_status()
                self._notify_status()
            elif isinstance(ev, AdminResponse):
                chan = self.admin_waiters.get(ev.admin.xid)
                if chan is not None:
                    try:
                        chan.send_nowait(ev.admin)
                    except trio.WouldBlock:  # more answers than the waiter holds
                        self.ep.counters["admin_response_overflow"] += 1
                else:
                    self.ep.counters["admin_response_unmatched"] += 1
        if delivered:
            self._settle(now)

    def _settle(self, now: float) -> None:
        """Credit holds follow the ULP backlogs; drop notices go out."""
        for frame in settle(self.ulp.delivery, self.ep, now):
            self.ulp.error_to_bound(frame.ethertype, frame)

    def _delivery_changed(self, now: float) -> None:
        self._settle(now)
        self.runner.flush(now)  # returned credits and notices leave now

    # --- IP over GSN (RFC 2835) ------------------------------------------------------
    def _carrier(self) -> None:
        if self.tap is not None:
            self.tap.set_carrier(self.ep.link.up and self.ep.ula is not None)

    def _to_tap(self, tap: Tap, msg) -> None:
        if msg.d_ula == ULA_BROADCAST and msg.s_ula == self.ep.ula:
            self.ip_counters["rx_own_broadcast_not_to_tap"] += 1  # the switch copies broadcasts to the sender
            return
        if msg.ethertype == ETHERTYPE_ARP and self.cfg.arp == "off":
            self.ip_counters["rx_arp_not_to_tap"] += 1
            return
        tap.write(message_to_frame(msg.d_ula, msg.s_ula, msg.ethertype, msg.payload))
        self.ip_counters["rx_frames"] += 1

    async def _tap_reader(self, tap: Tap) -> None:
        ep, mtu, counters = self.ep, self.cfg.mtu, self.ip_counters
        while True:
            await tap.wait_readable()
            for frame in tap.drain():
                out = frame_to_message(frame, mtu)
                if isinstance(out, FrameDrop):
                    counters[out.counter] += 1
                elif out[1] == ETHERTYPE_ARP and self.cfg.arp == "off":
                    counters["tx_drop_arp_off"] += 1
                elif ep.send(VC_IP, *out):
                    counters["tx_frames"] += 1
                else:
                    counters["tx_drop_link"] += 1
            self.runner.flush(trio.current_time())
            await self._wait_room(VC_IP)

    def _after(self, now: float) -> None:
        self.runner.flush(now)
        self.drained.set()
        self.drained = trio.Event()

    def _send(self, vc: int, ula: bytes, ethertype: int, payload: bytes) -> str | None:
        if len(payload) > ULP_MAX_PAYLOAD:  # the ULP server refuses these first
            return f"payload_over_ulp_limit_{ULP_MAX_PAYLOAD}"
        if len(payload) > max_payload(vc):
            return f"payload_over_vc{vc}_limit_{max_payload(vc)}"
        if not self.ep.send(vc, ula, ethertype, payload):
            return "link_down" if not self.ep.link.up else "no_ula"
        return None

    async def _wait_room(self, vc: int) -> None:
        while self.ep.link.up and self.ep.link.queued(vc) > HIGH_WATER_MPS:
            self.runner.flush(trio.current_time())  # what is queued must be on its way first
            await self.drained.wait()

    def _status_frame(self) -> Frame:
        up = self.ep.link.up and self.ep.ula is not None
        return Frame(Op.STATUS, int(up), 0, self.ep.ula or ULA_NONE)

    def _notify_status(self) -> None:
        ula = format_ula(self.ep.ula) if self.ep.ula else "none"
        sd_notify(f"STATUS=link {'up' if self.ep.link.up else 'down'}, ULA {ula}")

    # --- metrics -------------------------------------------------------------------------
    def metrics(self) -> list[Family]:
        i = {"interface": self.cfg.interface}
        fams = link_families(self.ep.link.status(), **i)
        heard = self.runner.heard_ago()
        fams.append(Family("gsn_link_last_heard_seconds", "gauge", "Seconds since the cable peer's last datagram.")
                    .add(float("nan") if heard is None else heard, **i))
        messages = Family("gsn_vc_messages_total", "counter", "GSN Messages per VC and direction.")
        nbytes = Family("gsn_vc_bytes_total", "counter", "Message payload bytes per VC and direction.")
        per_vc = self.ep.per_vc_totals()  # the data plane's (IP, ULP clients) included
        for way in ("rx", "tx"):
            for vc, (m, b) in enumerate(zip(per_vc[f"{way}_messages"], per_vc[f"{way}_bytes"])):
                messages.add(m, **i, vc=vc, direction=way)
                nbytes.add(b, **i, vc=vc, direction=way)
        fams += [messages, nbytes,
                 Family("gsn_ulp_clients", "gauge", "Clients on the ULP socket.").add(len(self.ulp.clients), **i),
                 Family("gsn_ula_assigned", "gauge", "1 once the port has a ULA.").add(int(self.ep.ula is not None), **i)]
        for component, counters in (("link", self.ep.link.counters), ("gsnd", self._counters("gsnd", self.ep.counters)),
                                    ("reassembly", self._counters("reassembly", self.ep.reasm.counters)),
                                    ("cable", self.transport.counters),
                                    ("ulp", self._counters("ulp", self.ulp.counters)),
                                    ("ulp.delivery", self._counters("ulp.delivery", self.ulp.delivery.counters)),
                                    ("ip", {**self.ip_counters, **(self.tap.counters if self.tap else {})}),
                                    ("control", self.control_counters)):
            fams += counter_families(counters, component, **i)
        return fams

    # --- control socket ------------------------------------------------------------
    async def _control(self, req: dict) -> dict:
        cmd = req.get("cmd")
        if cmd == "status":
            st = self.ep.status()
            st.update(interface=self.cfg.interface, cable={"local": list(self.cfg.local), "peer": list(self.peer),
                      "id": self.cfg.cable_id, **self.transport.status(),
                                               "last_heard_s": self.runner.heard_ago(),
                                               "transport": self._counters("cable", self.transport.counters)},
                      ulp={"clients": len(self.ulp.clients), "counters": self._counters("ulp", self.ulp.counters),
                           "delivery": {**self._counters("ulp.delivery", self.ulp.delivery.counters),
                                        "held_vcs": self.ulp.delivery.held(),
                                        "withheld_mps": list(self.ep.withheld)}},
                      ip={"tap": self.cfg.tap, "mtu": self.cfg.mtu, "arp": self.cfg.arp,
                          "dataplane": self.dp is not None,
                          # why the compiled loop went back to Python, by reason (daemons/_loop.h)
                          "dataplane_returns": dict(self.dp.reasons) if self.dp is not None else {},
                          "counters": {**self._counters("ip", self.ip_counters),
                                       **self._counters("tap", self.tap.counters if self.tap else {})}},
                      control=dict(self.control_counters))
            return {"ok": True, "status": st}
        if cmd == "ulas":
            return await self._list_ulas()
        if cmd == "admin":
            peer = PEER.get()  # None: called in-process, not through the socket
            if peer is not None and not privileged(peer[1]):
                self.control_counters["refused_admin_unprivileged"] += 1
                return {"ok": False, "error": f"admin: uid {peer[1]} may not send Admin requests "
                                              f"(root or gsnd's own user only)"}
            try:
                command = AdminCmd[req["command"].upper()]
            except KeyError:
                return {"ok": False, "error": f"admin: unknown command {req['command']!r}"}
            args = req.get("args", "")
            if len(args) % 2:
                return {"ok": False, "error": "admin: args must be an even number of hex digits"}
            hops, route = req.get("hops", 1), req.get("route", [])
            if len(route) > max(hops - 1, 0):
                return {"ok": False, "error": f"admin: a route of {len(route)} ports needs at least "
                                              f"{len(route) + 1} hops (one per switch the request passes)"}
            resps = await self._admin(command, bytes.fromhex(args), hops=hops, route=route)
            names = AdminCmd._value2member_map_
            return {"ok": True, "responses": [{"command": AdminCmd(r.command).name if r.command in names else r.command,
                                               "status": r.status, "args": r.args.hex()} for r in resps]}
        return {"ok": False, "error": f"unknown command {cmd!r}"}

    async def _admin(self, command: int, args: bytes, hops: int = 1, route=(), expect_more=None) -> list:
        if hops == 0:  # hop 0 is this host's own adapter: gsnd answers itself
            return [self.ep.answer_local(command, args)]
        if not self.ep.link.up:
            return []
        req = self.ep.admin_request(command, args, hops=hops, route=route)
        # room for a whole ULA_LIST (one response per table entry, spec 4.3)
        send, recv = trio.open_memory_channel(SWITCH_TABLE_MAX + 256)
        self.admin_waiters[req.xid] = send
        self.runner.flush(trio.current_time())
        out = []
        try:
            with trio.move_on_after(1.0):
                while True:
                    resp = await recv.receive()
                    out.append(resp)
                    if expect_more is None or not expect_more(resp):
                        break
        finally:
            del self.admin_waiters[req.xid]
        return out

    async def _list_ulas(self) -> dict:
        resps = await self._admin(AdminCmd.LIST_ULAS, b"\0\0", expect_more=lambda r: parse_ula_list(r.args)[4])
        if not resps:
            return {"ok": False, "error": "no answer to LIST_ULAS (link down, or the neighbour is not a switch)"}
        entries = []
        for r in resps:
            if r.command == AdminCmd.ULA_LIST and r.status == 0:
                _i, _total, ula, port, _more = parse_ula_list(r.args)
                entries.append({"ula": format_ula(ula), "port": port})
        return {"ok": True, "ulas": entries}

    # --- run -------------------------------------------------------------------------
    async def _stats(self) -> None:
        while True:
            await trio.sleep(1.0)
            now = trio.current_time()
            self.transport.refresh_mtu()  # the kernel's path MTU, ICMP-learnt drops included
            self.drops.update("link", self.ep.link.counters, now)
            self.drops.update("gsnd", self._counters("gsnd", self.ep.counters), now)
            self.drops.update("reassembly", self._counters("reassembly", self.ep.reasm.counters), now)
            self.drops.update("cable", self._counters("cable", self.transport.counters), now)
            self.drops.update("ulp", self._counters("ulp", self.ulp.counters), now)
            self.drops.update("ulp.delivery", self._counters("ulp.delivery", self.ulp.delivery.counters), now)
            self.drops.update("ip", self._counters("ip", self.ip_counters), now)
            if self.tap is not None:
                self.drops.update("tap", self._counters("tap", self.tap.counters), now)

    def _counters(self, group: str, python) -> dict:
        return self.dp.counters(group, python) if self.dp is not None else dict(python)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        os.makedirs(self.cfg.runtime_dir, exist_ok=True)
        if self.cfg.tap:
            # the compiled data plane takes virtio_net_hdr frames: it completes checksums (daemons/_vnet.h)
            self.tap = Tap(self.cfg.tap, vnet=usable(self.transport))
            self.tap.configure(mac=self.ep.ula or self.cfg.ula, mtu=self.cfg.mtu)
            self._carrier()
        if usable(self.transport):  # with --no-tap too: ULP Messages on VC1 are reassembled in C
            self.dp = DataPlane(self.ep, self.transport, self.tap, mtu=self.cfg.mtu, arp=self.cfg.arp != "off",
                                wants=self.ulp.wants)
            # a ULP reader waiting for room on a VC (_wait_room) is woken by _after, after a
            # return from the loop: the loop keeps its 2 ms slice while one waits
            self.runner.use(self.dp, HIGH_WATER_MPS, self.ep.own_timer,
                            waiting=lambda: self.drained.statistics().tasks_waiting > 0)
            self.ulp.use_dataplane(self.dp)
        log.info("dataplane", interface=self.cfg.interface, compiled=self.dp is not None)
        async with trio.open_nursery() as nursery:
            await nursery.start(self.ulp.serve)
            if self.tap is not None and self.dp is None:  # the data plane reads the TAP itself
                nursery.start_soon(self._tap_reader, self.tap)
            await nursery.start(partial(serve_control, self.cfg.control_path, self._control, CONTROL_SCHEMA,
                                        counters=self.control_counters))
            nursery.start_soon(self.runner.run)
            nursery.start_soon(self._stats)
            log.info("gsnd.started", interface=self.cfg.interface, tap=self.cfg.tap,
                     local=f"{self.cfg.local[0]}:{self.cfg.local[1]}", peer=f"{self.peer[0]}:{self.peer[1]}",
                     ulp=self.cfg.ulp_path)
            sd_notify("READY=1")
            self._notify_status()
            task_status.started()
