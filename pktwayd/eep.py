"""EEP (PacketWay End-to-End Protocol) packets: the prefix of L2RH and symbol
records, the 16-byte header, optional header fields, the data block with its
padding, optional trailer bytes and the 8-byte TAIL (spec pktway.md §1).

The MessageWay v5 dialect (16-bit addresses, Version 5) is decoded into, and
encoded from, the same :class:`Packet`, converting addresses as spec §5 says;
the dialect is chosen per link.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TypeAlias

from daemons.wire.errors import DecodeError

from . import constants as K

W = K.WORD
_U64 = (1 << 64) - 1


def _pad_to_word(n: int) -> int:
    return -n % W


@dataclass(frozen=True)
class L2RH:
    """A level-2 routing header: SAN-specific route bytes, consumed by a router."""

    route: bytes

    @property
    def words(self) -> int:
        """floor((L+9)/8) words (spec §1.6)."""
        return (len(self.route) + 9) // W

    def encode(self, dialect: str = "pw0") -> bytes:
        if not 1 <= len(self.route) <= 63:
            raise ValueError(f"an L2RH carries 1..63 route bytes, not {len(self.route)}")
        head = bytes((0, (0x80 if dialect == "pw0" else 0) | len(self.route)))
        body = head + self.route
        return body + bytes(_pad_to_word(len(body)))


@dataclass(frozen=True)
class Symbol:
    stype: int  # 20 bits
    data: bytes = b""

    @property
    def words(self) -> int:
        """floor((L+12)/8) words (spec §1.7, I4)."""
        return (len(self.data) + 12) // W

    def encode(self) -> bytes:
        if not 0 <= self.stype < 1 << 20 or len(self.data) > 255:
            raise ValueError("symbol type is 20 bits and carries at most 255 bytes")
        body = bytes((0,)) + (0xF00000 | self.stype).to_bytes(3, "big") + bytes((len(self.data),)) + self.data
        return body + bytes(_pad_to_word(len(body)))


Route: TypeAlias = tuple[L2RH | Symbol, ...]
"""L2RH and Symbol records in order: a packet's prefix, or a source route."""


@dataclass(frozen=True)
class OptField:
    """An optional header field; ``mandatory``: do not process the packet if unknown."""

    otype: int  # 6 bits
    data: bytes = b""
    mandatory: bool = False

    @property
    def words(self) -> int:
        """floor((L+9)/8) words (spec §1.8): a field with 255 data bytes is 33 words."""
        return (len(self.data) + 9) // W

    def encode(self, last: bool) -> bytes:
        if not 0 <= self.otype < 64 or len(self.data) > 255:
            raise ValueError("OH type is 6 bits and carries at most 255 bytes")
        body = bytes(((0x80 if self.mandatory else 0) | (0x40 if last else 0) | self.otype, len(self.data))) + self.data
        return body + bytes(_pad_to_word(len(body)))


@dataclass(frozen=True)
class Packet:
    dt: int
    sa: int
    pt: int
    te: int = 0
    data: bytes = b""
    prefix: Route = ()
    options: tuple[OptField, ...] = ()
    trailer: bytes = b""  # OT area, whole words
    tail: int = 0  # the EI word
    v: int = 0
    p: int = 0
    e: int = 0
    rz: int = 0
    free: int = 0  # MessageWay only: 16 bits for applications

    @property
    def dl(self) -> int:
        return -(-len(self.data) // W)

    @property
    def words(self) -> int:
        """The packet's length in 8-byte words as encoded (PacketWay dialect): its prefix
        records, the header, every optional header field by its own length, the data block,
        the trailer and the TAIL.  This is what must fit an MTU (spec §1.1)."""
        return (sum(r.words for r in self.prefix) + 2 + sum(o.words for o in self.options) + self.dl
                + len(self.trailer) // W + 1)

    def encode(self, dialect: str = "pw0") -> bytes:
        if len(self.data) > W * K.MAX_DL_WORDS:
            raise ValueError("data block longer than 2^25-1 words")
        if len(self.trailer) % W:
            raise ValueError("the trailer is whole words")
        if dialect != "mw5" and not self.prefix and not self.options:  # an L3 packet: no joins to make
            return b"".join((self.header(), self.data, _PADS[-len(self.data) % W], self.trailer,
                             struct.pack(">Q", self.tail & _U64)))
        pre = b"".join(r.encode(dialect) if isinstance(r, L2RH) else r.encode() for r in self.prefix)
        if dialect == "mw5":
            if any(isinstance(r, Symbol) for r in self.prefix) or self.options:
                raise ValueError("MessageWay has no symbols or optional fields")
            head = _mw_header(self)
        else:
            head = self.header()
        opts = b"".join(o.encode(i == len(self.options) - 1) for i, o in enumerate(self.options))
        pad = _pad_to_word(len(self.data))
        return pre + head + opts + self.data + bytes(pad) + self.trailer + struct.pack(">Q", self.tail & _U64)

    def header(self) -> bytes:
        v, p, dt, te, pt, e, sa, rz = self.v, self.p, self.dt, self.te, self.pt, self.e, self.sa, self.rz
        if v >> 2 or p >> 6 or dt >> 24 or te >> 16 or pt >> 16 or e >> 4 or sa >> 24 or rz >> 7 \
                or min(v, p, dt, te, pt, e, sa, rz) < 0:
            self._out_of_range()
        w0 = (v << 62) | (p << 56) | (dt << 32) | (te << 16) | pt
        w1 = (e << 60) | (-len(self.data) % W << 57) | (self.dl << 32) | (int(bool(self.options)) << 31) | (rz << 24) | sa
        return struct.pack(">QQ", w0, w1)

    def _out_of_range(self) -> None:
        for name, value, bits in (("V", self.v, 2), ("P", self.p, 6), ("DT", self.dt, 24), ("TE", self.te, 16),
                                  ("PT", self.pt, 16), ("E", self.e, 4), ("SA", self.sa, 24), ("RZ", self.rz, 7)):
            if not 0 <= value < 1 << bits:
                raise ValueError(f"{name}={value:#x} does not fit in {bits} bits")


def ei_update(ei: int, error_detected: bool) -> int:
    """The TAIL rule at each router transit: shift EI left unless its MSbit is set;
    a router that saw a transmission error sets the LSbit."""
    if not (ei >> 63) & 1:
        ei = (ei << 1) & _U64
    if error_detected:
        ei |= 1
    return ei


def ei_update_mw5(ei: int, error_detected: bool) -> int:
    """MessageWay shifted unconditionally."""
    return ((ei << 1) & _U64) | int(error_detected)


# --- decoding ---------------------------------------------------------------------------------
def first_word_kind(word: bytes, dialect: str = "pw0") -> str:
    """'header', 'l2rh', 'symbol' or 'reserved' from the DT prefix coding (§1.2)."""
    if dialect == "mw5":
        return "l2rh" if struct.unpack_from(">H", word)[0] < K.MW_L2RH_LIMIT else "header"
    b1 = word[1]
    if b1 & 0x80 == 0 or b1 & 0xF0 == 0xE0:
        return "header"
    if b1 & 0xC0 == 0x80:
        return "l2rh"
    if b1 & 0xF0 == 0xF0:
        return "symbol"
    return "reserved"


def decode(data: bytes, dialect: str = "pw0") -> Packet:
    """Decode a whole packet (its length comes from the carrier)."""
    n = len(data)
    if dialect == "pw0" and n >= 3 * W and not n % W:  # the common case first: an EEP header leads, no OH
        w0, w1 = _HEAD.unpack_from(data)
        b1 = (w0 >> 48) & 0xFF
        if not w0 >> 62 and (b1 < 0x80 or b1 & 0xF0 == 0xE0) and not (w1 >> 31) & 1:
            dl, pl = (w1 >> 32) & 0x1FFFFFF, (w1 >> 57) & 7
            end = 2 * W + W * dl
            if not (pl and dl == 0) and end <= n - W:
                return Packet((w0 >> 32) & 0xFFFFFF, w1 & 0xFFFFFF, w0 & 0xFFFF, (w0 >> 16) & 0xFFFF,
                              bytes(data[2 * W : end - pl]), (), (), bytes(data[end : n - W]),
                              _TAIL.unpack_from(data, n - W)[0], 0, (w0 >> 56) & 0x3F, w1 >> 60, (w1 >> 24) & 0x7F)
    return _decode(data, dialect, n)


_HEAD, _TAIL = struct.Struct(">QQ"), struct.Struct(">Q")
_PADS = [bytes(i) for i in range(W)]  # _PADS[-len % W]: the zero bytes to the next word


def _decode(data: bytes, dialect: str, n: int) -> Packet:
    """Any packet: prefix records, either dialect, optional header fields."""
    if n % W:
        raise DecodeError("packet", n - n % W, f"length {n} is not a multiple of 8")
    if n < 3 * W:
        raise DecodeError("packet", n, "shorter than header + TAIL")
    off = 0
    prefix: list[L2RH | Symbol] = []
    while True:
        if off + 2 * W + W > n:
            raise DecodeError("header", off, "no room for the EEP header and TAIL")
        kind = first_word_kind(data[off : off + W], dialect)
        if kind == "header":
            break
        if kind == "reserved":
            raise DecodeError("DT", off + 1, "reserved prefix 110x")
        if kind == "l2rh":
            length = data[off + 1] & 0x3F
            if length == 0:
                raise DecodeError("L2RH", off + 1, "zero route bytes")
            size = W * ((length + 9) // W)
            if off + size > n - 3 * W:
                raise DecodeError("L2RH", off, f"{length} route bytes run past the header")
            prefix.append(L2RH(bytes(data[off + 2 : off + 2 + length])))
        else:
            length = data[off + 4]
            size = W * ((length + 12) // W)
            if off + size > n - 3 * W:
                raise DecodeError("symbol", off, f"{length} data bytes run past the header")
            stype = int.from_bytes(data[off + 1 : off + 4], "big") & 0xFFFFF
            prefix.append(Symbol(stype, bytes(data[off + 5 : off + 5 + length])))
        off += size
    fields = _mw_fields(data, off) if dialect == "mw5" else _pw_fields(data, off)
    off += 2 * W
    options = []
    if fields.pop("h"):
        while True:
            if off + W > n - W:
                raise DecodeError("OH", off, "optional header runs into the TAIL")
            b0, length = data[off], data[off + 1]
            size = W * ((length + 9) // W)
            if off + size > n - W:
                raise DecodeError("OH", off, f"{length} bytes run into the TAIL")
            options.append(OptField(b0 & 0x3F, bytes(data[off + 2 : off + 2 + length]), bool(b0 & 0x80)))
            off += size
            if b0 & 0x40:
                break
    dl, pl = fields.pop("dl"), fields.pop("pl")
    if pl > 7 or (pl and dl == 0):
        raise DecodeError("PL", off - 8, f"pad length {pl} with {dl} data words")
    end = off + W * dl
    if end > n - W:
        raise DecodeError("DL", off - 8, f"{dl} data words run past the packet ({n} bytes)")
    body = bytes(data[off : end - pl])
    trailer = bytes(data[end : n - W])
    (tail,) = struct.unpack_from(">Q", data, n - W)
    return Packet(data=body, prefix=tuple(prefix), options=tuple(options), trailer=trailer, tail=tail, **fields)


def _pw_fields(data: bytes, off: int) -> dict[str, int]:
    w0, w1 = struct.unpack_from(">QQ", data, off)
    v = w0 >> 62
    if v != 0:
        raise DecodeError("V", off, f"version {v} is not 0")
    return dict(v=v, p=(w0 >> 56) & 0x3F, dt=(w0 >> 32) & 0xFFFFFF, te=(w0 >> 16) & 0xFFFF, pt=w0 & 0xFFFF,
                e=w1 >> 60, pl=(w1 >> 57) & 7, dl=(w1 >> 32) & 0x1FFFFFF, h=(w1 >> 31) & 1,
                rz=(w1 >> 24) & 0x7F, sa=w1 & 0xFFFFFF)


# --- MessageWay v5 ------------------------------------------------------------------------------
def mw_to_pw_addr(a: int) -> int:
    if a == K.MW_HEY_YOU:
        return K.ADDR_HEY_YOU
    if a == K.MW_BROADCAST:
        return K.ADDR_BROADCAST
    if a & K.MW_LOGICAL:
        return K.LOGICAL_BASE | (a & 0x7FFF)
    return a


def pw_to_mw_addr(a: int) -> int:
    if a == K.ADDR_HEY_YOU:
        return K.MW_HEY_YOU
    if a == K.ADDR_BROADCAST:
        return K.MW_BROADCAST
    if a & K.LOGICAL_MASK == K.LOGICAL_BASE:
        if a & 0xFFFFF > 0x7FFD:
            raise ValueError(f"logical address {a:#x} does not fit MessageWay")
        return K.MW_LOGICAL | (a & 0x7FFF)
    if not K.MW_L2RH_LIMIT <= a < K.MW_LOGICAL:
        raise ValueError(f"address {a:#x} does not fit MessageWay's 16-bit node space")
    return a


def _mw_fields(data: bytes, off: int) -> dict[str, int]:
    da, prio, version, pt, te = struct.unpack_from(">HBBHH", data, off)
    if version != K.MW_VERSION:
        raise DecodeError("Version", off + 3, f"MessageWay version {version} is not 5")
    (w1,) = struct.unpack_from(">Q", data, off + W)
    pl = (w1 >> 56) & 0xF
    return dict(v=0, p=prio >> 2, dt=mw_to_pw_addr(da), te=te, pt=pt, e=w1 >> 60, pl=pl, dl=(w1 >> 32) & 0xFFFFFF,
                h=0, rz=0, sa=mw_to_pw_addr((w1 >> 16) & 0xFFFF) if (w1 >> 16) & 0xFFFF else 0, free=w1 & 0xFFFF)


def _mw_header(p: Packet) -> bytes:
    if p.dl >= 1 << 24:
        raise ValueError("MessageWay data blocks are at most 2^24-1 words")
    sa = pw_to_mw_addr(p.sa) if p.sa else 0
    pl = _pad_to_word(len(p.data))
    w1 = (p.e << 60) | (pl << 56) | (p.dl << 32) | (sa << 16) | (p.free & 0xFFFF)
    return struct.pack(">HBBHHQ", pw_to_mw_addr(p.dt), (p.p << 2) & 0xFF, K.MW_VERSION, p.pt, p.te, w1)


__all__ = ["L2RH", "Symbol", "OptField", "Packet", "decode", "ei_update", "ei_update_mw5", "first_word_kind",
           "mw_to_pw_addr", "pw_to_mw_addr"]
