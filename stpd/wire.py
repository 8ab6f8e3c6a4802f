"""The 40-byte ST Schedule Header, its flags, the option TLVs and the checksum
(spec st.md §1, §3.10).  Big-endian; size-like parameters are log2 exponents."""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace

from daemons.wire.errors import DecodeError

from .constants import (
    DC_MASK,
    FUNCTION_MASK,
    FUNCTION_SHIFT,
    HEADER_BYTES,
    MAX_OPTION_BYTES,
    OP_SHIFT,
    OPT_END,
    OPT_ERROR_CODE,
    Flag,
    Function,
    Op,
)

from daemons.wire.buffers import Bytes

HEADER = struct.Struct(">HHHHIHHIIIIII")
assert HEADER.size == HEADER_BYTES
FLAG_BITS = 0x00FC


@dataclass(frozen=True)
class Header:
    op: Op
    flags: Flag = Flag(0)
    function: int = 0
    dc: int = 0
    param: int = 0
    d_port: int = 0
    s_port: int = 0
    d_key: int = 0
    checksum: int = 0
    mx: int = 0  # B_id / Mx; EtherType in RC; Max_Block in RTS
    bufx: int = 0
    offset: int = 0
    sync: int = 0
    b_num: int = 0
    d_id: int = 0
    s_id: int = 0

    @property
    def t_len(self) -> int:
        return (self.sync << 32) | self.b_num

    def with_t_len(self, t_len: int) -> Header:
        return replace(self, sync=t_len >> 32, b_num=t_len & 0xFFFFFFFF)

    def encode(self) -> bytes:
        opflags = (int(self.op) << OP_SHIFT) | ((self.function << FUNCTION_SHIFT) & FUNCTION_MASK) | \
            int(self.flags) | (self.dc & DC_MASK)
        return HEADER.pack(opflags, self.param, self.d_port, self.s_port, self.d_key, self.checksum, self.mx,
                           self.bufx, self.offset, self.sync, self.b_num, self.d_id, self.s_id)


def decode_header(data: Bytes) -> Header:
    if len(data) < HEADER_BYTES:
        raise DecodeError("header", len(data), f"{len(data)} bytes is shorter than the 40-byte header")
    (opflags, param, d_port, s_port, d_key, checksum, mx, bufx, offset, sync, b_num, d_id,
     s_id) = HEADER.unpack_from(data)
    try:
        op = Op(opflags >> OP_SHIFT)
    except ValueError:
        raise DecodeError("Op", 0, f"undefined opcode {opflags >> OP_SHIFT:#04x}") from None
    function = (opflags & FUNCTION_MASK) >> FUNCTION_SHIFT
    if op is Op.GET:
        if function not in Function._value2member_map_:
            raise DecodeError("Function", 0, f"reserved GET function {function}")
    elif function:
        raise DecodeError("Function", 0, f"function bits set on {op.name}")
    return Header(op, Flag(opflags & FLAG_BITS), function, opflags & DC_MASK, param, d_port, s_port, d_key,
                  checksum, mx, bufx, offset, sync, b_num, d_id, s_id)


def checksum(data: bytes) -> int:
    """RFC 1071 one's-complement sum; 0 is sent as 0xFFFF (0 means 'not computed')."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f">{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    value = ~total & 0xFFFF
    return value or 0xFFFF


def verify_checksum(packet: Bytes) -> bool:
    (stored,) = struct.unpack_from(">H", packet, 12)
    if stored == 0:  # "not computed" (what stpd sends): the packet is never copied
        return True
    data = bytes(packet)
    return bool(checksum(data[:12] + b"\0\0" + data[14:]) == stored)


def encode_options(options: list[tuple[int, bytes]]) -> bytes:
    out = b"".join(bytes((t, len(v) + 2)) + v for t, v in options)
    if len(out) > MAX_OPTION_BYTES:
        raise ValueError(f"options take {len(out)} bytes, more than {MAX_OPTION_BYTES}")
    return out


def decode_options(data: Bytes, base: int = HEADER_BYTES) -> list[tuple[int, bytes]]:
    if len(data) > MAX_OPTION_BYTES:
        raise DecodeError("options", base, f"{len(data)} bytes of options, more than {MAX_OPTION_BYTES}")
    out, i = [], 0
    while i < len(data):
        t = data[i]
        if t == OPT_END:
            break
        if i + 1 >= len(data):
            raise DecodeError("option length", base + i + 1, "truncated option")
        length = data[i + 1]
        if length < 2 or i + length > len(data):
            raise DecodeError("option length", base + i + 1, f"option length {length} does not fit")
        out.append((t, bytes(data[i + 2 : i + length])))
        i += length
    return out


def error_code_option(code: int) -> tuple[int, bytes]:
    return OPT_ERROR_CODE, struct.pack(">H", code)


def reason_of(options: list[tuple[int, bytes]]) -> int | None:
    for t, v in options:
        if t == OPT_ERROR_CODE and len(v) == 2:
            return int.from_bytes(v, "big")
    return None


def decode(packet: Bytes) -> tuple[Header, Bytes]:
    """Header and what follows it: the options of a control op (bytes), the STU of a
    DATA (a memoryview into ``packet``, not a copy: valid while ``packet`` is)."""
    h = decode_header(packet)
    if not verify_checksum(packet):
        raise DecodeError("Checksum", 12, "checksum mismatch")
    if h.op is Op.DATA:
        return h, memoryview(packet).cast("B")[HEADER_BYTES:]
    rest = bytes(packet[HEADER_BYTES:])
    if rest:
        decode_options(rest)
    return h, rest
