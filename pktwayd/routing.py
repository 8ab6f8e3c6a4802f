"""Level-D routing tables of one half-router (spec pktway.md §3.2-3.3), sans-IO.

An HR starts from its LRT (every node on its SAN with the source route from the
HR and its Q) and floods routing tables (RTs): its LRT to its twin, twin-learned
RTs to its buddies, buddy-learned RTs to its twin, with the RCVF loop guard, the
per-RCVF SN rule, MinMTU, optional k-best and the SAN-loop rule.  Messages are
returned as ``(destination HR, RT)`` pairs; carrying them is the driver's job.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from .constants import LOGICAL_BASE, LOGICAL_MASK
from .eep import L2RH, Route

if TYPE_CHECKING:
    from .rrp import Rthd

Q_MAX = 0xFFFF


def qadd(a: int, b: int) -> int:
    return min(Q_MAX, a + b)


@dataclass(frozen=True)
class NodeEntry:
    addr: int
    sr: Route = ()  # from the RT's mapper to the node
    q: int = 0
    router: bool = False  # CAPA CC=2: an HR, a buddy of the LRT's owner
    name: bytes | None = None
    caps: tuple[tuple[int, bytes], ...] = ()  # (CC, params) other than the router capability
    groups: tuple[int, ...] = ()  # logical (group) addresses the node listens to (LADR)


@dataclass(frozen=True)
class RT:
    san_id: int
    sn: int
    rcvf: tuple[int, ...]  # newest first; the mapper last
    csr: Route = ()  # from the holder to the mapper
    q: int = 0  # CSR quality
    min_mtu: int = 0  # 8-byte words, 0 = unlimited
    nodes: tuple[NodeEntry, ...] = ()


def mtu_min(a: int, b: int) -> int:
    return b if a == 0 else a if b == 0 else min(a, b)


@dataclass
class HalfRouter:
    addr: int
    san_id: int
    mtu: int
    twin: int
    lrt_nodes: tuple[NodeEntry, ...]
    sn: int = 1
    q_twin: int = 1
    san_loop_rule: bool = True
    k: int | None = None
    rts: dict[tuple[int, ...], RT] = field(default_factory=dict)  # kept RCVF -> RT
    by_san: dict[int, dict[tuple[int, ...], RT]] = field(default_factory=dict)  # SAN-ID -> {kept RCVF: RT} (XRTs)
    sn_seen: dict[tuple[int, ...], int] = field(default_factory=dict)  # received RCVF -> SN
    learned_from: dict[tuple[int, ...], int] = field(default_factory=dict)  # kept RCVF -> sender
    sent_to: dict[tuple[int, ...], set[int]] = field(default_factory=dict)  # kept RCVF -> HRs it was passed on to
    relayed: dict[tuple[str, tuple[int, ...]], float] = field(default_factory=dict)  # (code, addresses) -> last relayed
    # every HR known on my SAN, live or silent: an RT through any of them already crossed it
    san_routers: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        self._install_lrt(self.lrt_nodes)

    def _install_lrt(self, nodes: Iterable[NodeEntry]) -> None:
        self.lrt_nodes = tuple(nodes)
        self.entry = {n.addr: n for n in self.lrt_nodes}
        self.buddies = frozenset(n.addr for n in self.lrt_nodes if n.router and n.addr != self.addr)
        lrt = RT(self.san_id, self.sn, (self.addr,), (), 0, self.mtu, self.lrt_nodes)
        self.rts[lrt.rcvf] = lrt

    def set_lrt(self, nodes: Iterable[NodeEntry]) -> None:
        """My SAN changed (a node registered or vanished): a new LRT with the next SN.  A buddy
        that (re)appears may make kept RTs break the SAN-loop rule: those are dropped."""
        self.sn += 1
        self._install_lrt(nodes)
        if self.san_loop_rule:
            mine = self.buddies | self.san_routers
            self._delete([r for r, s in self.learned_from.items() if any(b in r[1:] and b != s for b in mine)])

    @property
    def lrt(self) -> RT:
        return self.rts[(self.addr,)]

    def start(self) -> list[tuple[int, RT]]:
        """The LRT goes to the twin (it counts as 'not from the twin')."""
        return [(self.twin, self.lrt)]

    def receive(self, sender: int, rt: RT) -> list[tuple[int, RT]]:
        if sender != self.twin and sender not in self.buddies:
            return []  # neither twin nor buddy
        if self.addr in rt.rcvf:
            return []  # loop guard
        if rt.sn <= self.sn_seen.get(rt.rcvf, -1):
            return []  # same path, nothing newer
        if self.san_loop_rule and any(b in rt.rcvf and not (b == sender) for b in self.buddies | self.san_routers):
            return []  # the RT already crossed my SAN
        self.sn_seen[rt.rcvf] = rt.sn
        hop: Route
        if sender == self.twin:
            hop, hop_q = (), self.q_twin  # a twin crossing uses no L2RH
        else:
            e = self.entry[sender]
            hop, hop_q = e.sr, e.q
        kept = replace(rt, csr=hop + rt.csr, q=qadd(rt.q, hop_q), rcvf=(self.addr,) + rt.rcvf,
                       min_mtu=mtu_min(self.mtu, rt.min_mtu))
        if not self._keep(kept):
            return []
        self.rts[kept.rcvf] = kept
        self.by_san.setdefault(kept.san_id, {})[kept.rcvf] = kept
        self.learned_from[kept.rcvf] = sender
        targets = sorted(self.buddies) if sender == self.twin else [self.twin]
        self.sent_to[kept.rcvf] = set(targets)
        return [(t, kept) for t in targets]

    def _rank(self, rt: RT) -> tuple[int, int, int]:
        return rt.q, len(rt.rcvf), rt.rcvf[1] if len(rt.rcvf) > 1 else 0

    def _keep(self, new: RT) -> bool:
        """k-best per SAN: keep ``new`` if it ranks among the k best for its SAN."""
        if self.k is None:
            return True
        same = self.by_san.get(new.san_id, {})
        if len(same) < self.k:
            return True
        worst = max(same.values(), key=self._rank)
        if self._rank(new) < self._rank(worst):
            del self.rts[worst.rcvf], same[worst.rcvf]
            self.learned_from.pop(worst.rcvf, None)
            return True
        return False

    # --- HRDOWN / LINKDOWN (§3.4) ------------------------------------------------------------------
    def _delete(self, rcvfs: Iterable[tuple[int, ...]]) -> set[int]:
        """Delete kept RTs; the HRs they came from and went to (where to relay)."""
        neighbours: set[int] = set()
        for rcvf in rcvfs:
            rt = self.rts.pop(rcvf)
            self.by_san.get(rt.san_id, {}).pop(rcvf, None)
            self.sn_seen.pop(rcvf[1:], None)  # forget the SN so the path can be relearnt
            if rcvf in self.learned_from:
                neighbours.add(self.learned_from.pop(rcvf))
            neighbours |= self.sent_to.pop(rcvf, set())
        return neighbours

    def withdraw(self, code: str, addrs: tuple[int, ...], sender: int | None, now: float,
                 hold: float = 10.0) -> list[int]:
        """Apply ERR/HRDOWN(x) (``addrs`` = (x,)) or ERR/LINKDOWN(a, b); returns the HRs to
        relay the ERR to: only if something was deleted, never the sender nor the dead HR,
        at most once per (code, addresses) per ``hold`` seconds."""
        if code == "HRDOWN":
            (x,) = addrs
            doomed = [r for r in self.rts if len(r) > 1 and x in r]
        else:
            a, b = addrs
            doomed = [r for r in self.rts if any({r[i], r[i + 1]} == {a, b} for i in range(len(r) - 1))]
        if not doomed:
            return []
        relay = self._delete(doomed) - {sender, self.addr, *addrs}
        key = (code, tuple(sorted(addrs)))
        if now < self.relayed.get(key, -hold) + hold:
            return []
        self.relayed[key] = now
        return sorted(relay)

    def twin_lost(self) -> list[int]:
        """Our twin stopped answering: forget what it taught us; LINKDOWN goes to the buddies."""
        self._delete([r for r, s in list(self.learned_from.items()) if s == self.twin])
        return sorted(self.buddies)

    def buddy_lost(self, buddy: int) -> list[int]:
        """A buddy vanished from our SAN: HRDOWN(buddy) goes to our twin and remaining buddies."""
        self.buddies = self.buddies - {buddy}
        self._delete([r for r in self.rts if len(r) > 1 and buddy in r])
        return sorted(self.buddies | {self.twin})

    def routes(self, addr: int) -> list[tuple[int, Route, int, RT]]:
        """Every (Q, SR, MTU, RT) reaching ``addr``, best first (§3.3)."""
        out: list[tuple[int, Route, int, RT]] = []
        for rt in self.rts.values():
            for n in rt.nodes:
                if n.addr == addr:
                    out.append((qadd(rt.q, n.q), rt.csr + n.sr, rt.min_mtu, rt))
        out.sort(key=lambda r: (r[0],) + self._rank(r[3])[1:])
        return out


def lrt_route(port: int) -> tuple[L2RH, ...]:
    """The SR to a node on an emulated SAN: output port, then the Myrinet type 0x0300 (§3.8)."""
    return (L2RH(bytes((port, 0x03, 0x00))),)


def native_route(n: NodeEntry) -> bytes | None:
    """The native route of an entry of my SAN (its one L2RH's route bytes), or None."""
    return n.sr[0].route if len(n.sr) == 1 and isinstance(n.sr[0], L2RH) else None


def logical_only(addrs: Iterable[int]) -> tuple[int, ...]:
    """The logical (group) addresses among ``addrs``, sorted, each once."""
    return tuple(sorted({a for a in addrs if a & LOGICAL_MASK == LOGICAL_BASE}))


# --- routing tables as RRP records (RTBL body, spec §2.2) ------------------------------------
def rt_to_records(rt: RT) -> Rthd:
    """RTHD, SRQR(CSR, Q) + MTUR(MinMTU), RCVF, then per node ADDR [CAPA 2] SRQR(SR, Q)."""
    from .rrp import Addr, Capa, Ladr, Mtur, Name, Rcvf, Record, Rthd, Srqr

    recs: list[Record] = [Srqr(rt.q, rt.csr, Mtur(rt.min_mtu)), Rcvf(rt.rcvf)]
    for n in rt.nodes:
        recs.append(Addr(n.addr))
        if n.name:
            recs.append(Name(n.name))
        if n.router:
            recs.append(Capa(2, rt.san_id.to_bytes(3, "big")))
        recs.extend(Capa(cc, params) for cc, params in n.caps)
        if n.groups:
            recs.append(Ladr(n.groups))
        recs.append(Srqr(n.q, n.sr))
    return Rthd(rt.san_id, rt.sn, tuple(recs))


def records_to_rt(rthd: Rthd) -> RT:
    """The inverse; raises ValueError on a body that is not a routing table."""
    from .rrp import Addr, Capa, Ladr, Name, Rcvf, Srqr

    recs = list(rthd.records)
    if len(recs) < 2 or not isinstance(recs[0], Srqr) or not isinstance(recs[1], Rcvf) or not recs[1].addrs:
        raise ValueError("an RT starts with SRQR(CSR) and RCVF")
    csr, rcvf = recs[0], recs[1]
    nodes: list[NodeEntry] = []
    i = 2
    while i < len(recs):
        head = recs[i]
        if not isinstance(head, Addr):
            raise ValueError(f"node entry {len(nodes)} does not start with ADDR")
        addr, router, i = head.addr, False, i + 1
        name: bytes | None = None
        caps: list[tuple[int, bytes]] = []
        groups: tuple[int, ...] = ()
        while i < len(recs) and not isinstance(recs[i], (Srqr, Addr)):
            r = recs[i]
            if isinstance(r, Capa) and r.cc == 2:
                router = True
            elif isinstance(r, Capa):
                caps.append((r.cc, r.params))
            elif isinstance(r, Name):
                name = r.name
            elif isinstance(r, Ladr):
                groups = logical_only(r.addrs)
            i += 1
        sr = recs[i] if i < len(recs) else None
        if not isinstance(sr, Srqr):
            raise ValueError(f"node {addr:#x} has no SRQR")
        nodes.append(NodeEntry(addr, tuple(sr.route), sr.q, router, name, tuple(caps), groups))
        i += 1
    return RT(rthd.san_id, rthd.sn, tuple(rcvf.addrs), tuple(csr.route), csr.q,
              csr.mtu.mtu_words if csr.mtu else 0, tuple(nodes))
