"""A PacketWay node (levels B-C) on a GSN fabric: EEP packets through gsnd's ULP
socket, L3 through a default half-router, route planning (GVL2 -> L2SR / RDRC),
and queries (TELL -> INFO, WRU).

    node = Node("/run/gsnd/gsn0.ulp", addr=0x40, router_ula=...)
    node.send(0x60, b"hello")                 # L3 via the router
    routes = node.route(0x60)                 # [(Q, [L2RH...], MTU)] or a redirect
    node.send(0x60, b"hi", route=routes[0][1])  # L2, along a planned route
"""

from __future__ import annotations

import socket
import time

from daemons.ulpclient import UlpClient
from daemons.wire.errors import DecodeError
from daemons.wire.ulp import Op

from . import messages as M
from .constants import ADDR_HEY_YOU, PT, ErrTE, RrpTE
from .eep import Packet, decode
from .rrp import Addr, Capa, Name, Srqr


class PktwayError(Exception):
    pass


class Node:
    def __init__(self, ulp_path: str, addr: int, router_ula: bytes, *, ethertype: int | None = None,
                 dialect: str = "pw0", name: bytes | None = None, caps=()) -> None:
        from .constants import ETHERTYPE_PKTWAY

        self.et = ethertype or ETHERTYPE_PKTWAY
        self.addr = addr
        self.router_ula = router_ula
        self.dialect = dialect
        self.name = name
        self.caps = tuple(caps)  # (CC, params) for INFO answers, e.g. (7, bytes([4, 8]))
        self.ulp = UlpClient(ulp_path)
        self.ulp.bind(self.et)

    def announce(self, to_ula: bytes | None = None) -> None:
        """Power-up registration: INFO about myself to Hey-You (the router registers me)."""
        self.send_packet(M.info(ADDR_HEY_YOU, self.addr, self.addr, self.name, self.caps), to_ula)

    def close(self) -> None:
        self.ulp.close()

    def __enter__(self) -> "Node":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send_packet(self, pkt: Packet, to_ula: bytes | None = None) -> None:
        self.ulp.send(to_ula or self.router_ula, pkt.encode(self.dialect), vc=1, ethertype=self.et)

    def send(self, dest: int, data: bytes, *, route=(), pt: int = PT.USER) -> None:
        self.send_packet(Packet(dt=dest, sa=self.addr, pt=pt, data=data, prefix=tuple(route)))

    def recv(self, timeout: float = 5.0) -> Packet:
        """The next packet addressed to this node."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no packet")
            try:
                frame = self.ulp.recv(left)
            except socket.timeout:
                raise TimeoutError("no packet") from None
            if frame.op is not Op.RECV or frame.ethertype != self.et:
                continue
            try:
                pkt = decode(frame.payload, self.dialect)
            except DecodeError:
                continue
            if pkt.prefix or pkt.dt not in (self.addr, ADDR_HEY_YOU):
                continue
            if pkt.pt == PT.RRP and pkt.te == RrpTE.WRU:  # "who are you": say, to whoever asked
                self.send_packet(M.info(pkt.sa, self.addr, self.addr, self.name, self.caps), bytes(frame.ula))
                continue
            if pkt.dt == self.addr:
                return pkt

    def ask(self, te: RrpTE, records, timeout: float = 5.0) -> Packet:
        """Send an RRP request to the router (its ULA); the RRP/ERR answer."""
        self.send_packet(M.rrp(te, ADDR_HEY_YOU, self.addr, records))  # Hey-You: whoever gets it owns it
        while True:
            pkt = self.recv(timeout)
            if pkt.pt in (PT.RRP, PT.ERR):
                return pkt

    def route(self, dest: int):
        """L2 routes to ``dest``: [(Q, L2RHs, MTU)], or ("redirect", address), or raises."""
        reply = self.ask(RrpTE.GVL2, [Addr(dest)])
        if reply.pt == PT.ERR:
            raise PktwayError(f"{dest:#x}: {ErrTE(reply.te).name if reply.te in ErrTE._value2member_map_ else reply.te}")
        recs = M.records(reply)
        if reply.te == RrpTE.RDRC:
            return ("redirect", recs[1].addr)
        return [(r.q, list(r.route), r.mtu.mtu_words if r.mtu else 0) for r in recs[1:] if isinstance(r, Srqr)]

    def find(self, *, name: bytes | None = None, capability: tuple[int, bytes] | None = None) -> list[dict]:
        """TELL by name or capability: [{"addr", "name", "caps"}] of the nodes the router knows."""
        query = [Name(name)] if name is not None else [Capa(*capability)]
        reply = self.ask(RrpTE.TELL, query)
        if reply.pt == PT.ERR:
            return []
        out: list[dict] = []
        for r in M.records(reply):
            if isinstance(r, Addr):
                out.append({"addr": r.addr, "name": None, "caps": []})
            elif out and isinstance(r, Name):
                out[-1]["name"] = r.name.decode(errors="replace")
            elif out and isinstance(r, Capa):
                out[-1]["caps"].append((r.cc, list(r.params)))
        return out
