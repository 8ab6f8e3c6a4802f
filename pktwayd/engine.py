"""What a half-router does with a packet (spec pktway.md §3.6-3.7), sans-IO.

``from_san`` and ``from_twin`` take decoded packets and return actions:
``("san", addr, packet)`` send natively on my SAN to ``addr`` (the SR of my LRT
entry for it), ``("route", native route, packet)`` send on my SAN along that route,
``("twin", None, packet)`` hand to my twin, ``("local", None, packet)`` for my own
EEP engine.  Routing state lives in a :class:`HalfRouter`.

Optional header fields (spec §1.8) are looked at wherever the EEP header is processed
(L3 forwarding, messages for me), not when an L2RH leads (the header travels untouched,
§3.6): an unknown mandatory field drops the message with ERR/GENERAL to its SA; unknown
optional fields are forwarded unchanged (§1.1) and dropped from a message for me.
Trailer fields are opaque (PC §1.8).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from typing import Literal, TypeAlias

from daemons.wire.errors import DecodeError

from . import messages as M
from .constants import (ADDR_BROADCAST, ADDR_HEY_YOU, ERR_GENERAL_COPY_MAX, KNOWN_OH_TYPES, LIVENESS_MISSES, LIVENESS_S,
                        LOGICAL_BASE, LOGICAL_MASK, REDIRECT_INTERVAL_S, REDIRECTED_MAX, REGATHER_S, PT, ErrTE,
                        RrpTE)
from .eep import L2RH, Packet, Symbol, decode, ei_update
from .drops import BadPacket
from .rrp import Addr, Capa, Ladr, Name, Record, Rthd
from .routing import RT, HalfRouter, NodeEntry, logical_only, native_route, records_to_rt, rt_to_records

Action: TypeAlias = (tuple[Literal["san"], int, Packet] | tuple[Literal["twin", "local"], None, Packet]
                     | tuple[Literal["route"], bytes, Packet])
"""What the half-router asks its driver to do with a packet (the module docstring says each)."""


class Engine:
    """One half-router.  ``liveness`` is the WRU period towards the twin (a twin silent
    for ``LIVENESS_MISSES`` periods is lost) and the period of SAN mapping."""

    def __init__(self, hr: HalfRouter, *, name: bytes | None = None, k: int = 3,
                 liveness: float = LIVENESS_S, now: float = 0.0) -> None:
        self.hr = hr
        self.name = name
        self.k = k
        self.counters: Counter[str] = Counter()
        self.now = now  # the driver keeps it current
        self.gvrt_due: float | None = None
        self.liveness = liveness
        self.twin_alive = False
        self.twin_heard = -1e18
        self.probe_due = now
        # the LRT: configured entries, plus nodes registered by INFO (Hey-You answers),
        # restricted to the native routes the SAN's map says are present (None: all)
        self.static = {n.addr: n for n in hr.lrt_nodes}
        self.registered: dict[int, NodeEntry] = {}
        self.present: set[bytes] | None = None
        self.own_route: bytes | None = None  # my port's native route (my ULA), from the driver
        self.map_seen: set[bytes] = set()  # routes of the last map, each asked "who are you" once
        self.heard: dict[int, float] = {}  # routers of my SAN -> when last heard from
        self.silent: set[int] = set()  # ... and those that stopped answering WRUs
        self.last_tick = now  # when handle_timer last ran
        self.routers: dict[int, bytes] = {}  # router entries -> native route (set by _entries)
        self.redirected: dict[tuple[int, int], float] = {}  # (node, destination) -> no new RDRC before
        self._entries()
        self._index()

    def _index(self) -> None:
        # an L2RH names a node of my SAN by its native route (port byte, or a GSN ULA)
        self.by_route = {n.sr[0]: n.addr for n in self.hr.lrt_nodes if len(n.sr) == 1}

    def route_of(self, addr: int) -> bytes | None:
        """The native route (a ULA on GSN) from me to a node of my SAN."""
        e = self.hr.entry.get(addr)
        return native_route(e) if e is not None else None

    @property
    def me(self) -> int:
        return self.hr.addr

    def _on_my_san(self, addr: int) -> bool:
        return addr in self.hr.entry

    def _reply(self, to: int, pkt: Packet) -> list[Action]:
        if to == 0 or to & 0x800000:
            return []  # unspecified source: no answer
        if to == self.hr.twin:
            return [("twin", None, pkt)]
        if self._on_my_san(to):
            return [("san", to, pkt)]
        best = self.hr.routes(to)
        if best and best[0][3].rcvf[1:2] == (self.hr.twin,):
            return [("twin", None, pkt)]
        if best and len(best[0][3].rcvf) > 1:
            return [("san", best[0][3].rcvf[1], pkt)]
        self.counters["reply_unroutable"] += 1
        return []

    def _general(self, pkt: Packet) -> list[Action]:
        """ERR/GENERAL to the packet's source, carrying a copy of it from its EEP header (§2.2)."""
        raw = replace(pkt, prefix=()).encode()[:ERR_GENERAL_COPY_MAX]
        return self._reply(pkt.sa, M.err(ErrTE.GENERAL, pkt.sa, self.me, raw=raw))

    def _unknown_mandatory(self, pkt: Packet) -> list[Action] | None:
        """None if every mandatory optional header field is of a known type; otherwise the
        drop is counted and the answer is ERR/GENERAL (none about an ERR message)."""
        if not any(o.mandatory and o.otype not in KNOWN_OH_TYPES for o in pkt.options):
            return None
        self.counters["drop_oh_unknown_mandatory"] += 1
        return [] if pkt.pt == PT.ERR else self._general(pkt)

    def _first_hop(self, d: int) -> tuple[Literal["local", "twin"] | int, int] | None:
        """('local' | 'twin' | buddy address, MTU) of the best route to ``d``, or None."""
        if self._on_my_san(d):
            return "local", self.hr.mtu
        routes = self.hr.routes(d)
        if not routes:
            return None
        _q, _sr, mtu, rt = routes[0]
        hop = rt.rcvf[1]
        return ("twin" if hop == self.hr.twin else hop), mtu

    # --- bytes off the wire: what the drivers hand over -----------------------------------------
    def from_san_bytes(self, raw: bytes, dialect: str = "pw0", src_route: bytes | None = None) -> list[Action]:
        """A packet as it came off my SAN (native framing removed); a malformed one is
        dropped, counted by the field that was wrong."""
        try:
            pkt = decode(raw, dialect)
        except DecodeError as exc:
            self.counters[BadPacket.of(exc)] += 1
            return []
        return self.from_san(pkt, src_route=src_route)

    def from_twin_bytes(self, raw: bytes) -> list[Action]:
        """A packet from my twin over the inter-SAN link (PacketWay dialect)."""
        try:
            pkt = decode(raw)
        except DecodeError as exc:
            self.counters[BadPacket.of(exc).from_twin] += 1
            return []
        return self.from_twin(pkt)

    # --- packets from my SAN -----------------------------------------------------------------
    def from_san(self, pkt: Packet, error_detected: bool = False, src_route: bytes | None = None) -> list[Action]:
        back = self._heard(pkt.sa, src_route) if src_route is not None else []
        return back + self._from_san(pkt, error_detected, src_route)

    def _from_san(self, pkt: Packet, error_detected: bool, src_route: bytes | None) -> list[Action]:
        if src_route is not None and not pkt.prefix and pkt.pt == PT.RRP and pkt.te == RrpTE.INFO \
                and pkt.dt in (self.me, ADDR_HEY_YOU):
            refused = self._unknown_mandatory(pkt)
            return refused if refused is not None else self._register(pkt, src_route)
        if pkt.prefix:
            prefix = list(pkt.prefix)
            while prefix and isinstance(prefix[0], Symbol):
                prefix.pop(0)  # a symbol is consumed by the first entity that meets it
                self.counters["symbols_consumed"] += 1
            pkt = replace(pkt, prefix=tuple(prefix), tail=ei_update(pkt.tail, error_detected))
        elif pkt.tail or error_detected:  # EI 0 shifted stays 0: an L3 packet without errors is unchanged
            pkt = replace(pkt, tail=ei_update(pkt.tail, error_detected))
        if pkt.prefix:  # an L2RH leads: L2-forward through my twin, which consumes it
            self.counters["l2_forwarded"] += 1
            return [("twin", None, pkt)]
        return self._l3(pkt, from_twin=False)

    def from_twin(self, pkt: Packet) -> list[Action]:
        self.twin_heard = self.now
        out = [] if self.twin_alive else self.twin_up()
        return out + self._from_twin(pkt)

    def _from_twin(self, pkt: Packet) -> list[Action]:
        if pkt.prefix and isinstance(pkt.prefix[0], L2RH):
            # the twin consumes the L2RH: it is the native route to a node on my SAN
            node = self.by_route.get(pkt.prefix[0])
            if node is None:
                self.counters["l2_bad_route"] += 1
                return []
            out = replace(pkt, prefix=pkt.prefix[1:])
            if self.hr.mtu and out.words > self.hr.mtu:  # no segmentation: it must fit my SAN (§1.1)
                self.counters["l2_over_mtu"] += 1
                return self._general(pkt)
            return [("san", node, out)]
        return self._l3(pkt, from_twin=True)

    def _l3(self, pkt: Packet, from_twin: bool) -> list[Action]:
        refused = self._unknown_mandatory(pkt)
        if refused is not None:
            return refused
        d = pkt.dt
        if d in (self.me, ADDR_HEY_YOU):
            return self._local(pkt)
        if d == ADDR_BROADCAST or d & LOGICAL_MASK == LOGICAL_BASE:
            return self._group(pkt)
        hop = self._first_hop(d)
        if hop is None or (from_twin and hop[0] == "twin"):
            self.counters["l3_unknown_destination"] += 1
            return self._reply(pkt.sa, M.unk(pkt.sa, self.me, d)) if pkt.pt != PT.ERR else []
        where, mtu = hop
        if mtu and pkt.words > mtu:
            self.counters["l3_over_mtu"] += 1
            return self._general(pkt)
        self.counters["l3_forwarded"] += 1
        if where == "twin":
            return [("twin", None, pkt)]
        out: list[Action] = [("san", d if where == "local" else where, pkt)]
        if not from_twin and self._on_my_san(pkt.sa):  # forward and redirect ("D is on your SAN" if local)
            out += self._redirect(pkt.sa, d, d if where == "local" else where)
        return out

    def _redirect(self, node: int, d: int, via: int) -> list[Action]:
        """RDRC(D, via) to a node of my SAN, at most once per REDIRECT_INTERVAL_S per (node, D):
        every packet it sends me meanwhile would otherwise bring another."""
        key = (node, d)
        if self.redirected.get(key, -1e18) > self.now:
            self.counters["rdrc_held"] += 1
            return []
        if len(self.redirected) >= REDIRECTED_MAX:
            self.redirected = {k: t for k, t in self.redirected.items() if t > self.now}
            if len(self.redirected) >= REDIRECTED_MAX:
                self.redirected.pop(next(iter(self.redirected)))
        self.redirected[key] = self.now + REDIRECT_INTERVAL_S
        return [("san", node, M.rdrc(node, self.me, d, via))]

    # --- logical (group) and broadcast destinations (PC, spec §1.2) ------------------------------
    def _group(self, pkt: Packet) -> list[Action]:
        """Deliver to every member: a node listens to the logical addresses it announced (LADR
        in its INFO, carried in the RTs); broadcast reaches every node but routers.  The HR
        that gets the packet from its source makes one copy per member: natively to those of
        its SAN, and along the best L2 source route (CSR ++ SR, as GVL2 would plan it) to
        the others, so the routers on the way only L2-forward: no loop, no duplicate."""
        members = sorted({n.addr for rt in self.hr.rts.values() for n in rt.nodes
                          if not n.router and n.addr not in (pkt.sa, self.me)
                          and (pkt.dt == ADDR_BROADCAST or pkt.dt in n.groups)})
        out: list[Action] = []
        for m in members:
            if self._on_my_san(m):
                out.append(("san", m, pkt))
                continue
            routes = self.hr.routes(m)
            if not routes:
                continue
            _q, sr, _mtu, rt = routes[0]
            if rt.rcvf[1] == self.hr.twin:
                out.append(("twin", None, replace(pkt, prefix=tuple(sr))))
            elif sr and isinstance(sr[0], L2RH):  # (always: the first hop is a buddy's LRT entry)
                out.append(("route", sr[0].route, replace(pkt, prefix=tuple(sr[1:]))))
        self.counters["group_copies"] += len(out)
        if not out:
            self.counters["group_no_members"] += 1
        return out

    # --- my own RRP engine ------------------------------------------------------------------
    def _local(self, pkt: Packet) -> list[Action]:
        if pkt.options:  # only optional ones are left unknown here: drop those fields (§1.8)
            known = tuple(o for o in pkt.options if o.otype in KNOWN_OH_TYPES)
            self.counters["oh_unknown_optional_ignored"] += len(pkt.options) - len(known)
            pkt = replace(pkt, options=known)
        if pkt.pt == PT.ERR:
            self.counters[f"err_{pkt.te}_received"] += 1
            if pkt.te in (ErrTE.HRDOWN, ErrTE.LINKDOWN):
                return self._withdraw(pkt)
            return []
        if pkt.pt == PT.EMBEDDED:  # L3 to me, then on from here as if it came off my SAN
            try:
                inner = decode(pkt.data)
            except DecodeError as exc:
                self.counters[f"embedded_bad_{exc.field}"] += 1
                return self._general(pkt)
            if inner.pt == PT.EMBEDDED and not inner.prefix and inner.dt in (self.me, ADDR_HEY_YOU):
                self.counters["embedded_nested_dropped"] += 1  # one level: no recursion on hostile input
                return []
            self.counters["embedded_unwrapped"] += 1
            return self._from_san(inner, False, None)
        if pkt.pt != PT.RRP:
            self.counters["local_data"] += 1
            return [("local", None, pkt)]
        try:
            te = RrpTE(pkt.te)
            recs = M.records(pkt)
        except ValueError:
            self.counters["rrp_bad"] += 1
            return self._general(pkt)
        self.counters[f"rrp_{te.name}"] += 1
        sa = pkt.sa
        if te is RrpTE.WRU:
            return self._reply(sa, M.info(sa, self.me, self.me, self.name, [(2, self.hr.san_id.to_bytes(3, "big"))]))
        if te is RrpTE.TELL:
            return self._tell(sa, recs, pkt)
        if te is RrpTE.GVRT:
            return self._rt_messages(self.gvrt_answer(sa))
        if te is RrpTE.RTBL:
            rthd = recs[0] if recs else None
            try:
                if not isinstance(rthd, Rthd):
                    raise ValueError("an RTBL carries an RTHD")
                rt = records_to_rt(rthd)
            except ValueError:
                self.counters["rtbl_malformed"] += 1
                return []
            return self._rt_messages(self.hr.receive(sa, rt))
        if te in (RrpTE.GVL2, RrpTE.HRTO):
            asked = recs[0] if recs else None
            if not isinstance(asked, Addr) or not self._on_my_san(sa):
                return self._general(pkt)
            return self._plan(te, sa, asked.addr)
        return []

    def _plan(self, te: RrpTE, sa: int, d: int) -> list[Action]:
        hop = self._first_hop(d)
        if hop is None:
            return [("san", sa, M.unk(sa, self.me, d))]
        where = hop[0]
        if where == "local":
            return [("san", sa, M.rdrc(sa, self.me, d, d))]
        if where != "twin":
            return [("san", sa, M.rdrc(sa, self.me, d, where))]
        if te is RrpTE.HRTO:
            return [("san", sa, M.rdrc(sa, self.me, d, self.me))]
        via_twin = [(q, sr, mtu) for q, sr, mtu, rt in self.hr.routes(d) if rt.rcvf[1:2] == (self.hr.twin,)]
        return [("san", sa, M.l2sr(sa, self.me, d, via_twin[: self.k]))]

    # --- routing-table exchange as RRP messages ----------------------------------------------------
    def _rt_messages(self, pairs: Iterable[tuple[int, RT]]) -> list[Action]:
        out: list[Action] = []
        for dest, rt in pairs:
            try:
                msg = M.rrp(RrpTE.RTBL, dest, self.me, [rt_to_records(rt)])
            except ValueError:  # it grew (CSR hop, RCVF address) past what RL can say
                self.counters["rtbl_unencodable"] += 1
                continue
            out.append(("twin", None, msg) if dest == self.hr.twin else ("san", dest, msg))
        return out

    def gvrt_answer(self, asker: int) -> list[tuple[int, RT]]:
        """One RTBL per kept RT the exchange rule would send to ``asker`` (§3.2)."""
        hr = self.hr
        if asker == hr.twin:
            keep = [rt for rcvf, rt in hr.rts.items() if len(rcvf) == 1 or hr.learned_from.get(rcvf) != hr.twin]
        elif asker in hr.buddies:
            keep = [rt for rcvf, rt in hr.rts.items() if hr.learned_from.get(rcvf) == hr.twin]
        else:
            return []
        return [(asker, rt) for rt in keep]

    def start(self) -> list[Action]:
        """At power-up: the LRT to the twin."""
        return self._rt_messages(self.hr.start())

    # --- HRDOWN / LINKDOWN (§3.4) --------------------------------------------------------------------
    def _withdraw(self, pkt: Packet) -> list[Action]:
        try:
            recs = M.records(pkt)
        except ValueError:
            self.counters["err_malformed"] += 1
            return []
        addrs = tuple(r.addr for r in recs if isinstance(r, Addr))
        code = "HRDOWN" if pkt.te == ErrTE.HRDOWN else "LINKDOWN"
        if len(addrs) != len(recs) or len(addrs) != (1 if code == "HRDOWN" else 2):
            self.counters["err_malformed"] += 1
            return []
        before = len(self.hr.rts)
        relay = self.hr.withdraw(code, addrs, pkt.sa, self.now)
        if len(self.hr.rts) < before:
            self.gvrt_due = self.now + REGATHER_S  # relearn what is left (relayed or not)
        return self._err_to(code, addrs, relay)

    def _err_to(self, code: str, addrs: tuple[int, ...], targets: Iterable[int]) -> list[Action]:
        te = ErrTE.HRDOWN if code == "HRDOWN" else ErrTE.LINKDOWN
        out: list[Action] = []
        for t in targets:
            msg = M.err(te, t, self.me, [M.Addr(a) for a in addrs])
            out.append(("twin", None, msg) if t == self.hr.twin else ("san", t, msg))
        return out

    def twin_lost(self) -> list[Action]:
        """The twin stopped answering (no WRU answer): LINKDOWN(me, twin) to my buddies."""
        self.gvrt_due = self.now + REGATHER_S
        return self._err_to("LINKDOWN", (self.me, self.hr.twin), self.hr.twin_lost())

    def buddy_lost(self, buddy: int) -> list[Action]:
        """A buddy vanished from my SAN: HRDOWN(buddy) to my twin and remaining buddies."""
        self.gvrt_due = self.now + REGATHER_S
        return self._err_to("HRDOWN", (buddy,), self.hr.buddy_lost(buddy))

    def timer(self) -> float:
        return min(self.probe_due, self.gvrt_due if self.gvrt_due is not None else self.probe_due)

    def handle_timer(self, now: float) -> list[Action]:
        self.now = now
        out = []
        if now - self.last_tick > 2 * self.liveness:
            # I was not running (stopped, or starved): my silence, not my neighbours'.
            # Give them a fresh period to answer instead of declaring them all gone.
            self.twin_heard = max(self.twin_heard, now) if self.twin_alive else self.twin_heard
            self.heard = {a: now for a in self.heard}
            self.counters["resumed"] += 1
        self.last_tick = now
        if now >= self.probe_due:  # the twin must answer one WRU out of LIVENESS_MISSES
            self.probe_due = now + self.liveness
            if self.twin_alive and now - self.twin_heard > LIVENESS_MISSES * self.liveness:
                self.twin_alive = False
                self.counters["twin_lost"] += 1
                out += self.twin_lost()
            out.append(("twin", None, M.rrp(RrpTE.WRU, self.hr.twin, self.me, [M.Addr(self.hr.twin)])))
            out += self._probe_routers(now)
        if self.gvrt_due is not None and now >= self.gvrt_due:
            self.gvrt_due = None
            out.append(("twin", None, M.rrp(RrpTE.GVRT, self.hr.twin, self.me)))
            out += [("san", b, M.rrp(RrpTE.GVRT, b, self.me)) for b in sorted(self.hr.buddies)]
        return out

    def twin_up(self) -> list[Action]:
        """The twin answers (again): what the exchange rule owes it (my LRT and what my
        buddies taught me), and ask for what it knows."""
        self.twin_alive = True
        self.counters["twin_up"] += 1
        return self._greet(self.hr.twin)

    def _greet(self, peer: int) -> list[Action]:
        """GVRT to ``peer`` and the RTs it would have had from me, had it been listening
        (what was sent while it or my port was down is lost; SNs make repeats harmless)."""
        gvrt = M.rrp(RrpTE.GVRT, peer, self.me)
        return self._rt_messages(self.gvrt_answer(peer)) + [("twin", None, gvrt) if peer == self.hr.twin
                                                             else ("san", peer, gvrt)]

    # --- my SAN: the map and power-up registration (Hey-You) ----------------------------------------
    def powerup(self) -> list[Action]:
        """My SAN port came up: LRT to the twin, greet my buddies (GVRT, and the RTs my twin
        taught me while the port was down), WRU to Hey-You on every configured route so that
        the nodes behind them tell me who they are."""
        out = self.start() + [m for b in sorted(self.hr.buddies) for m in self._greet(b)]
        routes = {r for n in self.static.values() if (r := native_route(n)) is not None}
        return out + self._hey_you(routes)

    def _hey_you(self, routes: Iterable[bytes]) -> list[Action]:
        mine = self.own_route
        wru = M.rrp(RrpTE.WRU, ADDR_HEY_YOU, self.me, [M.Addr(ADDR_HEY_YOU)])
        return [("route", r, wru) for r in sorted(routes) if r != mine]

    def map_update(self, routes: Iterable[bytes]) -> list[Action]:
        """The SAN's map (a GSN switch's ULA list): the native routes present now.  Entries
        behind vanished routes leave the LRT (a buddy among them: HRDOWN); new routes are
        asked who they are (WRU to Hey-You)."""
        present = set(routes)
        known = {r for n in self.hr.lrt_nodes if (r := native_route(n)) is not None}
        new = present - known - self.map_seen
        self.map_seen = present
        self.present = present
        return self._relrt() + self._hey_you(new)

    # --- buddies must answer too: a router process may die while its port stays up --------------
    def _entries(self) -> dict[int, NodeEntry]:
        """Configured and registered entries (a registration overrides the configuration)."""
        merged = {**self.static, **self.registered}
        self.routers = {a: r for a, n in merged.items() if n.router and a != self.me and (r := native_route(n)) is not None}
        self.hr.san_routers = frozenset(self.routers)  # the SAN-loop rule counts silent buddies too
        return merged

    def _probe_routers(self, now: float) -> list[Action]:
        out = []
        for a, route in sorted(self.routers.items()):
            # only a buddy once heard can fall silent (one still starting up is no news)
            if a not in self.silent and now - self.heard.get(a, now) > LIVENESS_MISSES * self.liveness:
                self.silent.add(a)
                self.counters["buddy_silent"] += 1
                out += self._relrt()  # it leaves my LRT: HRDOWN
            out.append(("route", route, M.rrp(RrpTE.WRU, a, self.me, [M.Addr(a)])))
        return out

    def _heard(self, sa: int, src_route: bytes) -> list[Action]:
        if self.routers.get(sa) != src_route:
            return []
        first = sa not in self.heard
        self.heard[sa] = self.now
        out = []
        if sa in self.silent:
            self.silent.discard(sa)
            self.counters["buddy_back"] += 1
            out = self._relrt()
        if first and sa in self.hr.buddies:
            # What went to it before it could hear (my greeting, the RTs my twin taught me)
            # may be lost, and its greeting to me too: greet it once more (SNs make repeats
            # harmless).  Nothing else would repair that until the next change.
            self.counters["buddy_greeted"] += 1
            out += self._greet(sa)
        return out

    def _register(self, pkt: Packet, src_route: bytes) -> list[Action]:
        try:
            recs = M.records(pkt)
        except ValueError:
            self.counters["info_malformed"] += 1
            return []
        if not recs or not isinstance(recs[0], Addr) or not 1 <= recs[0].addr < ADDR_HEY_YOU \
                or recs[0].addr != pkt.sa or recs[0].addr == self.me:
            self.counters["info_unusable"] += 1
            return []
        name = next((r.name for r in recs if isinstance(r, Name)), None)
        caps = tuple((r.cc, r.params) for r in recs if isinstance(r, Capa) and r.cc != 2)
        groups = logical_only(a for r in recs if isinstance(r, Ladr) for a in r.addrs)
        router = any(isinstance(r, Capa) and r.cc == 2 for r in recs)
        old = self.static.get(pkt.sa)
        entry = NodeEntry(pkt.sa, (L2RH(src_route),), old.q if old else 1, router, name or (old.name if old else None), caps,
                          groups)
        if self.registered.get(pkt.sa) == entry:
            return []
        for other in [a for a, n in self.registered.items() if n.sr == entry.sr and a != pkt.sa]:
            del self.registered[other]  # one node behind a port: a newcomer replaces the last claim
        self.registered[pkt.sa] = entry
        self.counters["nodes_registered"] += 1
        return self._relrt()

    def _relrt(self) -> list[Action]:
        """Recompute the LRT; if it changed, a new SN goes to the twin (and on from there),
        new buddies get our twin-learned RTs, lost buddies cause HRDOWN."""
        nodes = [n for a, n in sorted(self._entries().items()) if a == self.me or a not in self.silent and (
                 self.present is None or native_route(n) in self.present)]
        if tuple(nodes) == self.hr.lrt_nodes:
            return []
        before = self.hr.buddies
        self.hr.set_lrt(nodes)
        self._index()
        self.counters["lrt_changes"] += 1
        out = []
        for b in sorted(before - self.hr.buddies):
            out += self.buddy_lost(b)
        for b in sorted(self.hr.buddies - before):
            out += self._greet(b)
        return self.start() + out

    # --- TELL / INFO (§2.2, levels C and D) ---------------------------------------------------------------
    def _known_nodes(self) -> dict[int, NodeEntry]:
        """Every node structure this HR holds (LRT and XRTs), first seen wins."""
        out: dict[int, NodeEntry] = {}
        for rt in self.hr.rts.values():
            for n in rt.nodes:
                out.setdefault(n.addr, n)
        return out

    def _tell(self, sa: int, recs: list[Record], pkt: Packet) -> list[Action]:
        nodes = self._known_nodes()
        if len(recs) == 1 and isinstance(recs[0], Addr):
            found = [nodes[recs[0].addr]] if recs[0].addr in nodes else []
        elif len(recs) == 1 and isinstance(recs[0], Name):
            found = [n for n in nodes.values() if n.name == recs[0].name]
        elif recs and len(capas := [r for r in recs if isinstance(r, Capa)]) == len(recs):
            wanted = [(r.cc, r.params) for r in capas]
            found = [n for n in nodes.values() if any(_capable(n, cc, params) for cc, params in wanted)]
        else:
            self.counters["tell_malformed"] += 1
            return self._general(pkt)
        if not found:
            return self._reply(sa, M.err(ErrTE.UNK, sa, self.me, [Addr(0)] + recs))
        body: list[Record] = []
        for n in sorted(found, key=lambda n: n.addr):
            body.append(Addr(n.addr))
            if n.name:
                body.append(Name(n.name))
            body.extend(Capa(cc, params) for cc, params in n.caps)
        return self._reply(sa, M.rrp(RrpTE.INFO, sa, self.me, body))


def _capable(node: NodeEntry, cc: int, params: bytes) -> bool:
    """A node matches a CAPA query when it has that capability and every asked parameter
    (e.g. CC 7, a floating-point DSP handling 64-bit IEEE words: params {8})."""
    return any(c == cc and set(params) <= set(p) for c, p in node.caps)
