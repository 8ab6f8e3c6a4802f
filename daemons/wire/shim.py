"""The UDP cable shim: the header in front of every batch of micropackets.

Layout (PROJECT CHOICE, 32 bytes, big-endian):

====== ==== =====================================================================
offset size field
====== ==== =====================================================================
0      2    magic 0x4753 ("GS")
2      1    version (1)
3      1    flags: bit 0 = the micropackets are sequenced (wide sequence below)
4      4    cable id (both ends of a cable are configured with the same one)
8      4    source nonce: the sender's link-reset nonce
12     4    destination nonce: the receiver's nonce as the sender knows it
16     8    seq: wide sequence number of the first micropacket (TSEQ = low 8 bits)
24     8    ack: wide cumulative ack, next sequence expected (RSEQ = (ack-1) low 8 bits)
====== ==== =====================================================================

The micropackets follow, 40 bytes each.  A sequenced batch holds only
HEADER/DATA/ADMIN/CREDIT micropackets with consecutive sequence numbers; an
unsequenced one holds only NULL/RESET/RESET_ACK/INIT/INIT_ACK.  A NULL's data bytes
(zeros otherwise) may carry the receiver's SACK ranges, offsets from ``ack``
(daemons/link/link.py, README "Loss recovery on the cable"); the shim is unchanged.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..constants import MAX_DATAGRAM_MPS, MP_BYTES, SHIM_BYTES, SHIM_FLAG_SEQUENCED, SHIM_MAGIC, SHIM_VERSION
from .errors import DecodeError

from .buffers import Bytes

_SHIM = struct.Struct("!HBBIIIQQ")
assert _SHIM.size == SHIM_BYTES


@dataclass(frozen=True)
class Shim:
    flags: int
    cable_id: int
    src_nonce: int
    dst_nonce: int
    seq: int
    ack: int

    @property
    def sequenced(self) -> bool:
        return bool(self.flags & SHIM_FLAG_SEQUENCED)

    def encode(self) -> bytes:
        return _SHIM.pack(SHIM_MAGIC, SHIM_VERSION, self.flags, self.cable_id, self.src_nonce, self.dst_nonce,
                          self.seq, self.ack)


def decode_datagram(datagram: Bytes) -> tuple[Shim, int]:
    """Validate a datagram's shim; return it and the number of micropackets."""
    if len(datagram) < SHIM_BYTES:
        raise DecodeError("shim", len(datagram), f"datagram of {len(datagram)} bytes is shorter than the shim")
    magic, version, flags, cable, src, dst, seq, ack = _SHIM.unpack_from(datagram)
    if magic != SHIM_MAGIC:
        raise DecodeError("magic", 0, f"{magic:#06x} is not {SHIM_MAGIC:#06x}")
    if version != SHIM_VERSION:
        raise DecodeError("version", 2, f"unsupported version {version}")
    if flags & ~SHIM_FLAG_SEQUENCED:
        raise DecodeError("flags", 3, f"unknown flag bits {flags:#04x}")
    body = len(datagram) - SHIM_BYTES
    if body % MP_BYTES:
        raise DecodeError("micropackets", SHIM_BYTES + body - body % MP_BYTES, "truncated micropacket")
    count = body // MP_BYTES
    if count == 0 or count > MAX_DATAGRAM_MPS:
        raise DecodeError("micropackets", SHIM_BYTES, f"{count} micropackets (1..{MAX_DATAGRAM_MPS} allowed)")
    return Shim(flags, cable, src, dst, seq, ack), count
