"""Structure-aware EEP/RRP packet builder driven by a :class:`Draw` (see also the
Hypothesis strategies of tests/sim/test_pktway_fuzz.py, which these mirror)."""

from __future__ import annotations

from pktwayd import messages as M
from pktwayd.constants import ADDR_BROADCAST, ADDR_HEY_YOU, PT, ErrTE, RrpTE
from pktwayd.eep import L2RH, OptField, Packet, Symbol
from pktwayd.rrp import Addr, Capa, Ladr, Mtur, Name, Rcvf, Rthd, Srqr, encode

from .draw import Draw
from .mutate import mutate_bytes

ADDRS = [0, 0x000015, 0x000016, 0x000019, 0x000000, 0x000002, 0x000008, ADDR_HEY_YOU, ADDR_BROADCAST,
         0xE00005, 0x800001, 0x7000]
ROUTES = [bytes([1]), bytes([2, 3]), bytes([9, 3, 0]), bytes([0, 0, 0]), b"\xff" * 6]


def addr(d: Draw, pool=ADDRS) -> int:
    return d.choice(pool) if d.bool() else d.bits(24)


def l2rh_or_symbol(d: Draw):
    if d.bool():
        return L2RH(d.choice(ROUTES) if d.bool() else d.take(1 + d.below(63)).ljust(1, b"\1"))
    return Symbol(d.bits(20), d.blob(24))


def record(d: Draw, depth: int = 0):
    k = d.below(9 if depth == 0 else 8)
    if k == 0:
        return Addr(addr(d))
    if k == 1:
        return Name(d.blob(20))
    if k == 2:
        return Capa(d.int(1), d.blob(24))
    if k == 3:
        return Ladr(tuple(addr(d) for _ in range(d.below(4))))
    if k == 4:
        return Mtur(d.bits(24))
    if k == 5:
        return Rcvf(tuple(addr(d) for _ in range(d.below(5))))
    if k in (6, 7):
        hops = tuple(l2rh_or_symbol(d) for _ in range(d.below(3)))
        return Srqr(d.int(2), hops, Mtur(d.bits(24)) if d.bool() else None)
    return Rthd(d.bits(24), d.int(4), tuple(record(d, 1) for _ in range(d.below(5))))


def packet(d: Draw, dts=None) -> Packet:
    kind = d.below(5)
    dt = d.choice(dts[:2]) if dts and d.bool() else addr(d, dts or ADDRS)  # mostly to the router under test
    sa = addr(d)
    if kind <= 2:
        te = d.choice(list(RrpTE))
        pkt = Packet(dt=dt, sa=sa, pt=PT.RRP, te=te, data=b"".join(encode(record(d)) for _ in range(d.below(4))))
    elif kind == 3:
        te = d.choice(list(ErrTE))
        pkt = (M.err(te, dt, sa, [record(d) for _ in range(d.below(3))]) if te != ErrTE.GENERAL
               else M.err(te, dt, sa, raw=d.blob(24)))
    else:
        pkt = Packet(dt=dt, sa=sa, pt=d.choice([PT.USER, PT.EMBEDDED, 0x0800, 0xFFFF]), data=d.blob(64))
    from dataclasses import replace

    prefix = tuple(l2rh_or_symbol(d) for _ in range(d.choice([0, 0, 0, 1, 2])))
    options = tuple(OptField(d.bits(6), d.blob(40), d.bool()) for _ in range(d.choice([0, 0, 0, 1, 2])))
    return replace(pkt, prefix=prefix, options=options, trailer=bytes(8 * d.below(2)), tail=d.choice([0, 1, 1 << 63]))


def wire(d: Draw, dts=None, dialect: str = "pw0") -> bytes:
    """A valid packet's bytes (either dialect when it fits), then a few edits."""
    pkt = packet(d, dts)
    try:
        raw = pkt.encode(dialect)
    except ValueError:
        raw = pkt.encode()
    return mutate_bytes(d, raw, offsets=list(range(0, 48))) if d.bool() else raw
