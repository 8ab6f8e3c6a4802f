"""pktwayd configuration (etc/pktwayd.toml): one router = two half-routers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from daemons.runtime.config import ConfigError, Section, in_range, load_toml
from daemons.wire.ula import parse_ula

from daemons.io.pmtu import check_mtu, family_of
from daemons.io.udp import resolve
from daemons.runtime.keyfile import cable_key, overhead
from ib.constants import QPN_PACKETWAY
from ib.udport import route as ib_route

from servernet.constants import PREF_EITHER, PW_MTU_BYTES, RING_BASE, SLOT_BYTES

from .constants import LIVENESS_S
from .eep import L2RH
from .udpsan import native
from .routing import NodeEntry

if TYPE_CHECKING:
    from servernet.config import NodeConfig


@dataclass
class HalfConfig:
    addr: int
    san_id: int
    mtu: int
    ulp: str
    nodes: tuple[NodeEntry, ...] = ()
    dialect: str = "pw0"  # "pw0" PacketWay EEP, "mw5" MessageWay v5 (16-bit addresses) on this SAN
    map: bool = True  # follow the switch's ULA list (gsnd control socket): LRT liveness, Hey-You
    control: str = ""  # gsnd's control socket (default: the ULP socket's path with .ctl)
    kind: str = "gsn"  # "gsn"; "udp": a generic datagram SAN (pktway-san); "servernet": a ServerNet SAN;
    # "infiniband": an InfiniBand-style fabric (ib-sm, ib-switch), L2RH = DLID + QPN
    snet: NodeConfig | None = None  # servernet: the end node's configuration
    rings: dict | None = None  # servernet: ring base of each node whose ring is not at the default
    switch: tuple[str, int] | None = None  # udp: the pktway-san switch's address; infiniband: the ib-switch port
    local: tuple[str, int] | None = None  # udp, infiniband: my port's UDP address
    port: int = 0  # udp: my port number on that switch
    guid: int = 0  # infiniband: my port GUID
    sm: tuple[str, int] | None = None  # infiniband: the subnet manager
    pkey: int = 0xFFFF  # infiniband: my partition


@dataclass
class TwinConfig:
    """The twin lives in another process: a GSN cable (UDP) between the two."""

    addr: int
    local: tuple
    peer: tuple
    mtu: int | None = None  # the underlay's MTU on the cable's path; None: the kernel's path MTU
    key: bytes | None = None  # the twin cable's key ([twin] key_file); None: unauthenticated


@dataclass
class RouterConfig:
    name: str
    control: str
    halves: list[HalfConfig]
    k: int | None = 3
    log_level: str = "info"
    twin: TwinConfig | None = None
    liveness: float = LIVENESS_S
    name_bytes: bytes = b""


def _kind(v: str) -> str:
    if v not in ("gsn", "udp", "servernet", "infiniband"):
        raise ValueError(f"{v!r} is not gsn (a GSN fabric via gsnd), udp (a datagram SAN via pktway-san), "
                         "servernet (a ServerNet SAN: snet-router fabrics X and Y) or "
                         "infiniband (an InfiniBand-style fabric via ib-sm and ib-switch)")
    return v


def _guid(v: str) -> int:
    try:
        g = int(v, 16)
    except ValueError:
        raise ValueError(f"{v!r} is not a hexadecimal GUID like \"0x0002c90300000001\"") from None
    if not 0 < g < 1 << 64:
        raise ValueError(f"{v!r} is outside 1..2^64-1")
    return g


def _snet_node(path: str):
    from servernet.config import load as load_snet
    from servernet.ring import ring_windows

    cfg = load_snet(path)
    try:
        ring_windows(cfg.windows)
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return cfg


def _snet_route(n: Section, snet) -> bytes:
    from servernet.ring import route

    did = n.get("did", int, required=True, check=in_range(1, 0xFFFFF))
    if snet.peer(str(did)) is None:
        raise ConfigError(f"{n.source}: {n.name}.did: {did:#x} is not a [[peer]] of {snet.name!r}'s ServerNet node")
    prefs = {"x": 0, "y": 1, "either": PREF_EITHER}
    fabric = n.get("fabric", str, "either", check=lambda v: v if v in prefs else _bad_fabric(v))
    ring = n.get("ring", int, RING_BASE, check=_page_aligned)
    return route(did, prefs[fabric], ring)


def _page_aligned(v: int) -> int:
    if not 0 <= v <= 0xFFFFF000 or v % 4096:
        raise ValueError(f"{v:#x} is not a page-aligned (4 KiB) 32-bit address")
    return v


def _bad_fabric(v):
    raise ValueError(f"{v!r} is not x, y or either")


def _dialect(v: str) -> str:
    if v not in ("pw0", "mw5"):
        raise ValueError(f"{v!r} is not pw0 (PacketWay) or mw5 (MessageWay v5)")
    return v


def load(path: str) -> RouterConfig:
    data = load_toml(path)
    unknown = set(data) - {"router", "half", "twin"}
    if unknown:
        raise ConfigError(f"{path}: [{sorted(unknown)[0]}]: unknown table")
    r = Section(path, "router", data.get("router", {}))
    rname = r.get("name", str, required=True)
    control = r.get("control", str, f"/run/pktwayd/{rname}.sock")
    k = r.get("k", int, 3, check=in_range(0, 64)) or None
    level = r.get("log_level", str, "info")
    liveness = r.get("liveness", float, LIVENESS_S, check=in_range(0.05, 3600))
    r.finish()
    halves_raw = data.get("half", [])
    twin = None
    if "twin" in data:
        t = Section(path, "twin", data["twin"])
        twin = TwinConfig(t.get("addr", int, required=True, check=in_range(1, 0x7FFFFD)),
                          t.get("local", str, required=True, check=resolve), t.get("peer", str, required=True, check=resolve))
        twin.key = t.get("key_file", str, None, check=lambda v: cable_key(v, twin.local, twin.peer))
        twin.mtu = t.get("mtu", int, None, check=lambda v: check_mtu(v, family_of(twin.peer[0]), overhead(twin.key)))
        t.finish()
    want = 1 if twin else 2
    if not isinstance(halves_raw, list) or len(halves_raw) != want:
        raise ConfigError(f"{path}: [[half]]: a router has two halves; give both, or one and a [twin] table "
                          f"for the other's process" if not twin
                          else f"{path}: [[half]]: with [twin], give only this process's half")
    halves = []
    for i, raw in enumerate(halves_raw):
        h = Section(path, f"half[{i}]", raw)
        kind = h.get("kind", str, "gsn", check=_kind)
        half = HalfConfig(
            h.get("addr", int, required=True, check=in_range(1, 0x7FFFFD)),
            h.get("san_id", int, required=True, check=in_range(1, 0x7FFFFD)),
            h.get("mtu", int, PW_MTU_BYTES // 8, check=in_range(1, SLOT_BYTES // 8)) if kind == "servernet"
            else h.get("mtu", int, 8192, check=in_range(0, 1 << 24)),
            h.get("ulp", str, required=kind == "gsn") if kind == "gsn" else "",
        )
        half.kind = kind
        half.dialect = h.get("dialect", str, "pw0", check=_dialect)
        if kind == "gsn":
            half.map = h.get("map", bool, True)
            half.control = h.get("control", str, half.ulp.removesuffix(".ulp") + ".ctl")
        elif kind == "infiniband":  # a port on an InfiniBand-style fabric: LIDs from its SM
            half.map = False
            half.guid = h.get("guid", str, required=True, check=_guid)
            half.local = h.get("local", str, required=True, check=resolve)
            half.switch = h.get("switch", str, required=True, check=resolve)
            half.sm = h.get("sm", str, required=True, check=resolve)
            half.pkey = h.get("pkey", int, 0xFFFF, check=in_range(1, 0xFFFF))
        elif kind == "servernet":  # the half is a ServerNet end node; liveness by WRU only
            half.map = False
            half.snet = h.get("servernet", str, required=True, check=_snet_node)
        else:  # an emulated SAN (pktway-san): no switch map, liveness by WRU only
            half.map = False
            half.switch = h.get("switch", str, required=True, check=resolve)
            half.local = h.get("local", str, required=True, check=resolve)
            half.port = h.get("port", int, required=True, check=in_range(0, 255))
        nodes = [NodeEntry(half.addr, (), 0, router=True)]
        seen = {half.addr}
        for j, nraw in enumerate(h.get("node", list, [])):
            n = Section(path, f"half[{i}].node[{j}]", nraw)
            addr = n.get("addr", int, required=True, check=in_range(1, 0x7FFFFD))
            if kind == "gsn":
                route = n.get("ula", str, required=True, check=parse_ula)
            elif kind == "infiniband":
                route = ib_route(n.get("lid", int, required=True, check=in_range(1, 0xBFFF)),
                                 n.get("qpn", int, QPN_PACKETWAY, check=in_range(0, 0xFFFFFF)))
            elif kind == "servernet":
                route = _snet_route(n, half.snet)
                ring = int.from_bytes(route[4:], "big")
                if ring != RING_BASE:
                    half.rings = (half.rings or {}) | {int.from_bytes(route[:3], "big"): ring}
            else:
                route = native(n.get("port", int, required=True, check=in_range(0, 255)))
            q = n.get("q", int, 1, check=in_range(0, 0xFFFF))
            router = n.get("router", bool, False)
            name = n.get("name", str, None)
            n.finish()
            if addr in seen:
                raise ConfigError(f"{path}: half[{i}].node[{j}].addr: {addr:#x} listed twice")
            seen.add(addr)
            nodes.append(NodeEntry(addr, (L2RH(route),), q, router, name.encode() if name else None))
        h.finish()
        half.nodes = tuple(nodes)
        halves.append(half)
    if twin is None and halves[0].san_id == halves[1].san_id:
        raise ConfigError(f"{path}: half[1].san_id: the two halves sit on different SANs")
    if twin is not None and twin.addr == halves[0].addr:
        raise ConfigError(f"{path}: twin.addr: the twin has its own address, not {twin.addr:#x}")
    return RouterConfig(rname, control, halves, k, level, twin, liveness, rname.encode())
