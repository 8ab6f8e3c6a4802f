"""IP over PacketWay, sans-IO: the core behind a node's ``pw0`` interface.

An IP packet read from pw0 becomes one L3 EEP packet whose PT is the packet's
EtherType (0x0800 IPv4, 0x86DD IPv6), sent to the node's half-router; an EEP packet
of those types addressed to this node is written to pw0.  There is no link layer
(pw0 is a TUN device): the IP destination is resolved to a PacketWay address from
the configured peers, else by asking the router (TELL by NAME, the destination's
address as text; a pw0 node announces that name), learned answers and sources of
received packets kept for a while.  Learning is spoof-safe: a received packet's
source (unverified) never replaces a live entry that says otherwise; it is counted,
and the node asks the router (TELL) - only the router's answer (confirmed) moves an
entry to a new address.  Nothing is fragmented: pw0's MTU follows the
MinMTU of the routes to the configured peers (GVL2 -> L2SR, asked at bring-up and again
every ``mtu_recheck`` seconds), and when a router
returns a packet as too big for its route (ERR/GENERAL with the packet's copy) the
node asks for the route's MTU and hands its IP stack an ICMP "fragmentation needed"
or ICMPv6 "packet too big" for that destination.

Level B: the router's redirects are obeyed.  A half-router that forwards my packet to
a buddy on my SAN (or straight to a node of my SAN) tells me so (RDRC(D, H): "for D,
use H"); I need H's native route, so I ask H itself who it is (WRU, L3 through my
router), and H's INFO, when it comes straight from H (not from my router's route),
gives it.  From then on packets to D go to H directly for ``IP_REDIRECT_TTL_S``, then
through my router again, which redirects me anew if that still holds.  Only my
router's redirects count (a frame from its route), and only answers to my own WRUs
teach a native route.

Level C, "which router?": a pw0 node keeps the half-routers of its SAN it knows (the
configured ones, and those whose power-up WRU to Hey-You reached it).  Without a router
(none given, or mine heard from for ``IP_ROUTER_MISSES`` x ``IP_ROUTER_PROBE_S``: it is
asked who it is, WRU, whenever it was quiet for ``IP_ROUTER_PROBE_S``) I announce myself
to each of them and ask it HRTO(D) (D: my first configured peer, else me) every
``IP_HRTO_RETRY_S``; the first that answers with a redirect becomes my router, and its
redirect is obeyed as any other.

IP multicast goes to a PacketWay logical address (the group's low 19 bits, see
:func:`logical_of`) and IPv4's limited broadcast to the PacketWay broadcast address:
the half-router copies it to every member (a node's groups are the LADR of its INFO).
A pw0 node listens to all-hosts/all-nodes, the groups it was given and those its IP
stack joined on pw0 (:meth:`IpNode.set_kernel_groups`; a change is announced anew).

Actions returned, for the driver to carry out:
``("pw", Packet, route)`` send on the SAN (route None: to the half-router),
``("tun", bytes)`` write to pw0, ``("mtu", n)`` set pw0's MTU.
"""

from __future__ import annotations

import ipaddress
import struct
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from daemons.wire.errors import DecodeError

from . import constants as K
from . import ippacket
from . import messages as M
from .constants import ADDR_BROADCAST, ADDR_HEY_YOU, LOGICAL_BASE, LOGICAL_MASK, PT, ErrTE, RrpTE
from .eep import L2RH, Packet, decode
from .drops import BadPacket
from .ippacket import IP
from .rrp import Addr, Name, Record, Srqr

IP_TYPES = (K.PT_IPV4, K.PT_IPV6)
OVERHEAD = 8 * K.IP_HEADER_WORDS
Action: TypeAlias = (tuple[Literal["pw"], Packet, bytes | None] | tuple[Literal["tun"], bytes]
                     | tuple[Literal["mtu"], int])
"""What the driver is to do (the module docstring says each)."""
PLATEAUS = (65535, 32000, 17914, 8166, 4352, 2002, 1492, 1280, 1006, 508, 296, 68)  # RFC 1191 + IPv6's floor


def ip_mtu(words: int) -> int | None:
    """The largest IP packet an L3 EEP packet of ``words`` (an MTU; 0 = unlimited) holds."""
    return None if words == 0 else max(0, 8 * words - OVERHEAD)


V4_BROADCAST = ipaddress.IPv4Address("255.255.255.255")


def logical_of(ip: IP) -> int | None:
    """The PacketWay address an IP multicast or broadcast destination goes to, else None."""
    if ip.version == 4 and ip == V4_BROADCAST:
        return ADDR_BROADCAST
    if not ip.is_multicast:
        return None
    base = K.IP_GROUP_V4_BASE if ip.version == 4 else K.IP_GROUP_V6_BASE
    return base | (int(ip) & K.IP_GROUP_BITS)


def _logical(ips: Iterable[IP]) -> set[int]:
    return {a for ip in ips if (a := logical_of(ip)) is not None}


def is_group(a: int) -> bool:
    return a == ADDR_BROADCAST or a & LOGICAL_MASK == LOGICAL_BASE


def plateau_below(size: int, v6: bool) -> int:
    floor = ippacket.IPV6_MIN_MTU if v6 else 68
    return next((p for p in PLATEAUS if p < size and p >= floor), floor)


@dataclass
class _Pending:
    packets: deque[bytes] = field(default_factory=lambda: deque(maxlen=K.IP_PENDING_PACKETS))
    tries: int = 0
    next: float = 0.0


@dataclass
class _MtuQuery:
    until: float
    tries: int = 1
    copies: deque[tuple[bytes, int]] = field(default_factory=lambda: deque(maxlen=K.IP_TOO_BIG_HELD))  # (IP packet, size)


class IpNode:
    def __init__(self, addr: int, *, peers: Mapping[str | IP, int] | None = None, name: bytes | None = None,
                 mtu: int | None = None, groups: Iterable[str] = (), mtu_recheck: float = K.IP_MTU_RECHECK_S,
                 router: bytes | None = None, routers: Iterable[bytes] = (),
                 now: float = 0.0) -> None:
        self.addr = addr
        self.router = router  # my half-router's native route: only its redirects count (None: none do)
        # the half-routers of my SAN I know (native route -> address, 0 until said), router first
        self.hrs: dict[bytes, int] = dict.fromkeys([r for r in (router, *routers) if r is not None][: K.IP_HRS_MAX], 0)
        self.started = False  # start() ran: my port is up
        self.router_heard = now  # the last frame from my router
        self.next_probe = now + K.IP_ROUTER_PROBE_S
        self.hrto_asked: set[bytes] = set()  # asked in the current round (HRTO): their redirect chooses
        self.next_hrto = now
        self.own_route: bytes | None = None  # my port's native route (the driver's, once the port is up)
        self.wru_direct: dict[int, float] = {}  # asker answered straight to its native route -> not again until
        self.redirects: dict[int, tuple[int, float]] = {}  # destination -> (node or HR of my SAN, until)
        self.native: dict[int, bytes] = {}  # node or HR of my SAN -> its native route (its INFO said)
        self.wru_asked: dict[int, float] = {}  # redirected-to node I asked "who are you" -> until
        self.wru_quiet: dict[int, float] = {}  # ... that did not answer itself: not asked again until
        self.name = name
        joined = [ipaddress.ip_address(g) for g in (*K.IP_GROUPS_ALWAYS, *groups)]
        logical = [logical_of(g) for g in joined]
        if len(logical) > K.IP_GROUPS_MAX or any(a is None or a == ADDR_BROADCAST for a in logical):
            raise ValueError(f"groups are IP multicast addresses, at most {K.IP_GROUPS_MAX}")
        self.joined = frozenset(joined)  # always listened to (all-hosts/all-nodes, --join)
        self.kernel_groups: frozenset[IP] = frozenset()  # the IP stack's memberships on pw0 (set_kernel_groups)
        self.groups = tuple(sorted(_logical(joined)))  # the logical addresses I listen to
        self.static: dict[IP, int] = {ipaddress.ip_address(ip): a for ip, a in (peers or {}).items()}
        # the same by packed address, unicast ones: a packet's bytes find them without ipaddress objects
        self.static_packed: dict[bytes, int] = {ip.packed: a for ip, a in self.static.items() if logical_of(ip) is None}
        self.learned: dict[IP, tuple[int, float, bool]] = {}  # ip -> (address, until, confirmed by the router's INFO)
        self.negative: dict[IP, float] = {}  # ip -> until
        self.pending: dict[IP, _Pending] = {}
        self.route_mtu: dict[int, int] = {}  # PacketWay address -> largest IP packet
        self.mtu_queries: dict[int, _MtuQuery] = {}
        self.fixed_mtu = mtu
        self.mtu = mtu or K.IP_DEFAULT_MTU  # pw0's
        self.mtu_recheck = mtu_recheck  # 0: pw0's MTU is set at bring-up only
        self.next_recheck = float("inf")  # the first round is start()'s
        self.awaiting: set[int] = set()  # peers whose route MTU the current round still waits for
        self.now = now
        self.counters: Counter[str] = Counter()

    # --- start and timers -------------------------------------------------------------------------
    def start(self) -> list[Action]:
        """Announce myself (INFO to Hey-You: the router registers me under my name) and ask
        the MinMTU of the routes to the configured peers (pw0's MTU follows them); without a
        router, ask those I know which to use (HRTO)."""
        self.started = True
        self.next_probe = self.now + K.IP_ROUTER_PROBE_S
        if self.router is None:
            return self._hrto_round()
        self.router_heard = self.now
        out: list[Action] = [("pw", self._announce(ADDR_HEY_YOU), None)]
        return out + self._mtu_round()

    # --- level C: which router? ------------------------------------------------------------------------
    def _hrto_round(self) -> list[Action]:
        """Announce myself to every half-router I know (they answer HRTO only for nodes of
        their SAN) and ask it which HR to use (HRTO, to Hey-You: I may not know its address)."""
        self.next_hrto = self.now + K.IP_HRTO_RETRY_S
        self.hrto_asked = set(self.hrs)
        if not self.hrs:
            self.counters["hrto_no_router_known"] += 1
            return []
        d = min(self.static.values(), default=self.addr)
        hrto = M.rrp(RrpTE.HRTO, ADDR_HEY_YOU, self.addr, [Addr(d)])
        self.counters["hrto_sent"] += len(self.hrs)
        return [a for r in self.hrs for a in (("pw", self._announce(ADDR_HEY_YOU), r), ("pw", hrto, r))]

    def _router_chosen(self, route: bytes, sa: int) -> list[Action]:
        """An HR I asked (HRTO) answered: it is my router from now on."""
        self.router = route
        self.hrs[route] = sa
        self.hrto_asked = set()
        self.counters["router_chosen"] += 1
        return self.start()

    def _router_liveness(self, now: float) -> list[Action]:
        if not self.started:
            return []
        if self.router is None:
            return self._hrto_round() if now >= self.next_hrto else []
        if now - self.router_heard >= K.IP_ROUTER_MISSES * K.IP_ROUTER_PROBE_S:
            self.counters["router_silent"] += 1  # it may come back: it stays among those asked
            self.router = None
            return self._hrto_round()
        if now < self.next_probe:
            return []
        self.next_probe = now + K.IP_ROUTER_PROBE_S
        if now - self.router_heard < K.IP_ROUTER_PROBE_S:
            return []
        self.counters["router_probed"] += 1
        return [("pw", M.rrp(RrpTE.WRU, ADDR_HEY_YOU, self.addr, []), None)]

    def _mtu_round(self) -> list[Action]:
        """Ask the MinMTU of the routes to the configured peers; once all answered (or timed
        out), pw0's MTU is the least of them."""
        peers = set(self.static.values())
        self.awaiting = peers if self.fixed_mtu is None else set()
        self.next_recheck = self.now + self.mtu_recheck
        out = []
        for a in sorted(peers):
            out += self._ask_mtu(a)
        return out

    def set_kernel_groups(self, ips: Iterable[IP]) -> list[Action]:
        """The IP stack's multicast memberships on pw0 now (a socket or ``ip maddr`` joined
        or left): I listen to their logical addresses too, and if that changed I announce
        myself again (INFO with the new LADR: the router copies group packets to members)."""
        ips = frozenset(ip for ip in ips if logical_of(ip) not in (None, ADDR_BROADCAST))
        if ips == self.kernel_groups:
            return []
        self.kernel_groups = ips
        logical = sorted(_logical(self.joined | ips))
        if len(logical) > K.IP_GROUPS_MAX:
            self.counters["groups_over_max"] += len(logical) - K.IP_GROUPS_MAX
            keep = _logical(self.joined)
            logical = sorted(keep | set([a for a in logical if a not in keep][: K.IP_GROUPS_MAX - len(keep)]))
        groups = tuple(logical)
        if groups == self.groups:
            return []
        self.groups = groups
        self.counters["groups_changed"] += 1
        return [("pw", self._announce(ADDR_HEY_YOU), None)]

    def _announce(self, dt: int) -> Packet:
        return M.info(dt, self.addr, self.addr, self.name, (), self.groups)

    def _rechecks(self) -> bool:
        return bool(self.static) and self.fixed_mtu is None and self.mtu_recheck > 0

    def timer(self) -> float:
        times = [p.next for p in self.pending.values()] + [q.until for q in self.mtu_queries.values()]
        times += [until for _, until in self.redirects.values()] + list(self.wru_asked.values())
        times += list(self.wru_quiet.values())
        times += [self.next_recheck] if self._rechecks() else []
        if self.started:
            times.append(self.next_probe if self.router is not None else self.next_hrto)
        return min(times, default=self.now + 1.0)

    def handle_timer(self, now: float) -> list[Action]:
        self.now = now
        out = self._router_liveness(now)
        out += self._mtu_round() if self._rechecks() and now >= self.next_recheck and self.router is not None else []
        for ip, p in list(self.pending.items()):
            if p.next > now:
                continue
            if p.tries >= K.IP_RESOLVE_TRIES:
                del self.pending[ip]
                self.negative[ip] = now + K.IP_NEGATIVE_S
                self.counters["drop_unresolved"] += len(p.packets)
                continue
            out += self._tell(ip, p)
        for a, q in list(self.mtu_queries.items()):
            if q.until > now:
                continue
            if a in self.awaiting and not q.copies and q.tries < K.IP_RESOLVE_TRIES:  # a round: ask again
                q.tries += 1
                q.until = now + K.IP_RESOLVE_RETRY_S
                self.counters["gvl2_sent"] += 1
                out.append(("pw", M.gvl2(ADDR_HEY_YOU, self.addr, a), None))
                continue
            self.counters["mtu_query_unanswered"] += 1  # no L2SR: guess from the packets' own sizes
            out += self._mtu_known(a, None)
        for ip in [ip for ip, until in self.negative.items() if until <= now]:
            del self.negative[ip]
        for d in [d for d, (_, until) in self.redirects.items() if until <= now]:
            del self.redirects[d]  # through my router again: it redirects me anew if that still holds
            self.counters["redirect_expired"] += 1
        for h in [h for h, until in self.wru_asked.items() if until <= now]:
            del self.wru_asked[h]
            if len(self.wru_quiet) < K.IP_REDIRECTS_MAX:  # down, or a node that answers the way it was asked
                self.wru_quiet[h] = now + K.IP_WRU_QUIET_S
            self.counters["redirect_wru_unanswered"] += 1
        for h in [h for h, until in self.wru_quiet.items() if until <= now]:
            del self.wru_quiet[h]
        return out

    # --- resolution ---------------------------------------------------------------------------------
    def resolve(self, ip: IP) -> int | None:
        if ip in self.static:
            return self.static[ip]
        hit = self.learned.get(ip)
        if hit is not None and hit[1] > self.now:
            return hit[0]
        return None

    def _learn(self, ip: IP, addr: int, confirmed: bool) -> list[Action]:
        """Keep ip -> addr.  From a packet's source (not confirmed) only when nothing live says
        otherwise; a conflict is counted and asked of the router, whose answer decides."""
        if ip in self.static or not 1 <= addr < ADDR_HEY_YOU:
            return []
        hit = self.learned.get(ip)
        if hit is not None and hit[1] > self.now and hit[0] != addr and not confirmed:
            self.counters["learn_refused_confirmed" if hit[2] else "learn_refused_conflict"] += 1
            if hit[2] or ip in self.pending or len(self.pending) >= K.IP_PENDING_DESTS:
                return []
            p = self.pending[ip] = _Pending()  # verify: TELL, the INFO answer is confirmed
            return self._tell(ip, p)
        if hit is None and len(self.learned) >= K.IP_NEIGHBOURS_MAX:
            oldest = min(self.learned, key=lambda k: self.learned[k][1])
            del self.learned[oldest]
            self.counters["neighbour_evicted"] += 1
        keep = confirmed or (hit is not None and hit[2] and hit[0] == addr and hit[1] > self.now)
        self.learned[ip] = (addr, self.now + K.IP_LEARNED_S, keep)
        return []

    def _tell(self, ip: IP, p: _Pending) -> list[Action]:
        p.tries += 1
        p.next = self.now + K.IP_RESOLVE_RETRY_S
        self.counters["tell_sent"] += 1
        return [("pw", M.rrp(RrpTE.TELL, ADDR_HEY_YOU, self.addr, [Name(str(ip).encode())]), None)]

    # --- MTU ------------------------------------------------------------------------------------------
    def _ask_mtu(self, a: int) -> list[Action]:
        if a in self.mtu_queries:
            return []
        if len(self.mtu_queries) >= K.IP_MTU_QUERIES_MAX:
            self.counters["mtu_query_refused_full"] += 1
            return []
        self.mtu_queries[a] = _MtuQuery(self.now + K.IP_RESOLVE_RETRY_S)
        self.counters["gvl2_sent"] += 1
        return [("pw", M.gvl2(ADDR_HEY_YOU, self.addr, a), None)]

    def _mtu_known(self, a: int, mtu: int | None) -> list[Action]:
        """The route to ``a`` holds IP packets of ``mtu`` bytes (None: not said); the held
        too-big copies become ICMP errors to my own stack."""
        q = self.mtu_queries.pop(a, None)
        out = []
        if mtu is not None:
            self.route_mtu[a] = mtu
        if a in self.awaiting:
            self.awaiting.discard(a)
            if not self.awaiting:
                out += self._follow_routes()
        for copy, size in (q.copies if q else ()):
            limit = self.route_mtu.get(a)
            if limit is None or limit >= size:  # the router said too big, yet the route says it fits
                limit = plateau_below(size, copy[0] >> 4 == 6)
                self.route_mtu[a] = limit
            out += self._too_big(copy, limit)
        return out

    def _follow_routes(self) -> list[Action]:
        """pw0's MTU := the least MinMTU of the routes to the configured peers (at bring-up and
        every ``mtu_recheck`` s; between rounds a shrink reaches the IP stack per destination,
        as an ICMP error)."""
        known = [self.route_mtu[p] for p in set(self.static.values()) if p in self.route_mtu]
        if not known:
            return []
        want = max(68, min(65535, min(known)))
        if want == self.mtu:
            return []
        self.mtu = want
        self.counters["mtu_changed"] += 1
        return [("mtu", want)]

    def _too_big(self, ip_packet: bytes, mtu: int) -> list[Action]:
        icmp = ippacket.too_big(ip_packet, mtu)
        if icmp is None:
            self.counters["too_big_unquotable"] += 1
            return []
        self.counters[f"icmp_too_big_v{ip_packet[0] >> 4}"] += 1
        return [("tun", icmp)]

    # --- from pw0 ----------------------------------------------------------------------------------------
    def from_tun(self, raw: bytes, now: float) -> list[Action]:
        self.now = now
        c = self.counters
        head = ippacket.addresses(raw)
        if head is None:
            c["tun_drop_not_ip"] += 1
            return []
        a = self.static_packed.get(head[2])
        if a is not None:  # the common case: a configured peer
            return self._send(a, head[0], raw)
        pt, dst = head[0], ipaddress.ip_address(head[2])
        group = logical_of(dst)
        if group is not None:
            c[f"tx_group_ipv{dst.version}"] += 1
            return [("pw", Packet(dt=group, sa=self.addr, pt=pt, data=raw), None)]
        a = self.resolve(dst)
        if a is None:
            if dst in self.negative:
                c["tun_drop_unknown_destination"] += 1
                return []
            p = self.pending.get(dst)
            if p is None:
                if len(self.pending) >= K.IP_PENDING_DESTS:
                    c["tun_drop_resolving_full"] += 1
                    return []
                p = self.pending[dst] = _Pending()
                p.packets.append(raw)
                return self._tell(dst, p)
            if len(p.packets) == p.packets.maxlen:
                c["tun_drop_pending_full"] += 1
            p.packets.append(raw)
            return []
        return self._send(a, pt, raw)

    def _send(self, a: int, pt: int, raw: bytes) -> list[Action]:
        limit = self.route_mtu.get(a)
        if limit is not None and len(raw) > limit:
            if ippacket.dont_fragment(raw):
                return self._too_big(raw, limit)
            self.counters["tun_drop_over_mtu_fragmentable"] += 1  # the kernel fragments at pw0's MTU only
            return []
        self.counters["tx_ipv4" if pt == K.PT_IPV4 else "tx_ipv6"] += 1
        route = None
        if self.redirects:
            hop = self.redirects.get(a)
            if hop is not None and hop[1] > self.now:
                route = self.native.get(hop[0])
                self.counters["tx_redirected" if route is not None else "tx_redirect_route_unknown"] += 1
        return [("pw", Packet(dt=a, sa=self.addr, pt=pt, data=raw), route)]

    # --- level B: redirects -----------------------------------------------------------------------------
    def _redirect(self, d: int, h: int, sa: int, route: bytes) -> list[Action]:
        """RDRC(D, H) from my router: send to H for D; ask H who it is if I do not know its route."""
        c = self.counters
        if self.router is None or route != self.router:
            c["rdrc_not_from_my_router"] += 1
            return []
        if h == sa:  # "use me": my router is the best first hop again
            if self.redirects.pop(d, None) is not None:
                c["redirect_cleared"] += 1
            return []
        if is_group(d) or d == self.addr or not 1 <= h < ADDR_HEY_YOU or h == self.addr:
            c["rdrc_unusable"] += 1
            return []
        if d not in self.redirects and len(self.redirects) >= K.IP_REDIRECTS_MAX:
            c["rdrc_refused_full"] += 1
            return []
        if self.redirects.get(d, (None,))[0] != h:
            c["redirect_obeyed"] += 1
        self.redirects[d] = (h, self.now + K.IP_REDIRECT_TTL_S)
        if h in self.native or self.wru_asked.get(h, 0.0) > self.now or self.wru_quiet.get(h, 0.0) > self.now:
            return []
        if len(self.wru_asked) >= K.IP_REDIRECTS_MAX:
            c["redirect_wru_refused_full"] += 1
            return []
        self.wru_asked[h] = self.now + K.IP_RESOLVE_RETRY_S
        c["redirect_wru_sent"] += 1
        mine = self.own_route
        where = [Srqr(0, (L2RH(mine),))] if mine is not None and 1 <= len(mine) <= 63 else []
        return [("pw", M.rrp(RrpTE.WRU, h, self.addr, where), None)]  # L3 through my router: H answers natively

    def _wru_back(self, pkt: Packet, route: bytes) -> bytes:
        """Where a WRU to me is answered: the way it came, unless it came through my router
        with the asker's native route (an SRQR of one L2RH, see :meth:`_redirect`): then
        straight there, so that the asker learns mine; once per asker per retry period."""
        if self.router is None or route != self.router or pkt.dt != self.addr or not pkt.data:
            return route
        recs = self._records(pkt)
        if not recs or len(recs) != 1 or not isinstance(recs[0], Srqr) or len(recs[0].route) != 1:
            return route
        hop = recs[0].route[0]
        if not isinstance(hop, L2RH) or hop.route in (self.router, self.own_route):
            return route
        c = self.counters
        if self.wru_direct.get(pkt.sa, 0.0) > self.now:
            c["wru_direct_held"] += 1
            return route
        if pkt.sa not in self.wru_direct and len(self.wru_direct) >= K.IP_REDIRECTS_MAX:
            self.wru_direct = {a: t for a, t in self.wru_direct.items() if t > self.now}
            if len(self.wru_direct) >= K.IP_REDIRECTS_MAX:
                c["wru_direct_refused_full"] += 1
                return route
        self.wru_direct[pkt.sa] = self.now + K.IP_RESOLVE_RETRY_S
        c["wru_answered_direct"] += 1
        return hop.route

    def _native_from(self, recs: list[Record], sa: int, route: bytes) -> None:
        """An INFO straight from a node I asked (WRU): its native route on my SAN."""
        if sa not in self.wru_asked or route == self.router or not recs or recs[0] != Addr(sa):
            return
        del self.wru_asked[sa]
        if sa not in self.native and len(self.native) >= K.IP_REDIRECTS_MAX:
            self.native.pop(next(iter(self.native)))
            self.counters["native_route_evicted"] += 1
        self.native[sa] = route
        self.counters["native_route_learnt"] += 1

    # --- from the SAN --------------------------------------------------------------------------------------
    def from_pw_bytes(self, raw: bytes, dialect: str, route: bytes, now: float) -> list[Action]:
        self.now = now
        try:
            pkt = decode(raw, dialect)
        except DecodeError as exc:
            self.counters[BadPacket.of(exc)] += 1
            return []
        return self.from_pw(pkt, route)

    def from_pw(self, pkt: Packet, route: bytes) -> list[Action]:
        c = self.counters
        if route == self.router:
            self.router_heard = self.now
        if pkt.prefix:
            c["rx_drop_l2rh"] += 1  # hosts may discard packets that still carry an L2RH [E:L265]
            return []
        if pkt.dt not in (self.addr, ADDR_HEY_YOU, ADDR_BROADCAST) and pkt.dt not in self.groups:
            c["rx_drop_not_for_me"] += 1
            return []
        if pkt.options:
            c["rx_drop_options"] += 1  # no optional header type is known (spec §1.8)
            return []
        if pkt.pt in IP_TYPES:
            return self._ip_in(pkt)
        if pkt.pt == PT.RRP:
            return self._rrp_in(pkt, route)
        if pkt.pt == PT.ERR:
            return self._err_in(pkt)
        c["rx_drop_other_type"] += 1
        return []

    def _ip_in(self, pkt: Packet) -> list[Action]:
        c = self.counters
        head = ippacket.addresses(pkt.data)
        if head is None or head[0] != pkt.pt:
            c["rx_drop_bad_ip"] += 1
            return []
        if pkt.dt == self.addr and not ippacket.is_group(head[2]) and self.static_packed.get(head[1]) is not None:
            c["rx_ipv4" if pkt.pt == K.PT_IPV4 else "rx_ipv6"] += 1  # the common case: from a configured peer
            return [("tun", pkt.data)]
        src, dst = ipaddress.ip_address(head[1]), ipaddress.ip_address(head[2])
        if pkt.dt != (logical_of(dst) or self.addr):
            c["rx_drop_bad_ip"] += 1  # sent to an address its IP one does not map to
            return []
        if logical_of(src) is not None:
            c["rx_drop_group_source"] += 1
            return []
        out = self._learn(src, pkt.sa, confirmed=False)
        c["rx_ipv4" if pkt.pt == K.PT_IPV4 else "rx_ipv6"] += 1
        return out + [("tun", pkt.data)]

    def _records(self, pkt: Packet) -> list[Record] | None:
        try:
            return M.records(pkt)
        except ValueError:
            self.counters["rx_drop_bad_records"] += 1
            return None

    def _rrp_in(self, pkt: Packet, route: bytes) -> list[Action]:
        c = self.counters
        if pkt.te == RrpTE.WRU:
            if not 1 <= pkt.sa < ADDR_HEY_YOU:
                c["wru_bad_source"] += 1
                return []
            if pkt.dt == ADDR_HEY_YOU and route not in self.hrs and len(self.hrs) < K.IP_HRS_MAX:
                self.hrs[route] = pkt.sa  # a half-router's power-up: one I may ask which to use
                c["hr_heard"] += 1
            return [("pw", self._announce(pkt.sa), self._wru_back(pkt, route))]
        recs = self._records(pkt)
        if recs is None:
            return []
        if pkt.te == RrpTE.TELL and pkt.dt == self.addr and 1 <= pkt.sa < ADDR_HEY_YOU:
            # level C: a query about me (by my address or name) by L3, answered the way it came
            fits = recs in ([Addr(self.addr)], [Name(self.name)] if self.name else None)
            c["tell_answered"] += 1
            return [("pw", self._announce(pkt.sa) if fits
                     else M.err(ErrTE.UNK, pkt.sa, self.addr, [Addr(0)] + recs), route)]
        if pkt.te == RrpTE.INFO:
            self._native_from(recs, pkt.sa, route)
            return self._info(recs)
        if pkt.te == RrpTE.L2SR and recs and isinstance(recs[0], Addr) and recs[0].addr in self.mtu_queries:
            mtus = [ip_mtu(r.mtu.mtu_words) if r.mtu else None for r in recs[1:] if isinstance(r, Srqr)]
            best = mtus[0] if mtus else None
            return self._mtu_known(recs[0].addr, best if best is not None else 65535)
        if pkt.te == RrpTE.RDRC and len(recs) == 2 and isinstance(recs[0], Addr) and isinstance(recs[1], Addr):
            out = self._router_chosen(route, pkt.sa) if route in self.hrto_asked and self.router is None else []
            out += self._redirect(recs[0].addr, recs[1].addr, pkt.sa, route)
            if recs[0].addr in self.mtu_queries:
                c["mtu_query_redirected"] += 1  # the route does not start at my router's twin: not said
                out += self._mtu_known(recs[0].addr, None)
            return out
        c[f"rx_rrp_{pkt.te}_ignored"] += 1
        return []

    def _info(self, recs: list[Record]) -> list[Action]:
        out = []
        addr = None
        for r in recs:
            if isinstance(r, Addr):
                addr = r.addr
            elif isinstance(r, Name) and addr is not None:
                try:
                    ip = ipaddress.ip_address(r.name.decode("ascii"))
                except (UnicodeDecodeError, ValueError):
                    continue
                p = self.pending.pop(ip, None)
                if p is None:
                    continue
                self._learn(ip, addr, confirmed=True)
                self.counters["resolved"] += 1
                for raw in p.packets:
                    out += self._send(addr, ippacket.PT_OF_VERSION[raw[0] >> 4], raw)
        return out

    def _err_in(self, pkt: Packet) -> list[Action]:
        c = self.counters
        if pkt.te == ErrTE.UNK:
            recs = self._records(pkt)
            if recs and recs[0] == Addr(0) and len(recs) == 2 and isinstance(recs[1], Name):
                try:
                    ip = ipaddress.ip_address(recs[1].name.decode("ascii"))
                except (UnicodeDecodeError, ValueError):
                    ip = None
                if ip in self.pending:
                    c["drop_unresolved"] += len(self.pending.pop(ip).packets)
                    self.negative[ip] = self.now + K.IP_NEGATIVE_S
                    return []
            if recs and isinstance(recs[0], Addr) and recs[0].addr in self.mtu_queries:
                return self._mtu_known(recs[0].addr, None)
            c["err_unk_received"] += 1
            return []
        if pkt.te == ErrTE.GENERAL:
            return self._returned(pkt.data)
        c[f"err_{pkt.te}_received"] += 1
        return []

    def _returned(self, copy: bytes) -> list[Action]:
        """ERR/GENERAL: a router could not handle a packet of mine; if it was an IP packet,
        it was too big for the route (the only reason a router returns a well-formed one)."""
        c = self.counters
        if len(copy) < 16:
            c["err_general_short"] += 1
            return []
        w0, w1 = struct.unpack_from(">QQ", copy)
        pt, dt, sa, h = w0 & 0xFFFF, (w0 >> 32) & 0xFFFFFF, w1 & 0xFFFFFF, (w1 >> 31) & 1
        size = 8 * ((w1 >> 32) & 0x1FFFFFF) - ((w1 >> 57) & 7)
        ip_packet = bytes(copy[16:])
        if pt not in IP_TYPES or sa != self.addr or h or is_group(dt) or ippacket.parse_head(ip_packet) is None:
            c["err_general_not_ip"] += 1
            return []
        c["too_big_returned"] += 1
        limit = self.route_mtu.get(dt)
        if limit is not None and limit < size:
            return self._too_big(ip_packet, limit)
        out = self._ask_mtu(dt)
        q = self.mtu_queries.get(dt)
        if q is None:
            return self._too_big(ip_packet, plateau_below(size, pt == K.PT_IPV6))
        q.copies.append((ip_packet, size))
        if limit is not None:  # what I knew no longer holds: ask again
            del self.route_mtu[dt]
        return out
