"""Management datagrams between ports, switches and the subnet manager (spec 2.11: an
"sm" process on a fixed UDP port; REGISTER, PATH_GET, MC_JOIN, MC_LEAVE, REREGISTER).
Layout, kinds and status codes are project choices:

    magic 'IM' | version u8 | kind u8 | status u16 | reserved u16 | TID u64 | SM epoch u64 | body

The epoch is the SM's start identity: a port that sees it change re-registers,
re-joins its groups and marks its paths invalid (client reregister).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

from .constants import MAX_LFT_ENTRIES, MAX_SWITCH_PORTS, MGMT_MAGIC, MGMT_VERSION

MAGIC, VERSION = MGMT_MAGIC, MGMT_VERSION
_HDR = struct.Struct("!2sBBHxxQQ")
HEADER_BYTES = _HDR.size  # 24


class Kind(enum.IntEnum):
    REGISTER = 1
    REGISTER_REPLY = 2
    PATH_GET = 3
    PATH_REPLY = 4
    MC_JOIN = 5
    MC_LEAVE = 6
    MC_REPLY = 7
    SWITCH_REPORT = 8
    SET_LFT = 9
    SET_MFT = 10


class Status(enum.IntEnum):
    OK = 0
    NO_RECORDS = 1  # no path / no such group
    REQ_INVALID = 2  # malformed or not allowed (e.g. a partition the port is not in)
    NO_RESOURCES = 3
    NOT_REGISTERED = 4


class MgmtError(ValueError):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Mgmt:
    kind: Kind
    tid: int = 0
    epoch: int = 0
    status: Status = Status.OK
    body: bytes = b""

    def encode(self) -> bytes:
        return _HDR.pack(MAGIC, VERSION, self.kind, self.status, self.tid, self.epoch) + self.body


def decode(data: bytes) -> Mgmt:
    if len(data) < HEADER_BYTES:
        raise MgmtError("runt")
    magic, ver, kind, status, tid, epoch = _HDR.unpack_from(data)
    if magic != MAGIC:
        raise MgmtError("bad_magic")
    if ver != VERSION:
        raise MgmtError("bad_version")
    try:
        k, s = Kind(kind), Status(status)
    except ValueError:
        raise MgmtError("bad_kind") from None
    return Mgmt(k, tid, epoch, s, bytes(data[HEADER_BYTES:]))


# --- bodies -----------------------------------------------------------------------
_REG = struct.Struct("!QQ")
_REG_REPLY = struct.Struct("!HHQBB")
_MASK = struct.Struct("!Q")


def register_body(port_guid: int, node_guid: int) -> bytes:
    return _REG.pack(port_guid, node_guid)


def parse_register(body: bytes) -> tuple[int, int]:
    if len(body) != _REG.size:
        raise MgmtError("bad_register")
    return _REG.unpack(body)


@dataclass(frozen=True)
class PortInfo:
    """What the SM tells a registered port: its LID, the SM's LID, the GID prefix, its
    P_Key table (index 0 first) and ClientReregister (the SM holds nothing of the port:
    join again and query paths afresh)."""

    lid: int
    sm_lid: int
    gid_prefix: int
    pkeys: tuple[int, ...]
    reregister: bool = False

    def encode(self) -> bytes:
        return _REG_REPLY.pack(self.lid, self.sm_lid, self.gid_prefix, int(self.reregister), len(self.pkeys)) + b"".join(
            p.to_bytes(2, "big") for p in self.pkeys)

    @classmethod
    def decode(cls, body: bytes) -> PortInfo:
        if len(body) < _REG_REPLY.size:
            raise MgmtError("bad_port_info")
        lid, sm_lid, prefix, rereg, n = _REG_REPLY.unpack_from(body)
        if len(body) != _REG_REPLY.size + 2 * n or rereg > 1:
            raise MgmtError("bad_port_info")
        o = _REG_REPLY.size
        return cls(lid, sm_lid, prefix, tuple(int.from_bytes(body[o + 2 * i:o + 2 * i + 2], "big") for i in range(n)),
                   bool(rereg))


def masked_body(mask: int, record: bytes) -> bytes:
    return _MASK.pack(mask) + record


def parse_masked(body: bytes, size: int) -> tuple[int, bytes]:
    if len(body) != _MASK.size + size:
        raise MgmtError("bad_record")
    return _MASK.unpack_from(body)[0], body[_MASK.size:]


PEER_NONE, PEER_CA, PEER_SWITCH = 0, 1, 2
_SW_HDR = struct.Struct("!QIIB")
_SW_PORT = struct.Struct("!BQBB")


@dataclass(frozen=True)
class SwitchReport:
    guid: int
    lft_version: int
    mft_version: int
    ports: tuple[tuple[int, int, int, int], ...] = field(default=())  # (port, peer guid, peer port, peer kind)

    def encode(self) -> bytes:
        return _SW_HDR.pack(self.guid, self.lft_version, self.mft_version, len(self.ports)) + b"".join(
            _SW_PORT.pack(*p) for p in self.ports)

    @classmethod
    def decode(cls, body: bytes) -> SwitchReport:
        if len(body) < _SW_HDR.size:
            raise MgmtError("bad_switch_report")
        guid, lv, mv, n = _SW_HDR.unpack_from(body)
        if n > MAX_SWITCH_PORTS or len(body) != _SW_HDR.size + n * _SW_PORT.size:
            raise MgmtError("bad_switch_report")
        ports = tuple(_SW_PORT.unpack_from(body, _SW_HDR.size + i * _SW_PORT.size) for i in range(n))
        if any(p[3] > PEER_SWITCH or not 0 < p[0] < MAX_SWITCH_PORTS for p in ports):
            raise MgmtError("bad_switch_report")
        return cls(guid, lv, mv, ports)


_TBL = struct.Struct("!IH")
_LFT = struct.Struct("!HB")
_MFT = struct.Struct("!HQ")


def encode_lft(version: int, table: dict[int, int]) -> bytes:
    return _TBL.pack(version, len(table)) + b"".join(_LFT.pack(lid, port) for lid, port in sorted(table.items()))


def decode_lft(body: bytes) -> tuple[int, dict[int, int]]:
    return _decode_table(body, _LFT)


def encode_mft(version: int, table: dict[int, int]) -> bytes:
    return _TBL.pack(version, len(table)) + b"".join(_MFT.pack(lid, mask) for lid, mask in sorted(table.items()))


def decode_mft(body: bytes) -> tuple[int, dict[int, int]]:
    return _decode_table(body, _MFT)


def _decode_table(body: bytes, entry: struct.Struct) -> tuple[int, dict[int, int]]:
    if len(body) < _TBL.size:
        raise MgmtError("bad_table")
    version, n = _TBL.unpack_from(body)
    if n > MAX_LFT_ENTRIES or len(body) != _TBL.size + n * entry.size:
        raise MgmtError("bad_table")
    return version, dict(entry.unpack_from(body, _TBL.size + i * entry.size) for i in range(n))
