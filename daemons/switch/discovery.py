"""Fabric discovery and the fabric manager, sans-IO (one per switch, driven by it).

Design (PROJECT CHOICE; the IRIX text says switches map the fabric with Admin
requests of increasing hop count down each link, HIPPI-6400-SC is not public):

* **Every switch walks** the fabric when it changes: breadth first, source-routed
  Admin from its own engine (hop 0 = itself, ROUTE = the output port at each switch
  on the way, at most ADMIN_ROUTE_SLOTS switches deep).  WHAT_ARE_YOU down each
  inter-switch port that is up answers I_AM with the switch id, the port the request
  arrived by (so both ends of the cable are known) and the element serial;
  READ_REGISTER FABRIC_PORTS_UP of each new switch gives the next ports to try.
  Requests of one hop count all finish before any longer one leaves, so every
  switch is reached by a shortest route.
* **The lowest switch id in the map is the fabric manager.**  Only it goes on:
  LIST_ULAS and READ_REGISTER (FABRIC_PORTS, TREE_PORTS) on every switch give the
  endpoints and the current routes and tree; it then programs the difference with
  CHANGE_ROUTE (shortest path, port 0 removes) and WRITE_REGISTER TREE_PORTS (the
  breadth-first spanning tree from itself, for broadcast).  Tree ports are written
  in two rounds: first every switch drops the ports it loses, and only when all
  have answered are new ports added, so no loop of tree links exists in between.
  A partition has its own lowest id, hence its own manager; a dead manager's
  neighbours notice, and the next lowest takes over on the walk that follows.
* **Changes are flooded**: a switch whose inter-switch port goes up or down, or that
  binds a new ULA to a host port, writes TOPOLOGY_NOTICE (its serial and a counter)
  to every neighbouring switch; one that has not seen that counter passes it on to
  its other neighbours and walks.  There is no periodic walk, so an idle fabric
  carries only the links' keepalives.
* A request unanswered for FABRIC_REQUEST_TIMEOUT_S (a link died under the walk)
  leaves the map partial: nothing is removed on such a run, and another follows.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Protocol
from collections.abc import Callable

from .. import constants as C
from ..constants import AdminCmd, AdminStatus, ElementType, Register
from ..wire.errors import LocalProtocolError
from ..wire.admin import (Admin, change_route_args, element_address_args, parse_i_am, parse_i_am_switch,
                          parse_register, parse_ula_list, register_args)
from . import topology as T


class Host(Protocol):
    """What the agent needs from its switch."""
    switch_id: int
    serial: int
    tree_ports: int
    table: dict

    def fabric_bitmap(self, up_only: bool) -> int: ...
    def port_up(self, port: int) -> bool: ...
    def send_admin(self, port: int, adm: Admin) -> None: ...
    def neighbour_is_switch(self, port: int) -> None: ...
    def set_route(self, ula: bytes, port: int) -> None: ...
    def next_xid(self) -> int: ...


@dataclass
class _Req:
    route: tuple[int, ...]
    deadline: float
    on_reply: Callable[[Admin], bool]  # True: the last response of this request


class FabricAgent:
    def __init__(self, host: Host) -> None:
        self.host = host
        self.counter = 0  # own TOPOLOGY_NOTICE counter
        self.seen: OrderedDict[int, int] = OrderedDict()  # origin serial -> last counter
        self.notice_xids: OrderedDict[int, float] = OrderedDict()  # our notices awaiting WRITE_STATUS
        self.neighbour_xids: OrderedDict[int, tuple[int, float]] = OrderedDict()  # WHAT_ARE_YOU on host ports
        self.due: float | None = None  # a walk starts then
        self.flood_due: float | None = None  # our own changes are announced then (coalesced)
        self.again = False
        self.phase = "idle"
        self.started = 0.0
        self.partial = False  # the view is incomplete: remove nothing
        self.retry = False  # ... for a passing reason (timeout, port down): walk again
        self.retries = 0
        self.collisions: list[dict] = []
        self._seq = itertools.count()
        self.queue: list = []  # heap of (route length, seq, route, Admin fields, _Req)
        self.pending: dict[int, _Req] = {}
        self.work: T.FabricMap | None = None
        self.map: T.FabricMap | None = None  # the last complete walk
        self.tree: set = set()
        self.endpoints: dict | None = None
        self.generation = 0
        self.counters: Counter[str] = Counter()
        self.last_run: dict = {}
        self._plan_b: list = []

    # --- triggers --------------------------------------------------------------------
    def changed(self, now: float, reason: str) -> None:
        """Something here changed (a port, a binding): tell the neighbours and walk.
        Changes within FABRIC_SETTLE_S make one notice."""
        self.counters[f"change_{reason}"] += 1
        if self.flood_due is None:
            self.flood_due = now + C.FABRIC_SETTLE_S
        self._schedule(now)

    def notice_in(self, value: int, port: int, now: float) -> None:
        serial, ctr = value >> 16, value & 0xFFFF
        if serial == self.host.serial:
            return
        last = self.seen.get(serial)
        if last is not None and not 0 < (ctr - last) & 0xFFFF < 0x8000:
            self.counters["notice_old"] += 1
            return
        self.seen[serial] = ctr
        self.seen.move_to_end(serial)
        while len(self.seen) > C.FABRIC_NOTICES_REMEMBERED:
            self.seen.popitem(last=False)
        self.counters["notice_new"] += 1
        self._flood(value, port, now)
        self._schedule(now)

    def _flood(self, value: int, except_port: int | None, now: float) -> None:
        for p in T.ports_of(self.host.fabric_bitmap(True)):
            if p != except_port:
                self.tell(p, AdminCmd.WRITE_REGISTER, register_args(Register.TOPOLOGY_NOTICE, value), now)
                self.counters["tx_notice"] += 1

    def tell(self, port: int, command: int, args: bytes, now: float) -> None:
        """A request to the element across ``port`` whose answer only needs consuming."""
        xid = self.host.next_xid()
        if len(self.notice_xids) < C.ADMIN_XID_TABLE_MAX:
            self.notice_xids[xid] = now + C.FABRIC_REQUEST_TIMEOUT_S
        self.host.send_admin(port, self._request(command, xid, (port,), args))

    def ask_neighbour(self, port: int, now: float) -> None:
        """WHAT_ARE_YOU to the element across a host port (switch.neighbour_is_switch if
        a switch answers)."""
        xid = self.host.next_xid()
        while len(self.neighbour_xids) >= C.FABRIC_NOTICES_REMEMBERED:
            self.neighbour_xids.popitem(last=False)
        self.neighbour_xids[xid] = (port, now + C.FABRIC_REQUEST_TIMEOUT_S)
        self.host.send_admin(port, self._request(AdminCmd.WHAT_ARE_YOU, xid, (port,)))

    def _schedule(self, now: float) -> None:
        if self.phase != "idle":
            self.again = True
        elif self.due is None:
            self.due = now + C.FABRIC_SETTLE_S

    # --- time --------------------------------------------------------------------------
    def timer(self) -> float:
        t = min(x for x in (self.due, self.flood_due, float("inf")) if x is not None)
        if self.pending:
            t = min(t, min(r.deadline for r in self.pending.values()))
        if self.notice_xids:
            t = min(t, next(iter(self.notice_xids.values())))
        if self.neighbour_xids:
            t = min(t, next(iter(self.neighbour_xids.values()))[1])
        return t

    def handle_timer(self, now: float) -> None:
        if self.flood_due is not None and now >= self.flood_due:
            self.flood_due = None
            self.counter = (self.counter + 1) & 0xFFFF
            self._flood((self.host.serial << 16) | self.counter, None, now)
        while self.notice_xids and next(iter(self.notice_xids.values())) <= now:
            self.notice_xids.popitem(last=False)
        while self.neighbour_xids and next(iter(self.neighbour_xids.values()))[1] <= now:
            self.neighbour_xids.popitem(last=False)
        for xid in [x for x, r in self.pending.items() if r.deadline <= now]:
            del self.pending[xid]
            self.counters["request_timeout"] += 1
            self.partial = self.retry = True
        if self.phase == "idle" and self.due is not None and now >= self.due:
            self.due = None
            self._start(now)
        self._pump(now)

    # --- requests ----------------------------------------------------------------------
    @staticmethod
    def _request(command: int, xid: int, route: tuple[int, ...], args: bytes = b"") -> Admin:
        """From this switch's engine: it is hop 0 and spends ROUTE[0] itself."""
        full = tuple(route) + (C.ADMIN_ROUTE_UNUSED,) * (C.ADMIN_ROUTE_SLOTS - len(route))
        return Admin(command, xid, len(route) - 1, len(route), 1, full, AdminStatus.OK,
                     bytes(args).ljust(16, b"\0"))

    def _ask(self, route: tuple[int, ...], command: int, args: bytes, on_reply: Callable[[Admin], bool]) -> None:
        heapq.heappush(self.queue, (len(route), next(self._seq), route, command, args, on_reply))

    def _pump(self, now: float) -> None:
        while self.queue and len(self.pending) < C.FABRIC_WINDOW:
            depth, _, route, command, args, on_reply = self.queue[0]
            if self.pending and min(len(r.route) for r in self.pending.values()) < depth:
                break  # breadth first: a shorter route is still out
            heapq.heappop(self.queue)
            if not self.host.port_up(route[0]):
                self.counters["request_port_down"] += 1
                self.partial = self.retry = True
                continue
            xid = self.host.next_xid()
            self.pending[xid] = _Req(route, now + C.FABRIC_REQUEST_TIMEOUT_S, on_reply)
            self.host.send_admin(route[0], self._request(command, xid, route, args))
            self.counters["tx_requests"] += 1
        if not self.queue and not self.pending and self.phase != "idle":
            self._advance(now)

    def response(self, adm: Admin, port: int, now: float) -> bool:
        """A response arriving at this switch: True if it answers one of ours (consumed)."""
        if adm.xid in self.notice_xids:
            if adm.hop_count == 1:
                del self.notice_xids[adm.xid]
                self.counters["rx_notice_ack"] += 1
                return True
            return False
        if adm.xid in self.neighbour_xids:
            if adm.hop_count != 1 or self.neighbour_xids[adm.xid][0] != port:
                return False
            del self.neighbour_xids[adm.xid]
            if adm.command == AdminCmd.I_AM and parse_i_am(adm.args)[0] == ElementType.SWITCH:
                self.host.neighbour_is_switch(port)
            return True
        req = self.pending.get(adm.xid)
        if req is None:
            return False
        if adm.hop_count != 1 or port != req.route[0]:
            self.counters["response_misrouted"] += 1
            return True
        self.counters["rx_responses"] += 1
        if adm.command == AdminCmd.INVALID_ADMIN:
            self.counters["response_invalid"] += 1
            self.partial = self.retry = True
            last = True
        else:
            last = req.on_reply(adm)
        if last:
            del self.pending[adm.xid]
        self._pump(now)
        return True

    # --- the walk ----------------------------------------------------------------------
    def _walking(self) -> T.FabricMap:
        """The map the walk in progress fills (a walk step without one is our bug)."""
        if self.work is None:
            raise LocalProtocolError("fabric discovery", self.phase, "a walk step without a walk")
        return self.work

    def _start(self, now: float) -> None:
        h = self.host
        self.phase = "walk"
        self.started = now
        self.partial = self.retry = False
        self.again = False
        self.sent_before = self.counters["tx_requests"]
        self.work = work = T.FabricMap(h.switch_id)
        work.switches[h.switch_id] = T.SwitchNode(
            h.switch_id, h.serial, (), h.fabric_bitmap(True), h.fabric_bitmap(False), h.tree_ports, dict(h.table))
        for p in T.ports_of(h.fabric_bitmap(True)):
            self._probe((p,), (h.switch_id, p))

    def _probe(self, route: tuple[int, ...], near: T.End) -> None:
        def on_i_am(adm: Admin) -> bool:
            etype, _ports, ula = parse_i_am(adm.args)
            if adm.command != AdminCmd.I_AM or etype != ElementType.SWITCH:
                self.counters["endpoint_on_fabric_port"] += 1
                return True
            sid = ula[3]
            arrival, serial = parse_i_am_switch(adm.args)
            work = self._walking()
            work.links.add(T.link(near, (sid, arrival)))
            known = work.switches.get(sid)
            if known is not None:
                if known.serial != serial:
                    self.counters["switch_id_conflict"] += 1
                    # the one with the higher serial is to change: where is it
                    higher = list(route) if serial > known.serial else list(known.route)
                    work.conflicts.append({"id": sid, "serials": [f"{known.serial:012x}", f"{serial:012x}"],
                                                "renumber": higher})
                return True
            node = work.switches[sid] = T.SwitchNode(sid, serial, route)

            def on_ports(reg: Admin) -> bool:
                node.ports_up = parse_register(reg.args)[1]
                for q in T.ports_of(node.ports_up):
                    if q == arrival:
                        continue
                    if len(route) >= C.ADMIN_ROUTE_SLOTS:
                        self.counters["walk_beyond_route_slots"] += 1
                        self.partial = True
                        continue
                    self._probe(route + (q,), (sid, q))
                return True
            self._ask(route, AdminCmd.READ_REGISTER, register_args(Register.FABRIC_PORTS_UP), on_ports)
            return True
        self._ask(route, AdminCmd.WHAT_ARE_YOU, b"", on_i_am)

    # --- the manager ---------------------------------------------------------------------
    def _collect(self) -> None:
        for sid, node in self._walking().switches.items():
            if sid == self.host.switch_id:
                continue
            node.table = {}

            def on_list(adm: Admin, node=node) -> bool:
                if adm.status != AdminStatus.OK:
                    return True  # an empty table
                _i, _total, ula, port, more = parse_ula_list(adm.args)
                if len(node.table) >= C.SWITCH_TABLE_MAX and ula not in node.table:
                    self.counters["list_beyond_table_max"] += 1  # no switch holds more: stop listening
                    self.partial = True
                    return True
                node.table[ula] = port
                return not more

            def on_reg(adm: Admin, node=node) -> bool:
                addr, data = parse_register(adm.args)
                if addr == Register.FABRIC_PORTS:
                    node.fabric_ports = data
                else:
                    node.tree = data
                return True
            self._ask(node.route, AdminCmd.LIST_ULAS, b"\0\0", on_list)
            self._ask(node.route, AdminCmd.READ_REGISTER, register_args(Register.FABRIC_PORTS), on_reg)
            self._ask(node.route, AdminCmd.READ_REGISTER, register_args(Register.TREE_PORTS), on_reg)

    def _program(self) -> None:
        fmap = self._walking()
        eps, collisions = T.endpoints(fmap)
        self.endpoints = eps
        self.collisions = collisions
        self.counters["ula_collisions"] = len(collisions)
        want = T.wanted_routes(fmap, eps)
        self.tree = T.spanning_tree(fmap.adjacency(), fmap.manager)
        bits = T.tree_bitmaps(self.tree, fmap.switches)
        self._plan_b = []
        for sid, node in fmap.switches.items():
            have = T.current_routes(node)
            changes = {u: p for u, p in want[sid].items() if have.get(u) != p}
            if not self.partial:  # never remove on a partial view
                changes.update({u: C.ROUTE_REMOVE_PORT for u in have if u not in want[sid]})
            for ula, port in sorted(changes.items()):
                self._route(node, ula, port)
            keep = node.tree & bits[sid]
            if keep != node.tree:
                self._tree(node, keep)
            if bits[sid] != keep:
                self._plan_b.append((node, bits[sid]))

    def _route(self, node: T.SwitchNode, ula: bytes, port: int) -> None:
        self.counters["routes_programmed"] += 1
        if node.id == self.host.switch_id:
            self.host.set_route(ula, port)
            return
        self._ask(node.route, AdminCmd.CHANGE_ROUTE, change_route_args(ula, port), self._status_ok)

    def _tree(self, node: T.SwitchNode, bits: int) -> None:
        self.counters["tree_writes"] += 1
        if node.id == self.host.switch_id:
            self.host.tree_ports = bits
            return
        self._ask(node.route, AdminCmd.WRITE_REGISTER, register_args(Register.TREE_PORTS, bits), self._status_ok)

    def _status_ok(self, adm: Admin) -> bool:
        if adm.status != AdminStatus.OK:
            self.counters["program_refused"] += 1
            self.partial = self.retry = True
        return True

    def _renumber(self) -> None:
        """Two switches answered with one id: the one with the higher serial gets a free
        id (SET_ELEMENT_ADDRESS; the highest free, least likely to be configured on a
        switch not mapped yet), and its notice brings another walk.  Two duplicates
        that are both "manager" of their partition agree on which one changes; if it
        is this switch, the other one does it."""
        work = self._walking()
        taken = set(work.switches)
        for c in work.conflicts:
            if not c["renumber"]:
                continue
            free = next((i for i in range(255, 0, -1) if i not in taken), None)
            if free is None:
                return
            taken.add(free)
            self.counters["renumbered"] += 1
            self._ask(tuple(c["renumber"]), AdminCmd.SET_ELEMENT_ADDRESS, element_address_args(free),
                      self._status_ok)
        self.again = True

    def _advance(self, now: float) -> None:
        if self.phase == "walk":
            work = self._walking()
            if work.conflicts and work.manager == self.host.switch_id:
                self._renumber()  # this map joins two switches in one: program nothing from it
                self.phase = "renumber"
            elif work.manager == self.host.switch_id and len(work.switches) > 1:
                self.phase = "collect"
                self._collect()
            elif work.manager == self.host.switch_id:
                self.phase = "program_a"
                self._program()
            else:
                self._finish(now)
                return
        elif self.phase == "renumber":
            self._finish(now)
            return
        elif self.phase == "collect":
            self.phase = "program_a"
            self._program()
        elif self.phase == "program_a":
            self.phase = "program_b"
            for node, bits in self._plan_b:
                self._tree(node, bits)
        else:
            self._finish(now)
            return
        self._pump(now)

    def _finish(self, now: float) -> None:
        fmap = self._walking()
        self.map, self.work = fmap, None
        if fmap.manager != self.host.switch_id:
            self.endpoints = None
            self.tree = T.spanning_tree(fmap.adjacency(), fmap.manager)
        self.generation += 1
        self.last_run = {"seconds": round(now - self.started, 4), "partial": self.partial,
                         "requests": self.counters["tx_requests"] - self.sent_before}
        self.phase = "idle"
        self.retries = self.retries + 1 if self.retry else 0
        if self.again or (self.retry and self.retries <= C.FABRIC_RETRIES):
            self._schedule(now)

    # --- status ---------------------------------------------------------------------------
    def describe(self) -> dict:
        phase = "scheduled" if self.phase == "idle" and self.due is not None else self.phase
        if self.map is None:
            return {"generation": 0, "phase": phase, "counters": dict(self.counters)}
        d = T.describe(self.map, self.tree, self.endpoints)
        d.update(generation=self.generation, phase=phase, last_run=self.last_run,
                 counters=dict(self.counters), collisions=self.collisions)
        return d
