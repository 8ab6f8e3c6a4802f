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
UTF-8 reason).  An empty packet is a malformed frame, not the end of the
connection.  A client BINDs the EtherTypes it wants, then SENDs and receives
RECV frames; gsnd sends STATUS on BIND and whenever link state or ULA change.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from ..constants import ULP_NOTICE_PROTOCOL
from .errors import DecodeError

from .buffers import Bytes

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
    def decode(cls, data: Bytes) -> Frame:
        op, vc, ethertype, ula = decode_header(data, len(data))
        return cls(op, vc, ethertype, bytes(ula), bytes(data[HEADER.size :]))


def decode_header(data: Bytes, n: int) -> tuple[Op, int, int, bytes]:
    """(op, VC, EtherType, ULA) of the n-byte frame at the start of data, checked."""
    if n < HEADER.size:
        raise DecodeError("ulp", n, f"frame of {n} bytes is shorter than the header")
    op, vc, ethertype, ula = HEADER.unpack_from(data)
    try:
        op = Op(op)
    except ValueError:
        raise DecodeError("op", 0, f"unknown op {op}") from None
    if vc > 3:
        raise DecodeError("vc", 1, f"VC {vc} out of range 0..3")
    return op, vc, ethertype, ula


# --- drop notice, gsnd -> gsnd over the fabric (PROJECT CHOICE) -----------------
#
# A Message on VC0 with EtherType 0x88B7 (IEEE 802 OUI-extended), payload:
# protocol(5) = 02-47-53-00-01, version(1) = 1, reason(1), vc(1) and EtherType(2)
# of the dropped Messages, count(4).  The Message's source ULA is the receiving
# port that dropped them.

NOTICE = struct.Struct("!5sBBBHI")
NOTICE_VERSION = 1


class DropReason(enum.IntEnum):
    NOT_READING = 1  # the bound client read nothing for ULP_HOLD_S
    CLIENT_GONE = 2  # the client closed its socket with Messages waiting


@dataclass(frozen=True)
class DropNotice:
    reason: DropReason
    vc: int
    ethertype: int
    count: int

    def encode(self) -> bytes:
        return NOTICE.pack(ULP_NOTICE_PROTOCOL, NOTICE_VERSION, self.reason, self.vc, self.ethertype, self.count)

    @classmethod
    def decode(cls, data: Bytes) -> DropNotice:
        if len(data) != NOTICE.size:
            raise DecodeError("notice", 0, f"{len(data)} bytes, not {NOTICE.size}")
        proto, version, reason, vc, ethertype, count = NOTICE.unpack(data)
        if proto != ULP_NOTICE_PROTOCOL:
            raise DecodeError("protocol", 0, f"protocol id {proto.hex()} is not ours")
        if version != NOTICE_VERSION:
            raise DecodeError("version", 5, f"version {version}")
        try:
            reason = DropReason(reason)
        except ValueError:
            raise DecodeError("reason", 6, f"unknown reason {reason}") from None
        if vc > 3:
            raise DecodeError("vc", 7, f"VC {vc} out of range 0..3")
        if count == 0:
            raise DecodeError("count", 10, "a notice of 0 drops")
        return cls(reason, vc, ethertype, count)
