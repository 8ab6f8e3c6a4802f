"""Frames on gsnd's ULP socket (Unix SOCK_SEQPACKET, one frame per packet).

Every frame starts with a 10-byte header, big-endian (PROJECT CHOICE):

====== ==== ==================================================================
offset size field
====== ==== ==================================================================
0      1    op: 1 BIND, 2 UNBIND, 3 SEND, 4 RECV, 5 STATUS, 6 ERROR
1      1    vc: the GSN VC (SEND/RECV); STATUS: 1 = link up and ULA known
2      2    EtherType (BIND, UNBIND, SEND, RECV)
4      6    ULA: SEND destination, RECV source, STATUS the port's own ULA
====== ==== ==================================================================

The payload follows (SEND/RECV: the Message payload after LLC/SNAP; ERROR: a
UTF-8 reason).  A client BINDs the EtherTypes it wants, then SENDs and receives
RECV frames; gsnd sends STATUS on BIND and whenever link state or ULA change.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from .errors import DecodeError

HEADER = struct.Struct("!BBH6s")


class Op(enum.IntEnum):
    BIND = 1
    UNBIND = 2
    SEND = 3
    RECV = 4
    STATUS = 5
    ERROR = 6


@dataclass(frozen=True)
class Frame:
    op: Op
    vc: int = 0
    ethertype: int = 0
    ula: bytes = bytes(6)
    payload: bytes = b""

    def encode(self) -> bytes:
        return HEADER.pack(self.op, self.vc, self.ethertype, self.ula) + bytes(self.payload)

    @classmethod
    def decode(cls, data) -> "Frame":
        if len(data) < HEADER.size:
            raise DecodeError("ulp", len(data), f"frame of {len(data)} bytes is shorter than the header")
        op, vc, ethertype, ula = HEADER.unpack_from(data)
        try:
            op = Op(op)
        except ValueError:
            raise DecodeError("op", 0, f"unknown op {op}") from None
        if vc > 3:
            raise DecodeError("vc", 1, f"VC {vc} out of range 0..3")
        return cls(op, vc, ethertype, bytes(ula), bytes(data[HEADER.size :]))
