"""RRP and ERR messages as EEP packets (spec pktway.md §2.1-2.2): builders, and
the accessors a half-router or node needs.  V=0, P=0, E=0, h=0; SA = sender."""

from __future__ import annotations

from .constants import PT, ErrTE, RrpTE
from .eep import Packet
from .rrp import Addr, Capa, Ladr, Mtur, Name, Srqr, decode_records, encode_records

__all__ = ["Addr", "rrp", "err", "gvl2", "hrto", "rdrc", "l2sr", "info", "unk", "records"]


def rrp(te: RrpTE, dt: int, sa: int, records=()) -> Packet:
    return Packet(dt=dt, sa=sa, pt=PT.RRP, te=te, data=encode_records(records))


def err(te: ErrTE, dt: int, sa: int, records=(), raw: bytes = b"") -> Packet:
    return Packet(dt=dt, sa=sa, pt=PT.ERR, te=te, data=raw + b"\0" * (-len(raw) % 8) if raw else
                  encode_records(records))


def gvl2(dt: int, sa: int, d: int) -> Packet:
    return rrp(RrpTE.GVL2, dt, sa, [Addr(d)])


def hrto(dt: int, sa: int, d: int) -> Packet:
    return rrp(RrpTE.HRTO, dt, sa, [Addr(d)])


def rdrc(dt: int, sa: int, d: int, via: int) -> Packet:
    return rrp(RrpTE.RDRC, dt, sa, [Addr(d), Addr(via)])


def l2sr(dt: int, sa: int, d: int, routes) -> Packet:
    """routes: (Q, SR L2RHs, MTU words) best first."""
    return rrp(RrpTE.L2SR, dt, sa, [Addr(d)] + [Srqr(q, tuple(sr), Mtur(mtu)) for q, sr, mtu in routes])


def info(dt: int, sa: int, addr: int, name: bytes | None = None, caps=(), groups=()) -> Packet:
    recs = [Addr(addr)] + ([Name(name)] if name else []) + [Capa(cc, params) for cc, params in caps]
    recs += [Ladr(tuple(groups))] if groups else []
    return rrp(RrpTE.INFO, dt, sa, recs)


def unk(dt: int, sa: int, d: int) -> Packet:
    return err(ErrTE.UNK, dt, sa, [Addr(d)])


def records(pkt: Packet) -> list:
    return decode_records(pkt.data)
