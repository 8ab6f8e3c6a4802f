"""Subnet administration records: PathRecord (64 bytes) and MCMemberRecord (52 bytes)
[OSM ib_path_rec_t / ib_member_rec_t as the spec lists them, 2.7], and their
component-mask bits (IBA numbering, from memory: unverified here)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

PATH_RECORD_BYTES = 64
MCMEMBER_RECORD_BYTES = 52
SELECTOR_EXACTLY = 2  # 2-bit selector in MTU/rate/lifetime bytes (IBA)

# PathRecord component mask bits
PR_DGID, PR_SGID, PR_DLID, PR_SLID = 1 << 2, 1 << 3, 1 << 4, 1 << 5
PR_TCLASS, PR_NUMB_PATH, PR_PKEY = 1 << 10, 1 << 12, 1 << 13
PR_IPOIB_QUERY = PR_DGID | PR_SGID | PR_NUMB_PATH | PR_TCLASS | PR_PKEY  # what Linux sends [LNX]
# MCMemberRecord component mask bits
MC_MGID, MC_PORT_GID, MC_QKEY, MC_MLID, MC_MTU, MC_TCLASS, MC_PKEY, MC_RATE = (1 << 0, 1 << 1, 1 << 2, 1 << 3,
                                                                              1 << 5, 1 << 6, 1 << 7, 1 << 9)
MC_SL, MC_FLOW, MC_HOP, MC_SCOPE, MC_JOIN_STATE = 1 << 12, 1 << 13, 1 << 14, 1 << 15, 1 << 16
MC_BROADCAST_JOIN = MC_MGID | MC_PORT_GID | MC_PKEY | MC_JOIN_STATE  # learns the rest [LNX]

JOIN_FULL, JOIN_NON_MEMBER, JOIN_SENDONLY_NON, JOIN_SENDONLY_FULL = 1, 2, 4, 8  # [LNX; IBA]

_PR = struct.Struct("!Q16s16sHHIBBHHBBBB6x")
_MC = struct.Struct("!16s16sIHBBHBBIBB2x")
assert _PR.size == PATH_RECORD_BYTES and _MC.size == MCMEMBER_RECORD_BYTES


def _sel(value: int) -> int:
    return (SELECTOR_EXACTLY << 6) | (value & 0x3F)


@dataclass(frozen=True)
class PathRecord:
    dgid: bytes
    sgid: bytes
    dlid: int = 0
    slid: int = 0
    pkey: int = 0
    sl: int = 0
    mtu: int = 0  # IB MTU enum
    rate: int = 0
    packet_lifetime: int = 0
    tclass: int = 0
    flow_label: int = 0
    hop_limit: int = 0
    reversible: bool = True
    num_path: int = 1
    service_id: int = 0
    preference: int = 0

    def encode(self) -> bytes:
        hop_flow = (self.flow_label & 0xFFFFF) << 8 | (self.hop_limit & 0xFF)
        return _PR.pack(self.service_id, self.dgid, self.sgid, self.dlid, self.slid, hop_flow, self.tclass,
                        (0x80 if self.reversible else 0) | (self.num_path & 0x7F), self.pkey, self.sl & 0xF,
                        _sel(self.mtu), _sel(self.rate), _sel(self.packet_lifetime), self.preference)

    @classmethod
    def decode(cls, b: bytes) -> PathRecord:
        if len(b) < PATH_RECORD_BYTES:
            raise ValueError("PathRecord: short")
        (sid, dgid, sgid, dlid, slid, hf, tc, np, pkey, qsl, mtu, rate, life, pref) = _PR.unpack_from(b)
        return cls(dgid, sgid, dlid, slid, pkey, qsl & 0xF, mtu & 0x3F, rate & 0x3F, life & 0x3F, tc,
                   (hf >> 8) & 0xFFFFF, hf & 0xFF, bool(np & 0x80), np & 0x7F, sid, pref)


@dataclass(frozen=True)
class MCMemberRecord:
    mgid: bytes
    port_gid: bytes
    qkey: int = 0
    mlid: int = 0
    mtu: int = 0
    tclass: int = 0
    pkey: int = 0
    rate: int = 0
    packet_lifetime: int = 0
    sl: int = 0
    flow_label: int = 0
    hop_limit: int = 0
    scope: int = 0
    join_state: int = 0
    proxy_join: bool = False

    def encode(self) -> bytes:
        sfh = (self.sl & 0xF) << 28 | (self.flow_label & 0xFFFFF) << 8 | (self.hop_limit & 0xFF)
        return _MC.pack(self.mgid, self.port_gid, self.qkey, self.mlid, _sel(self.mtu), self.tclass, self.pkey,
                        _sel(self.rate), _sel(self.packet_lifetime), sfh,
                        (self.scope & 0xF) << 4 | (self.join_state & 0xF), 0x80 if self.proxy_join else 0)

    @classmethod
    def decode(cls, b: bytes) -> MCMemberRecord:
        if len(b) < MCMEMBER_RECORD_BYTES:
            raise ValueError("MCMemberRecord: short")
        mgid, pgid, qkey, mlid, mtu, tc, pkey, rate, life, sfh, ss, pj = _MC.unpack_from(b)
        return cls(mgid, pgid, qkey, mlid, mtu & 0x3F, tc, pkey, rate & 0x3F, life & 0x3F, sfh >> 28,
                   (sfh >> 8) & 0xFFFFF, sfh & 0xFF, ss >> 4, ss & 0xF, bool(pj & 0x80))
