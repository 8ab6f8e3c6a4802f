"""UD packets: LRH (8) + optional GRH (40) + BTH (12) + DETH (8) + payload + pad + ICRC (4).

The field layout is the IBA's as the spec lists it (2.1).  ICRC: CRC-32 (the Ethernet
polynomial, zlib's) over the whole packet with the fields a switch may change (LRH VL,
GRH traffic class, flow label and hop limit, the BTH reserved byte) read as all ones;
project choice modelled on the IBA rule.  No VCRC: the spec has none (a UDP cable
already checksums each datagram).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from .constants import (BTH_BYTES, BTH_TVER, DETH_BYTES, GRH_BYTES, GRH_NEXT_HEADER, ICRC_BYTES, LNH_GLOBAL,
                        LNH_LOCAL, LRH_BYTES, LRH_LVER, OPCODE_UD_SEND_ONLY)

_LRH = struct.Struct("!BBHHH")
_BTH = struct.Struct("!BBHI I")
_DETH = struct.Struct("!II")
MAX_PKT_WORDS = (1 << 11) - 1  # 11-bit LRH PktLen in 4-byte words


class PacketError(ValueError):
    """A datagram that is not a well-formed UD packet (the message names the reason)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(slots=True)
class Grh:
    sgid: bytes
    dgid: bytes
    tclass: int = 0
    flow_label: int = 0
    hop_limit: int = 0


@dataclass(slots=True)
class UdPacket:
    slid: int
    dlid: int
    pkey: int
    dqpn: int
    sqpn: int
    qkey: int
    payload: bytes
    sl: int = 0
    vl: int = 0
    psn: int = 0
    grh: Grh | None = None

    def encode(self) -> bytes:
        return encode(self)


def encode(p: UdPacket) -> bytes:
    pad = -len(p.payload) % 4
    total = LRH_BYTES + (GRH_BYTES if p.grh else 0) + BTH_BYTES + DETH_BYTES + len(p.payload) + pad + ICRC_BYTES
    if total // 4 > MAX_PKT_WORDS:
        raise PacketError("too_long")
    lnh = LNH_GLOBAL if p.grh else LNH_LOCAL
    out = bytearray(_LRH.pack((p.vl << 4) | LRH_LVER, (p.sl << 4) | lnh, p.dlid, total // 4, p.slid))
    if p.grh is not None:
        g = p.grh
        payload_len = total - LRH_BYTES - GRH_BYTES
        out += struct.pack("!IHBB", (6 << 28) | (g.tclass << 20) | g.flow_label, payload_len, GRH_NEXT_HEADER,
                           g.hop_limit)
        out += g.sgid + g.dgid
    out += _BTH.pack(OPCODE_UD_SEND_ONLY, (pad << 4) | BTH_TVER, p.pkey, p.dqpn & 0xFFFFFF, p.psn & 0xFFFFFF)
    out += _DETH.pack(p.qkey, p.sqpn & 0xFFFFFF)
    out += p.payload
    out += bytes(pad)
    out += struct.pack("!I", icrc(out, p.grh is not None))
    return bytes(out)


def icrc(body: bytes | bytearray, global_route: bool) -> int:
    """CRC-32 over ``body`` (LRH to the end of the pad) with the variant fields as ones."""
    m = bytearray(body)
    m[0] |= 0xF0  # LRH VL
    bth = LRH_BYTES
    if global_route:
        m[8] |= 0x0F  # GRH: traffic class (low nibble of byte 0, high nibble of byte 1) ...
        m[9] = 0xFF  # ... and flow label (low nibble of byte 1, bytes 2-3)
        m[10] = m[11] = 0xFF
        m[LRH_BYTES + 7] = 0xFF  # hop limit
        bth += GRH_BYTES
    m[bth + 4] = 0xFF  # BTH reserved byte
    return zlib.crc32(m)


def decode(data: bytes) -> UdPacket:
    """The UD packet in ``data``; PacketError(reason) for anything malformed."""
    n = len(data)
    if n < LRH_BYTES + BTH_BYTES + DETH_BYTES + ICRC_BYTES:
        raise PacketError("runt")
    b0, b1, dlid, words, slid = _LRH.unpack_from(data)
    if b0 & 0x0F != LRH_LVER:
        raise PacketError("bad_lver")
    lnh = b1 & 0x03
    if lnh not in (LNH_LOCAL, LNH_GLOBAL):
        raise PacketError("bad_lnh")
    if (words & 0x07FF) * 4 != n or words & 0xF800:
        raise PacketError("bad_length")
    off = LRH_BYTES
    grh = None
    if lnh == LNH_GLOBAL:
        if n < LRH_BYTES + GRH_BYTES + BTH_BYTES + DETH_BYTES + ICRC_BYTES:
            raise PacketError("runt")
        w0, paylen, nxt, hop = struct.unpack_from("!IHBB", data, off)
        if w0 >> 28 != 6 or nxt != GRH_NEXT_HEADER:
            raise PacketError("bad_grh")
        if paylen != n - LRH_BYTES - GRH_BYTES:
            raise PacketError("bad_length")
        grh = Grh(bytes(data[off + 8:off + 24]), bytes(data[off + 24:off + 40]), (w0 >> 20) & 0xFF, w0 & 0xFFFFF,
                  hop)
        off += GRH_BYTES
    opcode, b1bth, pkey, dqpn, psn = _BTH.unpack_from(data, off)
    if opcode != OPCODE_UD_SEND_ONLY:
        raise PacketError("bad_opcode")
    if b1bth & 0x0F != BTH_TVER:
        raise PacketError("bad_tver")
    pad = (b1bth >> 4) & 0x03
    off += BTH_BYTES
    qkey, sqpn = _DETH.unpack_from(data, off)
    off += DETH_BYTES
    end = n - ICRC_BYTES - pad
    if end < off:
        raise PacketError("bad_length")
    (crc,) = struct.unpack_from("!I", data, n - ICRC_BYTES)
    if crc != icrc(data[:n - ICRC_BYTES], grh is not None):
        raise PacketError("bad_icrc")
    return UdPacket(slid=slid, dlid=dlid, pkey=pkey, dqpn=dqpn & 0xFFFFFF, sqpn=sqpn & 0xFFFFFF, qkey=qkey,
                    payload=bytes(data[off:end]), sl=b1 >> 4, vl=b0 >> 4, psn=psn & 0xFFFFFF, grh=grh)


def peek_dlid(data: bytes) -> int:
    """The DLID of a datagram (switches forward on it without a full decode); -1 if short."""
    return int.from_bytes(data[2:4], "big") if len(data) >= LRH_BYTES else -1
