"""What a half-router does with a packet (spec pktway.md §3.6-3.7), sans-IO.

``from_san`` and ``from_twin`` take decoded packets and return actions:
``("san", addr, packet)`` send natively on my SAN to ``addr`` (the SR of my LRT
entry for it), ``("twin", None, packet)`` hand to my twin, ``("local", None,
packet)`` for my own EEP engine.  Routing state lives in a :class:`HalfRouter`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from . import messages as M
from .constants import ADDR_HEY_YOU, PT, ErrTE, RrpTE
from .eep import L2RH, Packet, Symbol, ei_update
from .routing import HalfRouter, records_to_rt, rt_to_records


class Engine:
    def __init__(self, hr: HalfRouter, *, name: bytes | None = None, k: int = 3) -> None:
        self.hr = hr
        self.name = name
        self.k = k
        self.counters: Counter[str] = Counter()
        self.now = 0.0  # the driver keeps it current
        # an L2RH names a node of my SAN by its native route (port byte, or a GSN ULA)
        self.by_route = {n.sr[0]: n.addr for n in hr.lrt_nodes if len(n.sr) == 1}
        self.gvrt_due: float | None = None

    @property
    def me(self) -> int:
        return self.hr.addr

    def _on_my_san(self, addr: int) -> bool:
        return addr in self.hr.entry

    def _reply(self, to: int, pkt: Packet) -> list:
        if to == 0 or to & 0x800000:
            return []  # unspecified source: no answer
        if self._on_my_san(to):
            return [("san", to, pkt)]
        best = self.hr.routes(to)
        if best and best[0][3].rcvf[1:2] == (self.hr.twin,):
            return [("twin", None, pkt)]
        if best and len(best[0][3].rcvf) > 1:
            return [("san", best[0][3].rcvf[1], pkt)]
        self.counters["reply_unroutable"] += 1
        return []

    def _first_hop(self, d: int):
        """('local' | 'twin' | buddy address, MTU) of the best route to ``d``, or None."""
        if self._on_my_san(d):
            return "local", self.hr.mtu
        routes = self.hr.routes(d)
        if not routes:
            return None
        _q, _sr, mtu, rt = routes[0]
        hop = rt.rcvf[1]
        return ("twin" if hop == self.hr.twin else hop), mtu

    # --- packets from my SAN -----------------------------------------------------------------
    def from_san(self, pkt: Packet, error_detected: bool = False) -> list:
        prefix = list(pkt.prefix)
        while prefix and isinstance(prefix[0], Symbol):
            prefix.pop(0)  # a symbol is consumed by the first entity that meets it
            self.counters["symbols_consumed"] += 1
        pkt = replace(pkt, prefix=tuple(prefix), tail=ei_update(pkt.tail, error_detected))
        if prefix:  # an L2RH leads: L2-forward through my twin, which consumes it
            self.counters["l2_forwarded"] += 1
            return [("twin", None, pkt)]
        return self._l3(pkt, from_twin=False)

    def from_twin(self, pkt: Packet) -> list:
        if pkt.prefix and isinstance(pkt.prefix[0], L2RH):
            # the twin consumes the L2RH: it is the native route to a node on my SAN
            node = self.by_route.get(pkt.prefix[0])
            if node is None:
                self.counters["l2_bad_route"] += 1
                return []
            return [("san", node, replace(pkt, prefix=pkt.prefix[1:]))]
        return self._l3(pkt, from_twin=True)

    def _l3(self, pkt: Packet, from_twin: bool) -> list:
        d = pkt.dt
        if d in (self.me, ADDR_HEY_YOU):
            return self._local(pkt)
        hop = self._first_hop(d)
        if hop is None or (from_twin and hop[0] == "twin"):
            self.counters["l3_unknown_destination"] += 1
            return self._reply(pkt.sa, M.unk(pkt.sa, self.me, d)) if pkt.pt != PT.ERR else []
        where, mtu = hop
        words = 2 + len(pkt.options) + pkt.dl + len(pkt.trailer) // 8 + 1
        if mtu and words > mtu:
            self.counters["l3_over_mtu"] += 1
            return self._reply(pkt.sa, M.err(ErrTE.GENERAL, pkt.sa, self.me, raw=pkt.encode()[: 8 * 64]))
        self.counters["l3_forwarded"] += 1
        if where == "local":
            out = [("san", d, pkt)]
            if not from_twin and self._on_my_san(pkt.sa):
                out.append(("san", pkt.sa, M.rdrc(pkt.sa, self.me, d, d)))  # "D is on your SAN"
            return out
        if where == "twin":
            return [("twin", None, pkt)]
        out = [("san", where, pkt)]
        if not from_twin and self._on_my_san(pkt.sa):
            out.append(("san", pkt.sa, M.rdrc(pkt.sa, self.me, d, where)))  # forward and redirect
        return out

    # --- my own RRP engine ------------------------------------------------------------------
    def _local(self, pkt: Packet) -> list:
        if pkt.pt == PT.ERR:
            self.counters[f"err_{pkt.te}_received"] += 1
            if pkt.te in (ErrTE.HRDOWN, ErrTE.LINKDOWN):
                return self._withdraw(pkt)
            return []
        if pkt.pt != PT.RRP:
            self.counters["local_data"] += 1
            return [("local", None, pkt)]
        try:
            te = RrpTE(pkt.te)
            recs = M.records(pkt)
        except ValueError:
            self.counters["rrp_bad"] += 1
            return self._reply(pkt.sa, M.err(ErrTE.GENERAL, pkt.sa, self.me, raw=pkt.encode()[: 8 * 64]))
        self.counters[f"rrp_{te.name}"] += 1
        sa = pkt.sa
        if te is RrpTE.WRU:
            caps = [(2, b"".join(s.to_bytes(3, "big") for s in (self.hr.san_id,)))]
            return self._reply(sa, M.info(sa, self.me, self.me, self.name, caps))
        if te is RrpTE.TELL:
            return self._tell(sa, recs, pkt)
        if te is RrpTE.GVRT:
            return self._rt_messages(self.gvrt_answer(sa))
        if te is RrpTE.RTBL:
            try:
                rt = records_to_rt(recs[0])
            except (ValueError, IndexError, AttributeError):
                self.counters["rtbl_malformed"] += 1
                return []
            return self._rt_messages(self.hr.receive(sa, rt))
        if te in (RrpTE.GVL2, RrpTE.HRTO):
            if not recs or not hasattr(recs[0], "addr"):
                return self._reply(sa, M.err(ErrTE.GENERAL, sa, self.me, raw=pkt.encode()[: 8 * 64]))
            if not self._on_my_san(sa):
                return self._reply(sa, M.err(ErrTE.GENERAL, sa, self.me, raw=pkt.encode()[: 8 * 64]))
            return self._plan(te, sa, recs[0].addr)
        return []

    def _plan(self, te: RrpTE, sa: int, d: int) -> list:
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
    def _rt_messages(self, pairs) -> list:
        out = []
        for dest, rt in pairs:
            msg = M.rrp(RrpTE.RTBL, dest, self.me, [rt_to_records(rt)])
            out.append(("twin", None, msg) if dest == self.hr.twin else ("san", dest, msg))
        return out

    def gvrt_answer(self, asker: int) -> list:
        """One RTBL per kept RT the exchange rule would send to ``asker`` (§3.2)."""
        hr = self.hr
        if asker == hr.twin:
            keep = [rt for rcvf, rt in hr.rts.items() if len(rcvf) == 1 or hr.learned_from.get(rcvf) != hr.twin]
        elif asker in hr.buddies:
            keep = [rt for rcvf, rt in hr.rts.items() if hr.learned_from.get(rcvf) == hr.twin]
        else:
            return []
        return [(asker, rt) for rt in keep]

    def start(self) -> list:
        """At power-up: the LRT to the twin."""
        return self._rt_messages(self.hr.start())

    # --- HRDOWN / LINKDOWN (§3.4) --------------------------------------------------------------------
    def _withdraw(self, pkt: Packet) -> list:
        try:
            addrs = tuple(r.addr for r in M.records(pkt))
        except (ValueError, AttributeError):
            self.counters["err_malformed"] += 1
            return []
        code = "HRDOWN" if pkt.te == ErrTE.HRDOWN else "LINKDOWN"
        if len(addrs) != (1 if code == "HRDOWN" else 2):
            self.counters["err_malformed"] += 1
            return []
        relay = self.hr.withdraw(code, addrs, pkt.sa, self.now)
        if relay:
            self.gvrt_due = self.now + 1.0  # relearn what is left
        return self._err_to(code, addrs, relay)

    def _err_to(self, code: str, addrs: tuple[int, ...], targets) -> list:
        te = ErrTE.HRDOWN if code == "HRDOWN" else ErrTE.LINKDOWN
        out = []
        for t in targets:
            msg = M.err(te, t, self.me, [M.Addr(a) for a in addrs])
            out.append(("twin", None, msg) if t == self.hr.twin else ("san", t, msg))
        return out

    def twin_lost(self) -> list:
        """The twin stopped answering (no WRU answer): LINKDOWN(me, twin) to my buddies."""
        self.gvrt_due = self.now + 1.0
        return self._err_to("LINKDOWN", (self.me, self.hr.twin), self.hr.twin_lost())

    def buddy_lost(self, buddy: int) -> list:
        """A buddy vanished from my SAN: HRDOWN(buddy) to my twin and remaining buddies."""
        self.gvrt_due = self.now + 1.0
        return self._err_to("HRDOWN", (buddy,), self.hr.buddy_lost(buddy))

    def timer(self) -> float | None:
        return self.gvrt_due

    def handle_timer(self, now: float) -> list:
        self.now = now
        if self.gvrt_due is None or now < self.gvrt_due:
            return []
        self.gvrt_due = None
        out = [("twin", None, M.rrp(RrpTE.GVRT, self.hr.twin, self.me))]
        return out + [("san", b, M.rrp(RrpTE.GVRT, b, self.me)) for b in sorted(self.hr.buddies)]

    # --- TELL / INFO (§2.2, levels C and D) ---------------------------------------------------------------
    def _known_nodes(self) -> dict:
        """Every node structure this HR holds (LRT and XRTs), first seen wins."""
        out = {}
        for rt in self.hr.rts.values():
            for n in rt.nodes:
                out.setdefault(n.addr, n)
        return out

    def _tell(self, sa: int, recs: list, pkt: Packet) -> list:
        from .rrp import Addr, Capa, Name

        nodes = self._known_nodes()
        if len(recs) == 1 and isinstance(recs[0], Addr):
            found = [nodes[recs[0].addr]] if recs[0].addr in nodes else []
        elif len(recs) == 1 and isinstance(recs[0], Name):
            found = [n for n in nodes.values() if n.name == recs[0].name]
        elif recs and all(isinstance(r, Capa) for r in recs):
            wanted = [(r.cc, r.params) for r in recs]
            found = [n for n in nodes.values() if any(_capable(n, cc, params) for cc, params in wanted)]
        else:
            self.counters["tell_malformed"] += 1
            return self._reply(sa, M.err(ErrTE.GENERAL, sa, self.me, raw=pkt.encode()[: 8 * 64]))
        if not found:
            return self._reply(sa, M.err(ErrTE.UNK, sa, self.me, [Addr(0)] + recs))
        body = []
        for n in sorted(found, key=lambda n: n.addr):
            body.append(Addr(n.addr))
            if n.name:
                body.append(Name(n.name))
            body.extend(Capa(cc, params) for cc, params in n.caps)
        return self._reply(sa, M.rrp(RrpTE.INFO, sa, self.me, body))


def _capable(node, cc: int, params: bytes) -> bool:
    """A node matches a CAPA query when it has that capability and every asked parameter
    (e.g. CC 7, a floating-point DSP handling 64-bit IEEE words: params {8})."""
    return any(c == cc and set(params) <= set(p) for c, p in node.caps)
