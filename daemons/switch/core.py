"""Sans-IO GSN switch: ports, ULA table, wormhole forwarding, Admin.

Forwarding is by Message: the HEADER's D_ULA picks the output port(s) and the rest
of the Message follows on the same VC (cut-through: each received batch is
forwarded as soon as it arrives).  An output VC carries one Message at a time;
other inputs wanting it wait in their input buffer, holding their credits, which
is the back-pressure.  Input credits are returned when micropackets leave the
input buffer for the output queue.  Broadcast (on by config) copies a Message to
every port that is up, the sender's included.

Security (issue 12): a Message is forwarded only when its S_ULA is an address the
switch's table binds to the ingress port (assigned by ASSIGN_ULA, static, or moved
there by CHANGE_ROUTE) or the port is configured ``trust_source`` (an uplink to
another switch); otherwise the whole Message is dropped, counted
``drop_spoofed_source``.  Admin has no source address: its authority is the port it
entered this switch on -- configuration commands (C.ADMIN_MANAGEMENT_COMMANDS) are
obeyed, or forwarded on by hop count, only from ``management`` ports.  A forwarded
request's response is routed back only when it comes from the port the request left by.

Fabrics (issue 13): a port configured ``switch`` is cabled to another switch.  The
switch's FabricAgent (discovery.py) walks the fabric over such ports with its own
Admin requests, and the lowest switch id programs every table (CHANGE_ROUTE) and the
broadcast spanning tree (TREE_PORTS).  From an inter-switch port, configuration Admin
is obeyed (the switch behind enforces the same rules), any S_ULA is accepted except one
bound to this switch's own host ports, and a broadcast is taken only on a tree port;
broadcasts leave by every host port and the other tree ports.
"""

from __future__ import annotations

import random
from collections import Counter, OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from .. import _link
from .. import constants as C
from ..constants import AdminCmd, AdminStatus, ElementType, MpType, Register
from ..link.clink import CLink
from ..link.link import LinkDown, LinkUp, Received, Timers
from ..link.reassembly import admin_defect
from ..wire.admin import (Admin, change_route_args, element_address_args, i_am_args, parse_change_route,
                          parse_element_address, parse_register, parse_ula_list, port_id_args, register_args,
                          ula_list_args)
from ..wire.errors import DecodeError
from ..wire.message import single_records
from ..wire.micropacket import MP_DTYPE, Micropacket
from ..wire.ula import assigned_ula, format_ula
from .discovery import FabricAgent
from .forward import COUNTERS, Forwarder

_U64 = np.uint64
ADMIN_SOURCE = -1  # the switch's own Admin engine competes for outputs like a port
# what ends a Message whose input died or broke it off (spec §1.6), per VC
_ABORT_MPS = b"".join(Micropacket(vc=vc, type=MpType.DATA, tail=1, error=1).encode() for vc in range(C.NUM_VCS))


@dataclass
class _Segment:
    recs: np.ndarray
    targets: tuple[int, ...]
    tail: bool
    credit_port: int | None  # input port whose buffer this occupies


@dataclass
class Port:
    number: int
    link: CLink
    management: bool = False  # configuration Admin accepted from here
    trust_source: bool = False  # S_ULA not checked (an uplink to another switch)
    fabric: bool = False  # cabled to another switch: walked, programmed, broadcast only on the tree
    stray_switch: bool = False  # trust_source, not `switch`, yet a switch answered here: no broadcast
    inq: list[deque[_Segment]] = field(default_factory=lambda: [deque() for _ in range(C.NUM_VCS)])
    current: list[tuple[int, ...] | None] = field(default_factory=lambda: [None] * C.NUM_VCS)  # the open Message's targets
    counters: Counter[str] = field(default_factory=Counter)


class Switch:
    def __init__(
        self,
        switch_id: int,
        port_numbers: list[int],
        now: float,
        *,
        broadcast: bool = True,
        static: dict[bytes, int] | None = None,
        cable_ids: dict[int, int] | None = None,
        buffers: tuple[int, ...] = C.VC_BUFFER_MPS,
        timers: Timers = Timers(),
        rng: random.Random | None = None,
        management_ports: Iterable[int] = (),
        trust_source_ports: Iterable[int] = (),
        windows: dict[int, int] | None = None,
        fabric_ports: Iterable[int] = (),
        forwarder: type | None = None,
        plane: bool = False,
    ) -> None:
        management, trusted, fabric = set(management_ports), set(trust_source_ports), set(fabric_ports)
        for what, ports in (("management", management), ("trust_source", trusted), ("switch", fabric)):
            if ports - set(port_numbers):
                raise ValueError(f"{what}: no port {min(ports - set(port_numbers))} on this switch")
        if fabric and not fabric <= set(range(1, C.FABRIC_PORT_MAX + 1)):
            raise ValueError(f"switch: inter-switch ports are numbered 1..{C.FABRIC_PORT_MAX}, not {max(fabric)}")
        self.switch_id = switch_id
        self.broadcast = broadcast
        self.buffers = buffers
        self.rng = rng or random.Random()
        self.ula = assigned_ula(switch_id, 0)
        cable_ids = cable_ids or {}
        self.ports = {
            p: Port(p, CLink(cable_ids.get(p, p), now, buffers=buffers, timers=timers, rng=self.rng,
                             window=(windows or {}).get(p, C.SEQ_WINDOW_MPS)),
                    management=p in management, trust_source=p in trusted, fabric=p in fabric)
            for p in port_numbers
        }
        self.serial = self.rng.getrandbits(48)  # tells two switches given one id apart
        self.tree_ports = 0  # bitmap of inter-switch ports on the broadcast tree (TREE_PORTS)
        self._now = now
        self.agent = FabricAgent(self)
        self.static = dict(static or {})
        self.table: dict[bytes, int] = dict(self.static)  # ULA -> port
        self.kind: dict[bytes, str] = {u: "static" for u in self.static}
        self.owner: dict[int, list[int | None]] = {p: [None] * C.NUM_VCS for p in self.ports}  # output VC -> input owning it
        self.admin_q: list[deque[_Segment]] = [deque() for _ in range(C.NUM_VCS)]
        # Forwarded request XID -> (ingress, egress, expiry), oldest first: the memory time is
        # constant, so insertion order is deadline order and expiry pops from the front
        # (amortised O(1) per request); at most ADMIN_XID_TABLE_MAX entries.
        self.xids: OrderedDict[int, tuple[int, int, float]] = OrderedDict()
        self.counters: Counter[str] = Counter()
        self.forwarder = (forwarder or Forwarder)(self.ports, self.table)
        # plane: the data path compiled (daemons/_switchloop.h): what the port links accept
        # is walked, queued and pumped in C; the Python input queues, owners and pump
        # below are then unused (they stay as its oracle)
        self.plane = _link.SwitchPlane(self, COUNTERS, _ABORT_MPS) if plane else None

    # --- link events --------------------------------------------------------------
    def process(self, port_no: int, now: float) -> None:
        self._link_events(port_no, now)
        self.pump()

    def _link_events(self, port_no: int, now: float) -> None:
        """The port link's events (the plane calls it after a datagram that raised some)."""
        port = self.ports[port_no]
        for ev in port.link.events():
            if isinstance(ev, Received):
                if self.plane is not None:  # accepted while link events waited: in order
                    self.plane.ingress(port_no, ev.vc, ev.recs, now)
                else:
                    self._ingress(port, ev.vc, ev.recs, now)
            elif isinstance(ev, LinkUp):
                port.counters["link_up"] += 1
                if port.fabric:
                    self.agent.changed(now, "port_up")
                elif port.trust_source:
                    # an uplink configured the issue-12 way: if a switch is across, a loop of
                    # such uplinks would carry broadcasts round for ever (on a plain host
                    # port its Messages are dropped as spoofed anyway)
                    self.agent.ask_neighbour(port.number, now)
            elif isinstance(ev, LinkDown):
                port.counters["link_down"] += 1
                self._port_down(port)
                port.stray_switch = False
                if port.fabric:
                    self.agent.changed(now, "port_down")

    def _port_down(self, port: Port) -> None:
        if self.plane is not None:
            self.plane.port_down(port.number)
            return
        for vc in range(C.NUM_VCS):
            port.inq[vc].clear()
            port.current[vc] = None
            for out, owners in self.owner.items():
                if owners[vc] == port.number:
                    self._abort_output(out, vc)
            self.owner[port.number][vc] = None

    def _abort_output(self, out: int, vc: int) -> None:
        """An input died mid-Message: end the Message with TAIL + ERROR (spec §1.6)."""
        self.ports[out].link.enqueue(vc, np.frombuffer(_ABORT_MPS, MP_DTYPE, 1, vc * C.MP_BYTES).copy())
        self.owner[out][vc] = None
        self.counters["messages_aborted"] += 1

    # --- forwarding -------------------------------------------------------------------
    def _on_tree(self, p: int) -> bool:
        return bool(self.tree_ports >> (p - 1) & 1)

    def _ingress(self, port: Port, vc: int, recs: np.ndarray, now: float) -> None:
        """One received batch: the compiled walk (forward.py) routes each Message and
        cuts the batch into segments for the input queue; ADMIN micropackets come back
        here one at a time (an Admin may change what the next HEADER is routed by)."""
        n, pos, walk = len(recs), 0, self.forwarder.ingress
        while pos < n:
            segs, pos, port.current[vc], counts, strays = walk(recs, vc, port.number, port.current[vc], pos,
                                                               self.broadcast, self.tree_ports)
            for name, k in zip(COUNTERS, counts):
                if k:
                    port.counters[name] += k
            if strays:
                port.link.release(vc, strays)
            for start, end, targets, tail in segs:
                if start == end:  # a HEADER broke the open Message off: terminate it downstream
                    abort = np.frombuffer(_ABORT_MPS, MP_DTYPE, 1, vc * C.MP_BYTES).copy()
                    port.inq[vc].append(_Segment(abort, targets, True, None))
                else:
                    port.inq[vc].append(_Segment(recs[start:end], targets, tail, port.number))
            if pos < n:  # an ADMIN micropacket
                port.link.release(vc, 1)
                self._admin_mp(port, recs[pos], port.current[vc] is not None, now)
                pos += 1

    def _admin_mp(self, port: Port, rec: np.void, in_message: bool, now: float) -> None:
        """One ADMIN micropacket the ingress walk stopped at."""
        if in_message:
            port.counters["drop_admin_inside_message"] += 1
        elif defect := admin_defect(rec, _U64(rec["ctrl"])):
            port.counters[f"admin_discard_{defect}"] += 1  # we are its final destination
        else:
            self._admin_in(port, rec["data"].tobytes(), now)

    def _admin_from_plane(self, port_no: int, rec: bytes, current: tuple[int, ...] | None, now: float) -> None:
        self._admin_mp(self.ports[port_no], np.frombuffer(rec, MP_DTYPE)[0], current is not None, now)

    def pump(self) -> None:
        """Move input segments to output queues where the output VC is free or ours."""
        if self.plane is not None:
            self.plane.pump()
            return
        sources = [(p.number, p.inq) for p in self.ports.values()] + [(ADMIN_SOURCE, self.admin_q)]
        if sum(any(inq) for _, inq in sources) > 1:  # the order of one waiting input does not matter
            self.rng.shuffle(sources)  # fairness among inputs
        for vc in range(C.NUM_VCS):
            limit = self.buffers[vc]
            for src, inq in sources:
                q = inq[vc]
                while q:
                    seg = q[0]
                    live = tuple(t for t in seg.targets if self.ports[t].link.up)
                    if live and not all(
                        self.owner[t][vc] in (None, src) and self.ports[t].link.queued(vc) < limit for t in live
                    ):
                        break
                    q.popleft()
                    for t in live:
                        self.ports[t].link.enqueue(vc, seg.recs)
                        self.owner[t][vc] = None if seg.tail else src
                        self.ports[t].counters["tx_mps"] += len(seg.recs)
                    if seg.credit_port is not None:
                        self.ports[seg.credit_port].link.release(vc, len(seg.recs))
                    if not live:
                        self.counters["dropped_mps"] += len(seg.recs)

    # --- Admin ------------------------------------------------------------------------
    def _emit_admin(self, out: int, adm: Admin, vc: int) -> None:
        if self.plane is not None:
            self.plane.admin(vc, out, single_records(vc, MpType.ADMIN, adm.encode()))
            return
        self.admin_q[vc].append(_Segment(single_records(vc, MpType.ADMIN, adm.encode()), (out,), True, None))

    def _admin_in(self, port: Port, data: bytes, now: float) -> None:
        try:
            adm = Admin.decode(data)
        except DecodeError as exc:
            port.counters[f"admin_bad_{exc.field}"] += 1
            return
        port.counters["rx_admin"] += 1
        self._now = now
        if adm.is_response:
            if not self.agent.response(adm, port.number, now):
                self._forward_response(port, adm, now)
        elif adm.command in C.ADMIN_MANAGEMENT_COMMANDS and not (port.management or port.fabric):
            # judged where it entered this switch, whether for us or to be forwarded on
            port.counters["admin_refused_not_management"] += 1
            self._emit_admin(port.number, adm.invalid(), C.VC_ADMIN_RESPONSE)
        elif adm.hop_count > 0:
            self._forward_request(port, adm, now)
        else:
            for resp in self._answer(port, adm):
                self._emit_admin(port.number, resp, C.VC_ADMIN_RESPONSE)

    def _forward_request(self, port: Port, adm: Admin, now: float) -> None:
        out = adm.route[adm.route_idx] if adm.route_idx < C.ADMIN_ROUTE_SLOTS else C.ADMIN_ROUTE_UNUSED
        if out not in self.ports or not self.ports[out].link.up:
            port.counters["admin_bad_route"] += 1
            self._emit_admin(port.number, adm.response(AdminCmd.INVALID_ADMIN, bytes([adm.command]),
                                                       AdminStatus.BAD_ARGUMENT), C.VC_ADMIN_RESPONSE)
            return
        self._expire_xids(now)
        if adm.xid in self.xids:
            self.xids.move_to_end(adm.xid)  # remembered afresh from now: keep deadline order
        elif len(self.xids) >= C.ADMIN_XID_TABLE_MAX:
            port.counters["admin_xid_table_full"] += 1
            return
        self.xids[adm.xid] = (port.number, out, now + C.ADMIN_XID_MEMORY_S)
        fwd = Admin(adm.command, adm.xid, adm.hop_count - 1, adm.init_hops, adm.route_idx + 1, adm.route,
                    adm.status, adm.args)
        self._emit_admin(out, fwd, C.VC_ADMIN_REQUEST)

    def _forward_response(self, port: Port, adm: Admin, now: float) -> None:
        self._expire_xids(now)
        back = self.xids.get(adm.xid)
        if adm.hop_count == 0 or back is None:
            port.counters["admin_response_unrouted"] += 1
            return
        if port.number != back[1]:  # not from where the request went: someone else answering
            port.counters["admin_response_wrong_port"] += 1
            return
        fwd = Admin(adm.command, adm.xid, adm.hop_count - 1, adm.init_hops, adm.route_idx, adm.route,
                    adm.status, adm.args)
        self._emit_admin(back[0], fwd, C.VC_ADMIN_RESPONSE)
        if not (adm.command == AdminCmd.ULA_LIST and adm.status == AdminStatus.OK and parse_ula_list(adm.args)[4]):
            del self.xids[adm.xid]  # its last response passed: forget it now (a walk sends thousands)

    def _expire_xids(self, now: float) -> None:
        xids = self.xids
        while xids:
            xid, (_, _, exp) = next(iter(xids.items()))
            if exp >= now:
                break
            del xids[xid]

    def _answer(self, port: Port, adm: Admin) -> list[Admin]:
        cmd = adm.command
        if cmd == AdminCmd.WHAT_ARE_YOU:
            return [adm.response(AdminCmd.I_AM, i_am_args(ElementType.SWITCH, len(self.ports), self.ula,
                                                          port.number, self.serial))]
        if cmd == AdminCmd.ARE_YOU_THERE:
            return [adm.response(AdminCmd.I_AM_HERE)]
        if cmd == AdminCmd.ASSIGN_ULA:
            ula = assigned_ula(self.switch_id, port.number)
            new = self.table.get(ula) != port.number
            for old in [u for u, p in self.table.items() if p == port.number and self.kind.get(u) == "assigned"]:
                del self.table[old]
            self.table[ula] = port.number
            self.kind[ula] = "assigned"
            self.counters["ulas_assigned"] += 1
            if new:
                self.agent.changed(self._now, "new_ula")
            return [adm.response(AdminCmd.HERE_IS_ULA, ula)]
        if cmd == AdminCmd.LIST_ULAS:
            start = int.from_bytes(adm.args[:2], "big")
            entries = sorted(self.table.items())
            if not entries[start:]:
                return [adm.response(AdminCmd.ULA_LIST, ula_list_args(start, len(entries), C.ULA_NONE, 0, False),
                                     AdminStatus.NO_SUCH_ULA)]
            return [
                adm.response(AdminCmd.ULA_LIST, ula_list_args(i, len(entries), u, p, i + 1 < len(entries)))
                for i, (u, p) in enumerate(entries) if i >= start
            ]
        if cmd == AdminCmd.GET_PORT:
            ula = bytes(adm.args[:6])
            p = self.table.get(ula)
            if p is None:
                return [adm.response(AdminCmd.PORT_ID, port_id_args(ula, 0), AdminStatus.NO_SUCH_ULA)]
            return [adm.response(AdminCmd.PORT_ID, port_id_args(ula, p))]
        if cmd == AdminCmd.CHANGE_ROUTE:
            ula, new_port = parse_change_route(adm.args)
            if new_port == C.ROUTE_REMOVE_PORT and ula in self.table:
                self.set_route(bytes(ula), new_port)
                return [adm.response(AdminCmd.ROUTE_STATUS, change_route_args(ula, new_port))]
            if new_port not in self.ports or ula in (C.ULA_BROADCAST, C.ULA_NONE):
                return [adm.response(AdminCmd.ROUTE_STATUS, change_route_args(ula, new_port),
                                     AdminStatus.BAD_ARGUMENT)]
            if bytes(ula) not in self.table and len(self.table) >= C.SWITCH_TABLE_MAX:
                port.counters["admin_route_table_full"] += 1
                return [adm.response(AdminCmd.ROUTE_STATUS, change_route_args(ula, new_port),
                                     AdminStatus.NOT_SUPPORTED)]
            self.set_route(bytes(ula), new_port)
            return [adm.response(AdminCmd.ROUTE_STATUS, change_route_args(ula, new_port))]
        if cmd == AdminCmd.READ_REGISTER:
            addr = parse_register(adm.args)[0]
            value = self.register(addr)
            if value is None:
                return [adm.response(AdminCmd.REGISTER_DATA, register_args(addr), AdminStatus.BAD_ARGUMENT)]
            return [adm.response(AdminCmd.REGISTER_DATA, register_args(addr, value))]
        if cmd == AdminCmd.WRITE_REGISTER:
            addr, value = parse_register(adm.args)
            if addr == Register.TREE_PORTS:
                self.tree_ports = value & self.fabric_bitmap(False)
            elif addr == Register.TOPOLOGY_NOTICE:
                self.agent.notice_in(value, port.number, self._now)
            else:  # unknown or read-only
                return [adm.response(AdminCmd.WRITE_STATUS, register_args(addr, value), AdminStatus.BAD_ARGUMENT)]
            return [adm.response(AdminCmd.WRITE_STATUS, register_args(addr, value))]
        if cmd == AdminCmd.SET_ELEMENT_ADDRESS:
            addr = parse_element_address(adm.args)
            if not 0 <= addr <= 255:  # it is byte 3 of the ULAs this switch assigns
                return [adm.response(AdminCmd.ELEMENT_ADDRESS_STATUS, element_address_args(addr),
                                     AdminStatus.BAD_ARGUMENT)]
            if addr != self.switch_id:
                self.switch_id = addr
                self.ula = assigned_ula(addr, 0)
                self.counters["element_address_changed"] += 1
                # the ULAs this switch gave out carry the old id: take them back and tell
                # each endpoint to initialize itself, so it asks for one with the new id
                for ula, p in [(u, p) for u, p in self.table.items() if self.kind.get(u) == "assigned"]:
                    del self.table[ula], self.kind[ula]
                    if self.ports[p].link.up:
                        self.agent.tell(p, AdminCmd.INITIALIZE, b"", self._now)
                self.agent.changed(self._now, "element_address")
            return [adm.response(AdminCmd.ELEMENT_ADDRESS_STATUS, element_address_args(addr))]
        if cmd == AdminCmd.INITIALIZE:
            # back to the configured state: learnt routes and the broadcast tree forgotten
            for ula in [u for u, k in self.kind.items() if k == "route"]:
                self.set_route(ula, C.ROUTE_REMOVE_PORT)
            self.tree_ports = 0
            self.counters["initialized"] += 1
            self.agent.changed(self._now, "initialized")
            return [adm.response(AdminCmd.INITIALIZE_DONE, i_am_args(ElementType.SWITCH, len(self.ports), self.ula))]
        port.counters["admin_invalid"] += 1
        return [adm.invalid()]

    # --- what the fabric agent (discovery.FabricAgent) uses -----------------------------
    def set_route(self, ula: bytes, port: int) -> None:
        if port == C.ROUTE_REMOVE_PORT:
            if self.table.pop(ula, None) is not None:
                self.kind.pop(ula, None)
            return
        self.table[ula] = port
        self.kind[ula] = "route"

    def neighbour_is_switch(self, port: int) -> None:
        """A switch answered on a trust_source port not configured `switch = true`: it
        gets no broadcast and none is taken from it (a loop of such ports would storm)."""
        p = self.ports[port]
        if not p.fabric and not p.stray_switch:
            p.stray_switch = True
            p.counters["broadcast_refused_switch_not_configured"] += 1

    def fabric_bitmap(self, up_only: bool) -> int:
        bits = 0
        for n, p in self.ports.items():
            if p.fabric and (p.link.up or not up_only):
                bits |= 1 << (n - 1)
        return bits

    def port_up(self, port: int) -> bool:
        p = self.ports.get(port)
        return p is not None and p.link.up

    def send_admin(self, port: int, adm: Admin) -> None:
        self._emit_admin(port, adm, C.VC_ADMIN_RESPONSE if adm.is_response else C.VC_ADMIN_REQUEST)

    def next_xid(self) -> int:
        return self.rng.getrandbits(32)

    def register(self, addr: int) -> int | None:
        values: dict[int, int] = {
            Register.ELEMENT_ADDRESS: self.switch_id,
            Register.SERIAL: self.serial,
            Register.PORT_COUNT: len(self.ports),
            Register.TABLE_ENTRIES: len(self.table),
            Register.FABRIC_PORTS: self.fabric_bitmap(False),
            Register.FABRIC_PORTS_UP: self.fabric_bitmap(True),
            Register.TREE_PORTS: self.tree_ports,
            Register.TOPOLOGY_NOTICE: (self.serial << 16) | self.agent.counter,
            Register.MANAGER: self.agent.map.manager if self.agent.map else 0xFFFF,
            Register.MAP_GENERATION: self.agent.generation,
        }
        return values.get(addr)

    def handle_timer(self, now: float) -> None:
        """The fabric agent's timer (walk start, request timeouts)."""
        self._now = now
        self.agent.handle_timer(now)
        self.pump()

    # --- timers and status ----------------------------------------------------------
    def timer(self) -> float:
        return min(min(p.link.timer() for p in self.ports.values()), self.agent.timer())

    def status(self) -> dict[str, object]:
        return {
            "kind": "gsn-switch",
            "switch_id": self.switch_id,
            "broadcast": self.broadcast,
            "table": [
                {"ula": format_ula(u), "port": p, "kind": self.kind.get(u, "?")} for u, p in sorted(self.table.items())
            ],
            "ports": {
                str(n): {"link": p.link.status(), "counters": dict(p.counters), "management": p.management,
                         "trust_source": p.trust_source, "switch": p.fabric, "tree": self._on_tree(n) if p.fabric
                         else None, "unconfigured_switch": p.stray_switch}
                for n, p in self.ports.items()
            },
            "counters": dict(self.counters),
            "serial": f"{self.serial:012x}",
            "fabric": self.agent.describe(),
        }
