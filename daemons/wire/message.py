"""GSN Messages: HEADER micropacket (MAC header + LLC/SNAP + 8 payload bytes),
DATA micropackets, zero fill, TAIL, ECRC.

The message is one byte stream starting with the 16-byte MAC header; HEADER holds
stream bytes 0-31 and DATA micropacket k holds bytes 32k..32k+31 (spec §3).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

import daemons._fastpath as _fastpath
from .buffers import Bytes
from ..constants import (
    LLC_SNAP_BYTES,
    LLC_SNAP_PREFIX,
    M_LEN_MAX,
    MAC_HEADER_BYTES,
    MP_DATA_BYTES,
    NUM_VCS,
    VC_MAX_DATA_MPS,
    MpType,
)
from .crc import block_crc0, running_crc
from .errors import DecodeError
from .micropacket import MP_DTYPE, lcrc_from_blocks

_MAC = struct.Struct("!6s6sI")
_PREFIX = MAC_HEADER_BYTES + LLC_SNAP_BYTES  # payload starts at stream offset 24
_U64 = np.uint64


def mps_for(m_len: int) -> int:
    """Micropackets in a Message whose M_len is ``m_len`` (HEADER included)."""
    return -(-(MAC_HEADER_BYTES + m_len) // MP_DATA_BYTES)


def max_m_len(vc: int) -> int:
    """Largest M_len on ``vc`` (spec §2): 16 + 32 x the VC's DATA micropacket limit,
    i.e. ``16 + M_len <= 32 * (1 + limit)``; VC3 is capped by the 32-bit field."""
    return min(MAC_HEADER_BYTES + MP_DATA_BYTES * VC_MAX_DATA_MPS[vc], M_LEN_MAX)


def max_payload(vc: int) -> int:
    """Largest payload (bytes after LLC/SNAP, the 8 in the HEADER included) on ``vc``:
    M_len counts LLC/SNAP + payload (spec §3.1).  VC0 2,184; VC1/VC2 131,208."""
    return max_m_len(vc) - LLC_SNAP_BYTES


@dataclass(frozen=True)
class MessageHeader:
    d_ula: bytes
    s_ula: bytes
    m_len: int
    ethertype: int

    @classmethod
    def decode(cls, data: Bytes) -> MessageHeader:
        if len(data) < _PREFIX:
            raise DecodeError("header", len(data), "shorter than MAC header + LLC/SNAP")
        d_ula, s_ula, m_len = _MAC.unpack_from(data)
        if m_len < LLC_SNAP_BYTES:
            raise DecodeError("M_len", 12, f"{m_len} is shorter than the LLC/SNAP header")
        if bytes(data[16:22]) != LLC_SNAP_PREFIX:
            raise DecodeError("LLC/SNAP", 16, "not AA-AA-03-00-00-00")
        (ethertype,) = struct.unpack_from("!H", data, 22)
        return cls(bytes(d_ula), bytes(s_ula), m_len, ethertype)


@dataclass(frozen=True)
class Message:
    vc: int
    d_ula: bytes
    s_ula: bytes
    ethertype: int
    payload: bytes

    def stream(self) -> bytearray:
        """The padded byte stream (HEADER + DATA micropacket data areas)."""
        return encode_stream(self.vc, self.d_ula, self.s_ula, self.ethertype, self.payload)

    def records(self) -> np.ndarray:
        return stream_records(self.vc, self.stream())


def encode_stream(vc: int, d_ula: bytes, s_ula: bytes, ethertype: int, payload: Bytes) -> bytearray:
    if not 0 <= vc < NUM_VCS:
        raise ValueError(f"VC {vc} out of range 0..3")
    if len(d_ula) != 6 or len(s_ula) != 6:
        raise ValueError("ULAs are 6 bytes")
    if len(payload) > max_payload(vc):
        raise ValueError(f"payload of {len(payload)} bytes exceeds the VC{vc} limit of {max_payload(vc)}")
    m_len = LLC_SNAP_BYTES + len(payload)
    buf = bytearray(mps_for(m_len) * MP_DATA_BYTES)
    _MAC.pack_into(buf, 0, d_ula, s_ula, m_len)
    buf[16:22] = LLC_SNAP_PREFIX
    struct.pack_into("!H", buf, 22, ethertype)
    buf[_PREFIX : _PREFIX + len(payload)] = payload
    return buf


def stream_records(vc: int, stream: Bytes, first_type: int = MpType.HEADER) -> np.ndarray:
    """Micropackets for a whole padded stream: types, TAIL, ECRC and LCRC set,
    link fields (VCR/CR/RSEQ/TSEQ) zero.  Compiled: copy, ECRC and LCRC in one pass
    per 32-byte block (:func:`daemons._fastpath.encode`)."""
    if len(stream) % MP_DATA_BYTES:
        raise ValueError(f"stream of {len(stream)} bytes is not padded to {MP_DATA_BYTES}")
    recs = np.empty(len(stream) // MP_DATA_BYTES, MP_DTYPE)
    _fastpath.encode(stream, b"", recs, vc, first_type)
    return recs


def stream_records_numpy(vc: int, stream: Bytes, first_type: int = MpType.HEADER) -> np.ndarray:
    """numpy oracle of :func:`stream_records` (tests only).  Vectorised: no loop per
    micropacket."""
    blocks = np.frombuffer(stream, np.uint8).reshape(-1, MP_DATA_BYTES)
    n = len(blocks)
    recs = np.empty(n, MP_DTYPE)
    recs["data"] = blocks
    b0 = block_crc0(blocks)
    ecrc = running_crc(b0)
    ctrl = np.full(n, (vc << 62) | (int(MpType.DATA) << 58), _U64)
    ctrl[0] = (vc << 62) | (int(first_type) << 58)
    ctrl[-1] |= _U64(1 << 57)
    ctrl |= ecrc.astype(_U64) << _U64(16)
    ctrl |= lcrc_from_blocks(b0, ctrl).astype(_U64)
    recs["ctrl"] = ctrl
    return recs


def single_records(vc: int, mp_type: int, data32: bytes) -> np.ndarray:
    """A one-micropacket Message (Admin): TAIL = 1, ECRC = CRC of its 32 bytes."""
    return stream_records(vc, data32, first_type=mp_type)


def decode_stream(vc: int, stream: Bytes, mps: int | None = None) -> Message:
    """Message from a reassembled stream of ``mps`` micropackets' data areas."""
    hdr = MessageHeader.decode(stream)
    count = len(stream) // MP_DATA_BYTES if mps is None else mps
    if mps_for(hdr.m_len) != count:
        raise DecodeError("M_len", 12, f"{hdr.m_len} does not match {count} micropackets")
    if hdr.m_len > max_m_len(vc):  # the same as more than VC_MAX_DATA_MPS DATA micropackets
        raise DecodeError("VC", 0, f"M_len {hdr.m_len} ({count - 1} DATA micropackets) exceeds the VC{vc} limit")
    return Message(vc, hdr.d_ula, hdr.s_ula, hdr.ethertype, bytes(stream[_PREFIX : MAC_HEADER_BYTES + hdr.m_len]))
