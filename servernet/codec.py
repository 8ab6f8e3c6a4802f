"""ServerNet packets (spec §1.3) and their UDP envelope (§1.8).

A packet is ``H | A | D | C``: the 8-byte header, the 4-byte address (requests that
name a target address), the data field (read responses, write and diag requests) and
the CRC-32 over everything before it.  Header bit layout, big-endian, bit 63 first on
the wire (project choice, the sources give only the widths)::

    63..44 DID  43..24 SID  23..16 LEN  15..12 TTYPE  11 RSP  10..7 TID  6 PATH  5 ACK  4..0 RSVD

Every malformed input raises :class:`~daemons.wire.errors.DecodeError` whose ``field``
names the receiver's drop reason (``crc``, ``len``, ``ttype``, ...).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from daemons.wire.buffers import Bytes
from daemons.wire.errors import DecodeError

from .constants import (ADDRESS_BYTES, CRC_BYTES, ENVELOPE_BYTES, ENVELOPE_MAGIC, ENVELOPE_VERSION, FLAG_FABRIC,
                        FLAG_II, FLAG_TPB, FLAGS_KNOWN, HEADER_BYTES, ID_MAX, LEN_UNIT_II, MAX_DATA, MAX_DATA_II,
                        ROUTE_BYTES,
                        TID_COUNT, Fabric, TType)

_HDR = struct.Struct(">Q")
_ENV = struct.Struct(">HBB")
_CRC = struct.Struct(">I")
_ENV_HDR = struct.Struct(">HBBQ")  # envelope and header in one pack (datagram())
_ENV_HDR_ADDR = struct.Struct(">HBBQI")
MIN_PACKET = HEADER_BYTES + CRC_BYTES
KNOWN_TTYPES = frozenset(int(t) for t in TType)


def has_address(rsp: bool) -> bool:
    """Every request names a target address; no response does."""
    return not rsp


def has_data(ttype: int, rsp: bool) -> bool:
    return (rsp and ttype == TType.READ) or (not rsp and ttype in (TType.WRITE, TType.DIAG))


def max_data(ii: bool) -> int:
    return MAX_DATA_II if ii else MAX_DATA


@dataclass(slots=True)  # not frozen: a frozen dataclass pays object.__setattr__ per field on every packet
class Packet:
    did: int
    sid: int
    ttype: int
    rsp: bool
    tid: int
    path: int = Fabric.X
    ack: bool = False
    address: int | None = None  # requests only
    data: bytes = b""  # read responses, write and diag requests
    length: int = 0  # bytes asked for by a read request (0 in every other packet)
    ii: bool = False  # ServerNet II mode: LEN in 8-byte units, up to 512 bytes

    @property
    def size(self) -> int:
        return MIN_PACKET + (ADDRESS_BYTES if self.address is not None else 0) + len(self.data)

    def encode(self) -> bytes:
        """The packet on the wire, CRC appended; ValueError for a packet the format cannot hold."""
        if not (0 <= self.did <= ID_MAX and 0 <= self.sid <= ID_MAX):
            raise ValueError("DID and SID are 20-bit")
        if self.ttype not in KNOWN_TTYPES or (self.rsp and self.ttype == TType.DIAG):
            raise ValueError(f"no packet of type {self.ttype:#x} rsp={self.rsp}")
        if not 0 <= self.tid < TID_COUNT or self.path not in (0, 1):
            raise ValueError("TID is 4-bit, PATH 1-bit")
        if self.ack and not self.rsp:
            raise ValueError("ACK is meaningful only in responses")
        if (self.address is not None) != has_address(self.rsp):
            raise ValueError("requests carry an address, responses do not")
        if self.address is not None and not 0 <= self.address <= 0xFFFFFFFF:
            raise ValueError("the address is 32-bit")
        reads = self.ttype == TType.READ and not self.rsp
        if self.length and not reads:
            raise ValueError("only a read request asks for a length")
        length = self.length if reads else len(self.data)
        if self.data and not has_data(self.ttype, self.rsp):
            raise ValueError("this packet type carries no data")
        if self.ttype == TType.BARRIER and length:
            raise ValueError("a BARRIER has LEN 0")
        if length > max_data(self.ii) or (self.ii and length % LEN_UNIT_II):
            raise ValueError(f"data length {length} is not supported")
        if self.ttype == TType.WRITE and self.rsp and length:
            raise ValueError("a write response carries no data")
        field_len = length // LEN_UNIT_II if self.ii else length
        word = ((self.did << 44) | (self.sid << 24) | (field_len << 16) | (self.ttype << 12) | (int(self.rsp) << 11)
                | (self.tid << 7) | (self.path << 6) | (int(self.ack) << 5))
        body = _HDR.pack(word) + (b"" if self.address is None else self.address.to_bytes(4, "big")) + self.data
        return body + _CRC.pack(zlib.crc32(body))


def encode_datagram(did: int, sid: int, ttype: int, rsp: bool, tid: int, path: int, ack: bool, address: int | None,
             data: bytes, length: int, ii: bool) -> bytes:
    """``envelope(Packet(...).encode(), path, ii=ii)`` without Packet's checks: the node's
    own BTE and AVT build only valid packets, and build one per transaction."""
    n = length if (ttype == TType.READ and not rsp) else len(data)
    word = ((did << 44) | (sid << 24) | ((n // LEN_UNIT_II if ii else n) << 16) | (ttype << 12) | (rsp << 11)
            | (tid << 7) | (path << 6) | (ack << 5))
    flags = path | (FLAG_II if ii else 0)
    if address is None:
        head = _ENV_HDR.pack(ENVELOPE_MAGIC, ENVELOPE_VERSION, flags, word)
    else:
        head = _ENV_HDR_ADDR.pack(ENVELOPE_MAGIC, ENVELOPE_VERSION, flags, word, address)
    crc = zlib.crc32(data, zlib.crc32(memoryview(head)[ENVELOPE_BYTES:]))
    return head + data + _CRC.pack(crc)


def crc_ok(raw: Bytes) -> bool:
    """The trailing CRC-32 matches everything before it (what a router checks)."""
    return len(raw) >= MIN_PACKET and _CRC.unpack_from(raw, len(raw) - CRC_BYTES)[0] == zlib.crc32(
        memoryview(raw)[:-CRC_BYTES])


def did_of(raw: bytes) -> int:
    """The DID from the first 3 bytes (all a router reads to choose the port)."""
    if len(raw) < ROUTE_BYTES:
        raise DecodeError("did", len(raw), "shorter than the 3 bytes holding the DID")
    return int.from_bytes(raw[:ROUTE_BYTES], "big") >> 4


def decode(raw: Bytes, ii: bool = False) -> Packet:
    n = len(raw)
    if n < MIN_PACKET:
        raise DecodeError("short", n, f"{n} bytes is shorter than header + CRC ({MIN_PACKET})")
    if not crc_ok(raw):
        raise DecodeError("crc", n - CRC_BYTES, "CRC-32 does not match")
    (word,) = _HDR.unpack_from(raw)
    did, sid = word >> 44, (word >> 24) & ID_MAX
    field_len, ttype = (word >> 16) & 0xFF, (word >> 12) & 0xF
    rsp, tid, path, ack = bool(word >> 11 & 1), (word >> 7) & 0xF, (word >> 6) & 1, bool(word >> 5 & 1)
    if ttype not in KNOWN_TTYPES:
        raise DecodeError("ttype", 6, f"transaction type {ttype:#x} is not supported")
    if rsp and ttype == TType.DIAG:
        raise DecodeError("ttype", 6, "a DIAG has no response")
    if ack and not rsp:
        raise DecodeError("ack", 7, "ACK set in a request")
    length = field_len * LEN_UNIT_II if ii else field_len
    if length > max_data(ii):
        raise DecodeError("len", 5, f"length {length} is not supported (max {max_data(ii)})")
    if ttype == TType.BARRIER and length:
        raise DecodeError("len", 5, "a BARRIER has LEN 0")
    if ttype == TType.WRITE and rsp and length:
        raise DecodeError("len", 5, "a write response carries no data")
    addr = has_address(rsp)
    data_len = length if has_data(ttype, rsp) else 0
    want = MIN_PACKET + (ADDRESS_BYTES if addr else 0) + data_len
    if n != want:
        raise DecodeError("len", n, f"{n} bytes, the header says {want}")
    off = HEADER_BYTES
    address = None
    if addr:
        address = int.from_bytes(raw[off:off + ADDRESS_BYTES], "big")
        off += ADDRESS_BYTES
    data = bytes(raw[off:off + data_len])
    asked = length if (ttype == TType.READ and not rsp) else 0
    return Packet(did, sid, ttype, rsp, tid, path, ack, address, data, asked, ii)


@dataclass(slots=True)
class Envelope:
    fabric: int
    tpb: bool
    ii: bool
    packet: bytes


def envelope(packet: bytes, fabric: int, *, tpb: bool = False, ii: bool = False) -> bytes:
    flags = (FLAG_FABRIC if fabric else 0) | (FLAG_TPB if tpb else 0) | (FLAG_II if ii else 0)
    return _ENV.pack(ENVELOPE_MAGIC, ENVELOPE_VERSION, flags) + packet


def open_envelope(datagram: bytes) -> Envelope:
    n = len(datagram)
    if n < ENVELOPE_BYTES:
        raise DecodeError("envelope", n, "shorter than the 4-byte envelope")
    magic, ver, flags = _ENV.unpack_from(datagram)
    if magic != ENVELOPE_MAGIC:
        raise DecodeError("envelope", 0, f"magic {magic:#06x} is not 0x534e")
    if ver != ENVELOPE_VERSION:
        raise DecodeError("envelope", 2, f"version {ver} is not {ENVELOPE_VERSION}")
    if flags & ~FLAGS_KNOWN:
        raise DecodeError("envelope", 3, f"unknown flags {flags:#04x}")
    ii = bool(flags & FLAG_II)
    if n - ENVELOPE_BYTES > MIN_PACKET + ADDRESS_BYTES + max_data(ii):
        raise DecodeError("len", n, f"a {n}-byte datagram is longer than any packet")
    return Envelope(flags & FLAG_FABRIC, bool(flags & FLAG_TPB), ii, bytes(datagram[ENVELOPE_BYTES:]))
