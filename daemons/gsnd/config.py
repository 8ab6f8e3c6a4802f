"""gsnd configuration: TOML file (etc/gsnd.toml) with CLI overrides."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..constants import IP_MTU
from ..io.pmtu import check_mtu, family_of
from ..io.udp import resolve
from ..runtime.keyfile import cable_key, overhead
from ..link.link import Timers
from ..runtime.config import LOG_LEVELS, ConfigError, Section, in_range, load_toml, one_of
from ..runtime.linkconfig import parse_link
from ..wire.ula import parse_ula
from .. import constants as C

IFNAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")


def _ifname(v: str) -> str:
    if not IFNAME.match(v):
        raise ValueError(f"{v!r} is not an interface name (1-15 of A-Z a-z 0-9 _ . -)")
    return v


@dataclass
class GsndConfig:
    interface: str = "gsn0"
    ula: bytes | None = None
    runtime_dir: str = C.RUNTIME_DIR
    log_level: str = "info"
    local: tuple = ("0.0.0.0", C.DEFAULT_CABLE_PORT)
    peer: tuple | None = None
    cable_id: int = 1
    cable_mtu: int | None = None  # the underlay's MTU on the cable's path; None: the kernel's path MTU
    key_file: str | None = None  # the cable's key (both ends the same); None: an unauthenticated cable
    key: bytes | None = None  # read from key_file
    timers: Timers = field(default_factory=Timers)
    buffers: tuple = C.VC_BUFFER_MPS
    tap: str | None = "gsn0"  # None: no TAP (ULP socket only)
    mtu: int = IP_MTU
    arp: str = "fabric"  # fabric: kernel ARP/ND cross the fabric; off: left to harpd

    @property
    def ulp_path(self) -> str:
        return f"{self.runtime_dir}/{self.interface}.ulp"

    @property
    def control_path(self) -> str:
        return f"{self.runtime_dir}/{self.interface}.ctl"


_level = one_of(*LOG_LEVELS)
_arp = one_of("fabric", "off")


def load(path: str | None, overrides: dict) -> GsndConfig:
    """Read the file (if any), apply CLI overrides, validate; raises ConfigError."""
    cfg = GsndConfig()
    data = load_toml(path) if path else {}
    src = path or "command line"
    unknown = set(data) - {"gsnd", "cable", "link", "ip"}
    if unknown:
        raise ConfigError(f"{src}: [{sorted(unknown)[0]}]: unknown table")
    g = Section(src, "gsnd", data.get("gsnd", {}))
    cfg.interface = g.get("interface", str, cfg.interface, check=_ifname)
    ula = g.get("ula", str, None, check=parse_ula)
    cfg.ula = ula
    cfg.runtime_dir = g.get("runtime_dir", str, cfg.runtime_dir)
    cfg.log_level = g.get("log_level", str, cfg.log_level, check=_level)
    g.finish()
    c = Section(src, "cable", data.get("cable", {}))
    cfg.local = c.get("local", str, None, check=resolve) or cfg.local
    cfg.peer = c.get("peer", str, None, check=resolve)
    cfg.cable_id = c.get("id", int, cfg.cable_id, check=in_range(0, 2**32 - 1))
    cfg.cable_mtu = c.get("mtu", int, None)
    cfg.key_file = c.get("key_file", str, None)
    c.finish()
    cfg.timers, cfg.buffers = parse_link(src, data.get("link", {}))
    ip = Section(src, "ip", data.get("ip", {}))
    enabled = ip.get("enabled", bool, True)
    cfg.tap = ip.get("tap", str, None, check=_ifname)
    cfg.mtu = ip.get("mtu", int, cfg.mtu, check=in_range(68, IP_MTU))
    cfg.arp = ip.get("arp", str, cfg.arp, check=_arp)
    ip.finish()
    checks = {"interface": _ifname, "ula": parse_ula, "local": resolve, "peer": resolve, "log_level": _level,
              "tap": _ifname}
    for key, value in overrides.items():
        if value is None or key == "no_tap":
            continue
        try:
            value = checks[key](value) if key in checks else value
        except ValueError as exc:
            raise ConfigError(f"--{key.replace('_', '-')}: {exc}") from None
        setattr(cfg, key, value)
    if not enabled or overrides.get("no_tap"):
        cfg.tap = None
    elif cfg.tap is None:
        cfg.tap = cfg.interface
    if cfg.peer is None:
        raise ConfigError(f"{src}: cable.peer: missing (the address of the switch port or peer endpoint)")
    if cfg.key_file is not None:
        where = "--key-file" if overrides.get("key_file") is not None else f"{src}: cable.key_file"
        try:
            cfg.key = cable_key(cfg.key_file, cfg.local, cfg.peer)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    if cfg.cable_mtu is not None:
        try:
            check_mtu(cfg.cable_mtu, family_of(cfg.peer[0]), overhead(cfg.key))
        except ValueError as exc:
            where = "--cable-mtu" if overrides.get("cable_mtu") is not None else f"{src}: cable.mtu"
            raise ConfigError(f"{where}: {exc}") from None
    return cfg
