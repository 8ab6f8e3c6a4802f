"""The SM's partitions file (TOML) and the P_Key tables it gives ports.

    [[partition]]
    name = "storage"
    pkey = 0x8001            # the full bit is implied
    ipoib = true             # create the IPoIB broadcast group (default true)
    all = "limited"          # membership of ports not listed: "full", "limited" or "none" (default "none")
    full = ["0x0002c90300000001"]
    limited = ["0x0002c90300000003"]
    qkey = 0x0b1b  mtu = 4  rate = 3  sl = 0   # broadcast group parameters [OSM defaults]

The default partition 0x7FFF always exists: every port is a full member when there is
no partitions file, otherwise a limited one unless the file says otherwise [OSM].
"""

from __future__ import annotations

from dataclasses import dataclass, field

from daemons.runtime.config import ConfigError, Section, in_range, load_toml, one_of

from .constants import (IB_MTU_2048, IB_MTU_BYTES, PKEY_FULL, PKEY_PARTITION_MASK, QKEY_IPOIB_DEFAULT, RATE_10G,
                        SL_DEFAULT)

DEFAULT_PARTITION = 0x7FFF
MEMBERSHIPS = ("full", "limited", "none")


@dataclass
class Partition:
    name: str
    pkey: int  # 15-bit partition number
    ipoib: bool = True
    all: str = "none"
    full: set[int] = field(default_factory=set)
    limited: set[int] = field(default_factory=set)
    qkey: int = QKEY_IPOIB_DEFAULT
    mtu: int = IB_MTU_2048
    rate: int = RATE_10G
    sl: int = SL_DEFAULT

    def membership(self, guid: int) -> str:
        if guid in self.full:
            return "full"
        if guid in self.limited:
            return "limited"
        return self.all


def _guid(source: str, v) -> int:
    try:
        g = int(v, 16) if isinstance(v, str) else int(v)
    except (TypeError, ValueError):
        raise ConfigError(f"{source}: {v!r} is not a GUID (like \"0x0002c90300000001\")") from None
    if not 0 < g < 1 << 64:
        raise ConfigError(f"{source}: GUID {v!r} is outside 1..2^64-1")
    return g


def load(path: str | None) -> list[Partition]:
    if path is None:
        return [Partition("default", DEFAULT_PARTITION, all="full")]
    data = load_toml(path)
    unknown = sorted(set(data) - {"partition"})
    if unknown:
        raise ConfigError(f"{path}: {unknown[0]}: unknown table (expected [[partition]])")
    raw = data.get("partition", [])
    if not isinstance(raw, list):
        raise ConfigError(f"{path}: partition must be an array of tables ([[partition]])")
    parts: list[Partition] = []
    for i, t in enumerate(raw):
        s = Section(path, f"partition[{i}]", t)
        pk = s.get("pkey", int, required=True, check=in_range(1, 0xFFFF)) & PKEY_PARTITION_MASK
        if pk == 0:
            raise ConfigError(f"{path}: partition[{i}].pkey: 0 and 0x8000 are not partitions")
        p = Partition(s.get("name", str, f"p{pk:04x}"), pk, s.get("ipoib", bool, True),
                      s.get("all", str, "none", check=_member_check),
                      {_guid(f"{path}: partition[{i}].full", g) for g in s.get("full", list, [])},
                      {_guid(f"{path}: partition[{i}].limited", g) for g in s.get("limited", list, [])},
                      s.get("qkey", int, QKEY_IPOIB_DEFAULT, check=in_range(0, 0x7FFFFFFF)),
                      s.get("mtu", int, IB_MTU_2048, check=in_range(min(IB_MTU_BYTES), max(IB_MTU_BYTES))),
                      s.get("rate", int, RATE_10G, check=in_range(2, 63)),
                      s.get("sl", int, SL_DEFAULT, check=in_range(0, 15)))
        s.finish()
        if any(q.pkey == pk for q in parts):
            raise ConfigError(f"{path}: partition[{i}].pkey: {pk:#06x} is defined twice")
        parts.append(p)
    if not any(p.pkey == DEFAULT_PARTITION for p in parts):
        parts.insert(0, Partition("default", DEFAULT_PARTITION, all="limited"))
    else:  # the default partition is index 0 of every table
        parts.sort(key=lambda p: p.pkey != DEFAULT_PARTITION)
    return parts


_member_check = one_of(*MEMBERSHIPS)


def pkey_table(parts: list[Partition], guid: int) -> tuple[int, ...]:
    """The port's P_Key table: default partition first, bit 15 set for full members."""
    out = []
    for p in parts:
        m = p.membership(guid)
        if m != "none":
            out.append(p.pkey | (PKEY_FULL if m == "full" else 0))
    return tuple(out)


def may_talk(a: int, b: int) -> bool:
    """Two P_Keys match: same partition and at least one full member (IBA rule as the
    spec gives it; both limited is refused)."""
    return (a & PKEY_PARTITION_MASK) == (b & PKEY_PARTITION_MASK) and bool((a | b) & PKEY_FULL)
