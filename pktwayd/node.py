"""A PacketWay node on a GSN fabric, EEP packets through gsnd's ULP socket.

Level A: sends along given L2 routes (L2RHs).  Level B: L3 through a default
half-router, obeying its redirects (RDRC) once it knows the redirected-to node's
ULA.  Level C: plans routes (GVL2 -> L2SR / RDRC), finds nodes (TELL -> INFO),
answers "who are you" (WRU), announces itself at power-up (INFO to Hey-You) and
discovers its SAN's nodes (WRU to Hey-You on every port).

    node = Node("/run/gsnd/gsn0.ulp", addr=0x40, router_ula=...)
    node.announce()                           # routers register me
    node.send(0x60, b"hello")                 # L3 via the router (or where it redirects me)
    routes = node.route(0x60)                 # [(Q, [L2RH...], MTU)] or a redirect
    node.send(0x60, b"hi", route=routes[0][1])  # L2, along a planned route
"""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import replace
from typing import Protocol

from daemons.constants import ULA_BROADCAST, ULA_HARP_SERVER
from daemons.runtime.control import request
from daemons.ulpclient import UlpClient
from daemons.wire.ula import parse_ula
from daemons.wire.errors import DecodeError
from daemons.wire.ulp import Frame, Op

from . import messages as M
from .constants import ADDR_BROADCAST, ADDR_HEY_YOU, ERR_GENERAL_COPY_MAX, KNOWN_OH_TYPES, PT, REDIRECT_TTL_S, ErrTE, RrpTE
from .eep import L2RH, Packet, decode
from .drops import BadPacket
from .rrp import Addr, Capa, Name, Srqr, encode_records
from .special import Memory, parse_write, read_body, unwrap, write_body


class PktwayError(Exception):
    pass


def _records(pkt: Packet) -> list | None:
    """The RRP records of a packet, or None if its body is not records."""
    try:
        return M.records(pkt)
    except ValueError:
        return None


class Port(Protocol):
    """What a node talks through: gsnd's ULP socket (UlpClient) or a port on another SAN
    (pktwayd.udpsan.UdpSanPort, servernet.pwport.BlockingSnetPort, ib.udport.BlockingIbPort)."""

    def bind(self, ethertype: int, /) -> Frame: ...

    def send(self, route: bytes, payload: bytes, /, *, vc: int = ..., ethertype: int) -> None: ...

    def recv(self, timeout: float | None = ..., /) -> Frame: ...

    def close(self) -> None: ...


class Node:
    def __init__(self, ulp_path: str | Port, addr: int, router_ula: bytes, *, ethertype: int | None = None,
                 dialect: str = "pw0", name: bytes | None = None, caps=(), groups=(), memory: int = 0) -> None:
        from .constants import ETHERTYPE_PKTWAY

        self.et = ethertype or ETHERTYPE_PKTWAY
        self.addr = addr
        self.router_ula = router_ula
        self.dialect = dialect
        self.name = name
        self.caps = tuple(caps)  # (CC, params) for INFO answers, e.g. (7, bytes([4, 8]))
        self.groups = tuple(groups)  # logical addresses I listen to (announced in INFO as LADR)
        self.memory = Memory(memory, addr) if memory else None  # served to memory READ/WRITE packets
        self._reads: set[tuple[int, int]] = set()  # (node, address) of my READs not yet answered
        self.ulp_path = ulp_path if isinstance(ulp_path, str) else None
        # gsnd's ULP socket, or a port on an emulated SAN (pktwayd.udpsan.UdpSanPort)
        self.ulp: Port = UlpClient(ulp_path) if isinstance(ulp_path, str) else ulp_path
        self.ula = bytes(self.ulp.bind(self.et).ula)
        self.redirects: dict[int, tuple[int, float]] = {}  # destination -> (node or HR of my SAN, until)
        self.neighbours: dict[int, bytes] = {}  # address -> ULA, of nodes that answered discover()
        self._asked: set[bytes] = set()
        self._pending: deque[Packet] = deque()
        self.counters: Counter[str] = Counter()  # what was dropped, and why

    def announce(self, to_ula: bytes | None = None) -> None:
        """Power-up registration: INFO about myself to Hey-You (the router registers me)."""
        self.send_packet(M.info(ADDR_HEY_YOU, self.addr, self.addr, self.name, self.caps, self.groups), to_ula)

    def close(self) -> None:
        self.ulp.close()

    def __enter__(self) -> Node:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send_packet(self, pkt: Packet, to_ula: bytes | None = None) -> None:
        self.ulp.send(to_ula or self.router_ula, pkt.encode(self.dialect), vc=1, ethertype=self.et)

    def send(self, dest: int, data: bytes, *, route=(), pt: int = PT.USER, te: int = 0) -> None:
        """L2 along ``route`` (L2RHs), or L3: to the node or half-router a redirect (RDRC)
        named for ``dest`` when I know its ULA (see :meth:`discover`), else my default router."""
        self.poll()
        to = None
        via, until = self.redirects.get(dest, (None, 0.0))
        if not route and via is not None and time.monotonic() < until:
            to = self.neighbours.get(via)
        self.send_packet(Packet(dt=dest, sa=self.addr, pt=pt, te=te, data=data, prefix=tuple(route)), to)

    def _take(self, timeout: float) -> Packet | None:
        """One frame from gsnd: WRUs are answered, redirects and neighbours recorded;
        returns a packet for me, or None (nothing, or nothing for me)."""
        try:
            frame = self.ulp.recv(timeout)
        except (TimeoutError, BlockingIOError):
            raise TimeoutError("no packet") from None
        c = self.counters
        if frame.op is not Op.RECV or frame.ethertype != self.et:
            c["rx_not_pktway"] += 1
            return None
        try:
            pkt = decode(frame.payload, self.dialect)
        except DecodeError as exc:
            c[BadPacket.of(exc)] += 1
            return None
        if pkt.prefix or pkt.dt not in (self.addr, ADDR_HEY_YOU, ADDR_BROADCAST, *self.groups):
            c["rx_not_for_me"] += 1
            return None
        if any(o.mandatory and o.otype not in KNOWN_OH_TYPES for o in pkt.options):
            # spec §1.8: not processed; ERR/GENERAL to its source (never about an ERR)
            c["drop_oh_unknown_mandatory"] += 1
            if pkt.pt != PT.ERR and pkt.sa and not pkt.sa & 0x800000:
                err = M.err(ErrTE.GENERAL, pkt.sa, self.addr, raw=pkt.encode()[:ERR_GENERAL_COPY_MAX])
                self.send_packet(err, bytes(frame.ula))
            return None
        if pkt.options:  # unknown optional fields: dropped
            c["oh_unknown_optional_ignored"] += len(pkt.options)
            pkt = replace(pkt, options=())
        if pkt.dt == self.addr and pkt.pt in (PT.MEMORY_READ, PT.MEMORY_WRITE, PT.EMBEDDED):
            return self._special(pkt, bytes(frame.ula))
        if pkt.pt == PT.RRP and pkt.te == RrpTE.WRU:  # "who are you": say, to whoever asked
            if not pkt.sa or pkt.sa & 0x800000 or pkt.sa == ADDR_HEY_YOU:  # no node to answer (prefix-coded)
                c["wru_bad_source"] += 1
                return None
            self.send_packet(M.info(pkt.sa, self.addr, self.addr, self.name, self.caps, self.groups), bytes(frame.ula))
            return None
        if pkt.pt == PT.RRP and pkt.te == RrpTE.TELL and pkt.dt == self.addr:  # a query about me (level C)
            self._tell_about_me(pkt, bytes(frame.ula))
            return None
        if pkt.pt == PT.RRP and pkt.te in (RrpTE.RDRC, RrpTE.INFO):
            recs = _records(pkt)
            if recs is None:
                c["rrp_malformed"] += 1
                return None
            if pkt.te == RrpTE.RDRC and len(recs) == 2 and all(isinstance(r, Addr) for r in recs):
                if bytes(frame.ula) != self.router_ula:
                    c["rdrc_not_from_my_router"] += 1  # only my router may send me elsewhere
                else:  # level B: obey redirects (for a while: the redirected-to router may die)
                    self.redirects[recs[0].addr] = (recs[1].addr, time.monotonic() + REDIRECT_TTL_S)
            elif pkt.te == RrpTE.INFO and bytes(frame.ula) in self._asked and recs and recs[0] == Addr(pkt.sa):
                self.neighbours[pkt.sa] = bytes(frame.ula)  # it answered my WRU itself
        if pkt.dt == self.addr or pkt.dt == ADDR_BROADCAST or pkt.dt in self.groups:
            return pkt
        c["rx_hey_you_consumed"] += 1  # to whoever receives it: nothing to hand to the application
        return None

    def _special(self, pkt: Packet, ula: bytes) -> Packet | None:
        """Memory READ/WRITE and EMBEDDED packets for me; returns what the application gets
        (the WRITE answering one of my READs, or an embedded packet that is for me)."""
        c = self.counters
        if pkt.pt == PT.EMBEDDED:
            try:
                inner = unwrap(pkt)
            except DecodeError as exc:
                c[f"embedded_bad_{exc.field}"] += 1
                return None
            c["embedded_unwrapped"] += 1
            if inner.prefix and isinstance(inner.prefix[0], L2RH):  # L2 routing starts here
                self.ulp.send(inner.prefix[0].route, replace(inner, prefix=inner.prefix[1:]).encode(self.dialect),
                              vc=1, ethertype=self.et)
                return None
            if inner.prefix or inner.dt != self.addr:
                self.send_packet(replace(inner, prefix=()))  # L3 on, through my router
                return None
            return inner
        if pkt.pt == PT.MEMORY_WRITE:
            try:
                key = (pkt.sa, parse_write(pkt.data)[0])
            except DecodeError:
                key = None
            if key in self._reads:
                self._reads.discard(key)
                return pkt
        if self.memory is None:
            c["memory_none"] += 1
            return None
        answer = self.memory.handle(pkt)
        if answer is not None:
            self.send_packet(answer, ula)
        return None

    def write_memory(self, dest: int, addr: int, data: bytes) -> None:
        self.send(dest, write_body(addr, data), pt=PT.MEMORY_WRITE)

    def read_memory(self, dest: int, addr: int, count: int, timeout: float = 5.0) -> bytes:
        """READ ``count`` bytes at ``addr`` of node ``dest``: the data of its WRITE answer."""
        self._reads.add((dest, addr))
        self.send(dest, read_body(addr, count), pt=PT.MEMORY_READ)
        pkt = self.recv_match(lambda p: p.pt == PT.MEMORY_WRITE and p.sa == dest
                              and parse_write(p.data)[0] == addr, timeout)
        return parse_write(pkt.data)[1]

    def send_embedded(self, via: int, inner: Packet) -> None:
        """L3 to node ``via``, which sends ``inner`` on from there (along its L2RHs)."""
        self.send(via, inner.encode(), pt=PT.EMBEDDED)

    def _tell_about_me(self, pkt: Packet, ula: bytes) -> None:
        """TELL addressed to me: INFO about myself if the query (my address, my name, or
        any of my capabilities) fits me, else ERR/UNK; back the way it came."""
        c = self.counters
        recs = _records(pkt)
        if recs is None or not 1 <= pkt.sa < ADDR_HEY_YOU:
            c["tell_malformed"] += 1
            return None
        if len(recs) == 1 and isinstance(recs[0], Addr):
            fits = recs[0].addr == self.addr
        elif len(recs) == 1 and isinstance(recs[0], Name):
            fits = self.name is not None and recs[0].name == self.name
        elif recs and all(isinstance(r, Capa) for r in recs):
            fits = any(cc == r.cc and set(r.params) <= set(params) for r in recs for cc, params in self.caps)
        else:
            c["tell_malformed"] += 1
            return None
        c["tell_answered"] += 1
        answer = (M.info(pkt.sa, self.addr, self.addr, self.name, self.caps, self.groups) if fits
                  else M.err(ErrTE.UNK, pkt.sa, self.addr, [Addr(0)] + recs))
        self.send_packet(answer, ula)
        return None

    def poll(self) -> None:
        """Handle what is waiting without blocking (packets for me are kept for recv)."""
        while True:
            try:
                pkt = self._take(0)
            except TimeoutError:
                return
            if pkt is not None:
                self._pending.append(pkt)

    def recv(self, timeout: float = 5.0) -> Packet:
        """The next packet addressed to this node."""
        if self._pending:
            return self._pending.popleft()
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no packet")
            pkt = self._take(left)
            if pkt is not None:
                return pkt

    def discover(self, ulas=None, timeout: float = 0.5) -> dict[int, bytes]:
        """Ask every port of my SAN who it is (WRU to Hey-You); returns and keeps the
        {address: ULA} of those that answer.  Without ``ulas``, the switch's ULA list
        comes from gsnd's control socket."""
        if ulas is None:
            if self.ulp_path is None:
                raise PktwayError("no switch map on an emulated SAN: give the routes to ask")
            reply = request(self.ulp_path.removesuffix(".ulp") + ".ctl", {"cmd": "ulas"})
            if not reply.get("ok"):
                raise PktwayError(f"no ULA list from gsnd: {reply.get('error')}")
            ulas = [parse_ula(u["ula"]) for u in reply["ulas"]]
        self._asked = {bytes(u) for u in ulas} - {self.ula, ULA_BROADCAST, ULA_HARP_SERVER}
        for u in sorted(self._asked):
            self.send_packet(M.rrp(RrpTE.WRU, ADDR_HEY_YOU, self.addr, [Addr(ADDR_HEY_YOU)]), u)
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                pkt = self._take(left)
            except TimeoutError:
                break
            if pkt is not None and not (pkt.pt == PT.RRP and pkt.te == RrpTE.INFO):
                self._pending.append(pkt)
        return {a: u for a, u in self.neighbours.items() if u in self._asked}

    def ask(self, te: RrpTE, records, timeout: float = 5.0, match=lambda pkt: True) -> Packet:
        """Send an RRP request to the router (its ULA); the RRP/ERR answer."""
        self.send_packet(M.rrp(te, ADDR_HEY_YOU, self.addr, records))  # Hey-You: whoever gets it owns it
        return self.recv_match(lambda p: p.pt in (PT.RRP, PT.ERR) and match(p), timeout)

    def recv_match(self, match, timeout: float = 5.0) -> Packet:
        """The next packet for me that ``match`` accepts (others are counted and dropped)."""
        deadline = time.monotonic() + timeout
        while True:
            pkt = self.recv(max(0.0, deadline - time.monotonic()))
            if match(pkt):
                return pkt
            self.counters["rx_not_the_answer"] += 1

    def route(self, dest: int):
        """L2 routes to ``dest``: [(Q, L2RHs, MTU)], or ("redirect", address), or raises."""
        reply = self.ask(RrpTE.GVL2, [Addr(dest)], match=lambda p: (_records(p) or [])[:1] == [Addr(dest)])
        if reply.pt == PT.ERR:
            raise PktwayError(f"{dest:#x}: {ErrTE(reply.te).name if reply.te in ErrTE._value2member_map_ else reply.te}")
        recs = _records(reply)
        if recs is None:
            raise PktwayError(f"{dest:#x}: malformed answer from the router")
        if reply.te == RrpTE.RDRC:
            if len(recs) != 2 or not isinstance(recs[1], Addr):
                raise PktwayError(f"{dest:#x}: malformed RDRC from the router")
            return ("redirect", recs[1].addr)
        return [(r.q, list(r.route), r.mtu.mtu_words if r.mtu else 0) for r in recs[1:] if isinstance(r, Srqr)]

    def which_router(self, dest: int) -> int:
        """HRTO, "which half-router should I use for ``dest``": the address the router names
        (itself, a buddy on my SAN, or ``dest`` itself when it is on my SAN); raises if unknown."""
        reply = self.ask(RrpTE.HRTO, [Addr(dest)], match=lambda p: (_records(p) or [])[:1] == [Addr(dest)])
        recs = _records(reply)
        if reply.pt == PT.ERR:
            raise PktwayError(f"{dest:#x}: unknown to the router")
        if reply.te != RrpTE.RDRC or recs is None or len(recs) != 2 or not isinstance(recs[1], Addr):
            raise PktwayError(f"{dest:#x}: malformed answer from the router")
        return recs[1].addr

    def find(self, *, name: bytes | None = None, capability: tuple[int, bytes] | None = None,
             address: int | None = None, ask_node: bool = False) -> list[dict]:
        """TELL by name, capability or address: [{"addr", "name", "caps"}] of the nodes the
        router knows; ``ask_node``: the TELL goes by L3 to the node ``address`` itself, which
        answers about itself (it may know more than the routers)."""
        query: list[Name | Addr | Capa]
        if name is not None:
            query = [Name(name)]
        elif address is not None:
            query = [Addr(address)]
        elif capability is not None:
            query = [Capa(*capability)]
        else:
            raise ValueError("find: give a name, a capability or an address")
        if ask_node:
            if address is None:
                raise ValueError("find: ask_node asks the node at address: give it")
            self.send(address, encode_records(query), pt=PT.RRP, te=RrpTE.TELL)
            reply = self.recv_match(lambda p: p.pt in (PT.RRP, PT.ERR) and p.sa == address)
        else:
            reply = self.ask(RrpTE.TELL, query)
        if reply.pt == PT.ERR:
            return []
        recs = _records(reply)
        if recs is None:
            raise PktwayError("malformed answer from the router")
        out: list[dict] = []
        for r in recs:
            if isinstance(r, Addr):
                out.append({"addr": r.addr, "name": None, "caps": []})
            elif out and isinstance(r, Name):
                out[-1]["name"] = r.name.decode(errors="replace")
            elif out and isinstance(r, Capa):
                out[-1]["caps"].append((r.cc, list(r.params)))
        return out
