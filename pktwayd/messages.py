"""RRP and ERR messages as EEP packets (spec pktway.md §2.1-2.2): builders, and
the accessors a half-router or node needs.  V=0, P=0, E=0, h=0; SA = sender."""

from __future__ import annotations

from collections.abc import Iterable

from .constants import PT, ErrTE, RrpTE
from .eep import L2RH, Packet, Symbol
from .rrp import Addr, Capa, Ladr, Mtur, Name, Record, Srqr, decode_records, encode_records

__all__ = ["Addr", "rrp", "err", "gvl2", "hrto", "rdrc", "l2sr", "info", "unk", "records"]


def rrp(te: RrpTE, dt: int, sa: int, records: Iterable[Record] = ()) -> Packet:
    return Packet(dt=dt, sa=sa, pt=PT.RRP, te=te, data=encode_records(records))


def err(te: ErrTE, dt: int, sa: int, records: Iterable[Record] = (), raw: bytes = b"") -> Packet:
    return Packet(dt=dt, sa=sa, pt=PT.ERR, te=te, data=raw + b"\0" * (-len(raw) % 8) if raw else
                  encode_records(records))


def gvl2(dt: int, sa: int, d: int) -> Packet:
    return rrp(RrpTE.GVL2, dt, sa, [Addr(d)])


def hrto(dt: int, sa: int, d: int) -> Packet:
    return rrp(RrpTE.HRTO, dt, sa, [Addr(d)])


def rdrc(dt: int, sa: int, d: int, via: int) -> Packet:
    return rrp(RrpTE.RDRC, dt, sa, [Addr(d), Addr(via)])


def l2sr(dt: int, sa: int, d: int, routes: Iterable[tuple[int, Iterable[L2RH | Symbol], int]]) -> Packet:
    """routes: (Q, SR L2RHs, MTU words) best first."""
    recs: list[Record] = [Addr(d)]
    recs += [Srqr(q, tuple(sr), Mtur(mtu)) for q, sr, mtu in routes]
    return rrp(RrpTE.L2SR, dt, sa, recs)


def info(dt: int, sa: int, addr: int, name: bytes | None = None, caps: Iterable[tuple[int, bytes]] = (),
         groups: Iterable[int] = ()) -> Packet:
    recs: list[Record] = [Addr(addr)]
    recs += [Name(name)] if name else []
    recs += [Capa(cc, params) for cc, params in caps]
    ladr = tuple(groups)
    recs += [Ladr(ladr)] if ladr else []
    return rrp(RrpTE.INFO, dt, sa, recs)


def unk(dt: int, sa: int, d: int) -> Packet:
    return err(ErrTE.UNK, dt, sa, [Addr(d)])


def records(pkt: Packet) -> list[Record]:
    return decode_records(pkt.data)
