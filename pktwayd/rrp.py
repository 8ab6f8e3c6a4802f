"""RRP records (spec pktway.md §2.3-2.5, MessageWay layouts adapted to 24-bit
addresses): ADDR, NAME, CAPA, LADR, SRQR (with its L2RHs/symbols and a nested
MTUR), MTUR, RCVF, RTHD (which spans its whole routing table).

Common header: RTyp(1) PL(1) RL(2, 8-byte words including the header word).
PBD records pad before their data, PAD records after it.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeAlias

from daemons.wire.errors import DecodeError

from .eep import L2RH, Route, Symbol, first_word_kind

W = 8


class RTyp(enum.IntEnum):
    ADDR = 1
    NAME = 2
    CAPA = 3
    LADR = 4
    SRQR = 5
    MTUR = 6
    RCVF = 7
    RTHD = 8


@dataclass(frozen=True)
class Addr:
    addr: int


@dataclass(frozen=True)
class Name:
    name: bytes


@dataclass(frozen=True)
class Capa:
    cc: int
    params: bytes = b""


@dataclass(frozen=True)
class Ladr:
    addrs: tuple[int, ...]


@dataclass(frozen=True)
class Mtur:
    mtu_words: int  # 0 = unlimited


@dataclass(frozen=True)
class Srqr:
    q: int
    route: Route = ()
    mtu: Mtur | None = None


@dataclass(frozen=True)
class Rcvf:
    addrs: tuple[int, ...]  # newest first: the sending HR leftmost, the mapper rightmost


@dataclass(frozen=True)
class Rthd:
    san_id: int
    sn: int
    records: tuple[Record, ...] = ()  # the rest of this routing table


Record: TypeAlias = Addr | Name | Capa | Ladr | Mtur | Rcvf | Srqr | Rthd
"""Any RRP record."""

MAX_RL = 0xFFFF  # RL is 16 bits


def _head(rtyp: RTyp, pl: int, words: int) -> bytes:
    if words > MAX_RL:
        raise ValueError(f"{rtyp.name} of {words} words: RL holds at most {MAX_RL}")
    return struct.pack(">BBH", rtyp, pl, words)


def _pad_after(rtyp: RTyp, body: bytes) -> bytes:
    words = -(-(4 + len(body)) // W)
    pl = W * words - 4 - len(body)
    return _head(rtyp, pl, words) + body + bytes(pl)


def _pad_before(rtyp: RTyp, body: bytes) -> bytes:
    words = -(-(4 + len(body)) // W)
    pl = W * words - 4 - len(body)
    return _head(rtyp, pl, words) + bytes(pl) + body


def _addr24(a: int) -> bytes:
    if not 0 <= a < 1 << 24:
        raise ValueError(f"address {a:#x} is not 24 bits")
    return a.to_bytes(3, "big")


def encode(rec: Record) -> bytes:
    if isinstance(rec, Addr):
        return _pad_before(RTyp.ADDR, _addr24(rec.addr))
    if isinstance(rec, Name):
        return _pad_after(RTyp.NAME, rec.name)
    if isinstance(rec, Capa):
        return _pad_after(RTyp.CAPA, bytes((rec.cc,)) + rec.params)
    if isinstance(rec, Ladr):
        return _pad_after(RTyp.LADR, b"".join(_addr24(a) for a in rec.addrs))
    if isinstance(rec, Mtur):
        return _pad_before(RTyp.MTUR, _addr24(rec.mtu_words))
    if isinstance(rec, Rcvf):
        return _pad_before(RTyp.RCVF, b"".join(_addr24(a) for a in rec.addrs))
    if isinstance(rec, Srqr):
        inner = b"".join(r.encode() for r in rec.route) + (encode(rec.mtu) if rec.mtu else b"")
        if not 0 <= rec.q <= 0xFFFF:
            raise ValueError("Q is 16 bits")
        return _head(RTyp.SRQR, 2, 1 + len(inner) // W) + bytes(2) + struct.pack(">H", rec.q) + inner
    if isinstance(rec, Rthd):
        inner = encode_records(rec.records)
        return (_head(RTyp.RTHD, 0, 2 + len(inner) // W) + b"\0" + _addr24(rec.san_id) + struct.pack(">I", rec.sn)
                + bytes(4) + inner)
    raise TypeError(f"not an RRP record: {rec!r}")


def encode_records(records: Iterable[Record]) -> bytes:
    return b"".join(encode(r) for r in records)


def decode_records(data: bytes, base: int = 0, *, in_rt: bool = False) -> list[Record]:
    """Records of an RRP message body (whole words); ``in_rt``: the records of one routing
    table, after its RTHD (which cannot hold another RTHD)."""
    if len(data) % W:
        raise DecodeError("RRP", base + len(data), "body is not whole words")
    out: list[Record] = []
    off = 0
    while off < len(data):
        if in_rt and data[off] == RTyp.RTHD:  # checked before decoding it: no recursion
            raise DecodeError("RTHD", base + off, "an RTHD inside a routing table")
        rec, size = _decode_one(data, off, base)
        out.append(rec)
        off += size
    return out


def _decode_one(data: bytes, off: int, base: int) -> tuple[Record, int]:
    rtyp, pl, rl = struct.unpack_from(">BBH", data, off)
    where = base + off
    if rl == 0 or off + W * rl > len(data):
        raise DecodeError("RL", where + 2, f"record length {rl} words does not fit ({len(data) - off} bytes left)")
    if pl > 7:
        raise DecodeError("PL", where + 1, f"pad length {pl} > 7")
    try:
        rtyp = RTyp(rtyp)
    except ValueError:
        raise DecodeError("RTyp", where, f"unknown record type {rtyp}") from None
    size = W * rl
    body = data[off + 4 : off + size]
    if rtyp in (RTyp.ADDR, RTyp.MTUR):
        if rl != 1 or pl != 1:
            raise DecodeError(rtyp.name, where, f"must be one word with PL=1 (RL={rl}, PL={pl})")
        value = int.from_bytes(body[1:4], "big")
        return (Addr(value) if rtyp is RTyp.ADDR else Mtur(value)), size
    if rtyp in (RTyp.NAME, RTyp.CAPA, RTyp.LADR):
        content = body[: len(body) - pl]
        if rtyp is RTyp.NAME:
            return Name(bytes(content)), size
        if rtyp is RTyp.CAPA:
            if not content:
                raise DecodeError("CAPA", where, "no capability code")
            return Capa(content[0], bytes(content[1:])), size
        if len(content) % 3:
            raise DecodeError("LADR", where, f"{len(content)} bytes is not whole 3-byte addresses")
        return Ladr(tuple(int.from_bytes(content[i : i + 3], "big") for i in range(0, len(content), 3))), size
    if rtyp is RTyp.RCVF:
        content = body[pl:]
        if len(content) % 3:
            raise DecodeError("RCVF", where, f"{len(content)} bytes is not whole 3-byte addresses")
        return Rcvf(tuple(int.from_bytes(content[i : i + 3], "big") for i in range(0, len(content), 3))), size
    if rtyp is RTyp.SRQR:
        (q,) = struct.unpack_from(">H", data, off + 6)
        route: list[L2RH | Symbol] = []
        mtu: Mtur | None = None
        pos, end = off + W, off + size
        while pos < end:
            kind = first_word_kind(data[pos : pos + W])
            if kind == "l2rh":
                n = data[pos + 1] & 0x3F
                step = W * ((n + 9) // W)
                if n == 0 or pos + step > end:
                    raise DecodeError("SRQR", base + pos, "L2RH does not fit the record")
                route.append(L2RH(bytes(data[pos + 2 : pos + 2 + n])))
            elif kind == "symbol":
                n = data[pos + 4]
                step = W * ((n + 12) // W)
                if pos + step > end:
                    raise DecodeError("SRQR", base + pos, "symbol does not fit the record")
                route.append(Symbol(int.from_bytes(data[pos + 1 : pos + 4], "big") & 0xFFFFF,
                                    bytes(data[pos + 5 : pos + 5 + n])))
            else:
                if data[pos] != RTyp.MTUR or mtu is not None:  # checked first: no recursion
                    raise DecodeError("SRQR", base + pos, "only one nested MTUR is allowed")
                nested, step = _decode_one(data[:end], pos, base)
                if not isinstance(nested, Mtur):
                    raise DecodeError("SRQR", base + pos, "only one nested MTUR is allowed")
                mtu = nested
            pos += step
        return Srqr(q, tuple(route), mtu), size
    # RTHD: 16-byte fixed part; RL covers the whole routing table
    if rl < 2:
        raise DecodeError("RTHD", where, "shorter than its 16-byte fixed part")
    san = int.from_bytes(data[off + 5 : off + 8], "big")
    (sn,) = struct.unpack_from(">I", data, off + 8)
    return Rthd(san, sn, tuple(decode_records(bytes(data[off + 16 : off + size]), where + 16, in_rt=True))), size
