"""pktwayd configuration (etc/pktwayd.toml): one router = two half-routers."""

from __future__ import annotations

from dataclasses import dataclass, field

from daemons.runtime.config import ConfigError, Section, in_range, load_toml
from daemons.wire.ula import parse_ula

from .eep import L2RH
from .routing import NodeEntry


@dataclass
class HalfConfig:
    addr: int
    san_id: int
    mtu: int
    ulp: str
    ula_of: dict[int, bytes] = field(default_factory=dict)  # LRT: address -> ULA on this SAN
    nodes: tuple[NodeEntry, ...] = ()
    dialect: str = "pw0"  # "pw0" PacketWay EEP, "mw5" MessageWay v5 (16-bit addresses) on this SAN


@dataclass
class RouterConfig:
    name: str
    control: str
    halves: list[HalfConfig]
    k: int | None = 3
    log_level: str = "info"


def _dialect(v: str) -> str:
    if v not in ("pw0", "mw5"):
        raise ValueError(f"{v!r} is not pw0 (PacketWay) or mw5 (MessageWay v5)")
    return v


def load(path: str) -> RouterConfig:
    data = load_toml(path)
    unknown = set(data) - {"router", "half"}
    if unknown:
        raise ConfigError(f"{path}: [{sorted(unknown)[0]}]: unknown table")
    r = Section(path, "router", data.get("router", {}))
    name = r.get("name", str, required=True)
    control = r.get("control", str, f"/run/pktwayd/{name}.sock")
    k = r.get("k", int, 3, check=in_range(0, 64)) or None
    level = r.get("log_level", str, "info")
    r.finish()
    halves_raw = data.get("half", [])
    if not isinstance(halves_raw, list) or len(halves_raw) != 2:
        raise ConfigError(f"{path}: [[half]]: a router has exactly two halves")
    halves = []
    for i, raw in enumerate(halves_raw):
        h = Section(path, f"half[{i}]", raw)
        half = HalfConfig(
            h.get("addr", int, required=True, check=in_range(1, 0x7FFFFD)),
            h.get("san_id", int, required=True, check=in_range(1, 0x7FFFFD)),
            h.get("mtu", int, 8192, check=in_range(0, 1 << 24)),
            h.get("ulp", str, required=True),
        )
        half.dialect = h.get("dialect", str, "pw0", check=_dialect)
        ula = h.get("ula", str, required=True, check=parse_ula)
        nodes = [NodeEntry(half.addr, (), 0, router=True)]
        half.ula_of[half.addr] = ula
        for j, nraw in enumerate(h.get("node", list, [])):
            n = Section(path, f"half[{i}].node[{j}]", nraw)
            addr = n.get("addr", int, required=True, check=in_range(1, 0x7FFFFD))
            nula = n.get("ula", str, required=True, check=parse_ula)
            q = n.get("q", int, 1, check=in_range(0, 0xFFFF))
            router = n.get("router", bool, False)
            name = n.get("name", str, None)
            n.finish()
            if addr in half.ula_of:
                raise ConfigError(f"{path}: half[{i}].node[{j}].addr: {addr:#x} listed twice")
            half.ula_of[addr] = nula
            nodes.append(NodeEntry(addr, (L2RH(nula),), q, router, name.encode() if name else None))
        h.finish()
        half.nodes = tuple(nodes)
        halves.append(half)
    if halves[0].san_id == halves[1].san_id:
        raise ConfigError(f"{path}: half[1].san_id: the two halves sit on different SANs")
    return RouterConfig(name, control, halves, k, level)
