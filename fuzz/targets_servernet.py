"""ServerNet targets: the packet codec, the router core and an end node's receive path
on built-then-mutated datagrams."""

from __future__ import annotations

from daemons.wire.errors import DecodeError

from .draw import Draw
from .mutate import mutate_bytes
from .registry import target

A, B = 0x04001, 0x08001


def _datagram(d: Draw) -> bytes:
    from servernet.codec import Packet, envelope
    from servernet.constants import TType

    ttype = d.choice(list(TType))
    rsp = d.bool() and ttype != TType.DIAG
    ii = d.bool() and d.bool()
    n = d.below(65) if not ii else 8 * d.below(65)
    carries = (rsp and ttype == TType.READ) or (not rsp and ttype in (TType.WRITE, TType.DIAG))
    data = d.take(n).ljust(n, b"\0") if carries else b""
    pkt = Packet(d.choice([A, B, d.bits(20)]), d.choice([A, B, d.bits(20)]), ttype, rsp, d.bits(4), d.bits(1),
                 rsp and d.bool(), None if rsp else d.choice([0x100000, 0x300000, 0x400000, d.int(4)]), data,
                 n if (ttype == TType.READ and not rsp) else 0, ii)
    raw = envelope(pkt.encode(), pkt.path, tpb=d.bool() and d.bool(), ii=ii)
    if d.bool():
        raw = mutate_bytes(d, raw, offsets=[3, 4, 6, 7, 9, 10, 11, len(raw) - 1])
    return raw


@target("servernet.codec", rejects=(DecodeError,), seeds=[b"", b"\x01" * 40, bytes(range(90))])
def codec(data: bytes) -> None:
    """servernet.codec.open_envelope + decode on built-then-mutated datagrams; a decoded packet re-encodes."""
    from servernet.codec import decode, open_envelope

    d = Draw(data)
    env = open_envelope(_datagram(d))
    pkt = decode(env.packet, env.ii)
    assert decode(pkt.encode(), pkt.ii) == pkt, "decode(encode(p)) != p"


@target("servernet.router", seeds=[b"", b"\x02" * 40, bytes(range(60))])
def router(data: bytes) -> None:
    """RouterCore.receive on built-then-mutated datagrams from cabled and unknown senders."""
    from servernet.router import RouterCore, parse_route

    d = Draw(data)
    ports = {0: ("10.0.0.1", 1), 1: ("10.0.0.2", 2)}
    core = RouterCore(d.bits(1), ports, [parse_route(f"{A:#x}=0"), parse_route("0x08000/6=1")])
    for _ in range(1 + d.below(4)):
        out = core.receive(d.choice([ports[0], ports[1], ("9.9.9.9", 9)]), _datagram(d))
        assert out is None or out[0] in ports.values()


@target("servernet.node", seeds=[b"", b"\x03" * 50, bytes(range(100))])
def node(data: bytes) -> None:
    """An end node (AVT, BTE, PacketWay ring) receiving built-then-mutated datagrams, then its timers."""
    from servernet.avt import Avt, Window
    from servernet.endpoint import Endpoint
    from servernet.ring import RingLink

    d = Draw(data)
    avt = Avt([Window("buf", 0x100, 2, "rw"), Window("bell", 0x300, 1, "w", interrupt=True),
               Window("pktway-ring", 0x400, 16, "w", per_source=True), Window("pktway-bell", 0x410, 1, "w", interrupt=True)],
              frozenset({A}), queue_limit=2)
    ep = Endpoint(B, [A], avt)
    RingLink(ep, lambda *a: None)
    if d.bool():
        ep.bte.write(A, 0x100000, b"x" * d.below(65), 0.0)
    now = 0.0
    for _ in range(1 + d.below(6)):
        ep.receive(d.bits(1), _datagram(d), now)
        now += d.below(100) / 1000
        ep.tick(now)
    assert ep.bte.in_use == sum(s is not None for s in ep.bte.slots) and len(avt.queue) <= 2


@target("servernet.crouter", seeds=[b"", b"\x04" * 60, bytes(range(120))])
def crouter(data: bytes) -> None:
    """snet-router's compiled loop (servernet._snetfwd.Router.receive) against RouterCore, its oracle:
    the same output and counters for built-then-mutated datagrams, with a drawn deadlock mask."""
    from servernet._snetfwd import Router
    from servernet.router import RouterCore, parse_route, route_table

    d = Draw(data)
    ports = {0: ("10.0.0.1", 1), 3: ("10.0.0.2", 2), 11: ("::1", 3)}
    routes = [parse_route(f"{A:#x}=0"), parse_route("0x08000/6=3"), parse_route(f"0/{d.below(3)}=11")]
    enables = {3: frozenset({0, 11})} if d.bool() else {}
    fabric = d.bits(1)
    py, c = RouterCore(fabric, ports, routes, enables), Router(-1, fabric, ports, route_table(routes), enables)
    for _ in range(1 + d.below(4)):
        src = d.choice([ports[0], ports[3], ports[11], ("9.9.9.9", 9)])
        raw = _datagram(d) if d.bool() else d.take(d.below(600))
        assert c.receive(src, raw) == py.receive(src, raw), "compiled router differs from RouterCore"
    assert c.counters() == {k: v for k, v in py.counters.items() if v}, "counters differ"
