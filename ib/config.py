"""Configuration of ib-sm, ib-switch and ipoibd: a TOML file, command-line flags over
it, every problem one line naming the file and key (exit 78)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar
from pathlib import Path

from daemons.runtime.config import LOG_LEVELS, ConfigError, Section, in_range, load_toml, one_of

from .constants import GID_PREFIX_DEFAULT, SM_PORT_DEFAULT
from .udp import resolve

T = TypeVar("T")
IFNAME = re.compile(r"[A-Za-z0-9_.-]{1,15}")


def _addr(v: str) -> tuple[str, int]:
    return resolve(v)


def _guid(v) -> int:
    if isinstance(v, str):
        try:
            g = int(v, 16)
        except ValueError:
            raise ValueError(f"{v!r} is not a hexadecimal GUID like \"0x0002c90300000001\"") from None
    else:
        g = v
    if not 0 < g < 1 << 64:
        raise ValueError(f"{v!r} is outside 1..2^64-1")
    return g


_level = one_of(*LOG_LEVELS)


def _get(s: Section, key: str, default: str, check: Callable[[str], T]) -> T:
    """A string option whose default goes through the same check as a given value."""
    if key not in s.data:
        s.data[key] = default
    return s.get(key, str, check=check)


def _section(path: str | None, name: str) -> tuple[str, dict, Section]:
    source = path or "command line"
    data = load_toml(path) if path else {}
    return source, data, Section(source, name, data.get(name, {}))


def _override(sec: Section, overrides: dict) -> None:
    for k, v in overrides.items():
        if v is not None:
            sec.data[k] = v


def _check_tables(source: str, data: dict, allowed: set[str]) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(f"{source}: [{unknown[0]}]: unknown table")


@dataclass
class SmConfig:
    listen: tuple[str, int]
    state_file: Path
    partitions: str | None
    gid_prefix: int
    runtime_dir: Path
    log_level: str
    parts: list = field(default_factory=list)


def load_sm(path: str | None, overrides: dict) -> SmConfig:
    source, data, s = _section(path, "sm")
    _check_tables(source, data, {"sm"})
    _override(s, overrides)
    cfg = SmConfig(_get(s, "listen", f"0.0.0.0:{SM_PORT_DEFAULT}", _addr),
                   Path(s.get("state_file", str, "/var/lib/ib-sm/lids.json")),
                   s.get("partitions", str, None),
                   _get(s, "gid_prefix", f"{GID_PREFIX_DEFAULT:#x}", _guid),
                   Path(s.get("runtime_dir", str, "/run/ib-sm")),
                   s.get("log_level", str, "info", check=_level))
    s.finish()
    from . import partitions

    cfg.parts = partitions.load(cfg.partitions)  # checked now: a bad partitions file is a bad config
    return cfg


@dataclass
class SwitchPort:
    number: int
    local: tuple[str, int]
    peer: tuple[str, int]


@dataclass
class SwitchConfig:
    guid: int
    sm: tuple[str, int]
    mgmt_local: tuple[str, int] | None
    runtime_dir: Path
    log_level: str
    ports: list[SwitchPort] = field(default_factory=list)


def load_switch(path: str | None, overrides: dict) -> SwitchConfig:
    source, data, s = _section(path, "switch")
    _check_tables(source, data, {"switch", "port"})
    _override(s, overrides)
    cfg = SwitchConfig(s.get("guid", str, required=True, check=_guid), s.get("sm", str, required=True, check=_addr),
                       s.get("mgmt_local", str, None, check=_addr),
                       Path(s.get("runtime_dir", str, "/run/ib-switch")), s.get("log_level", str, "info", check=_level))
    s.finish()
    raw = data.get("port", [])
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{source}: [[port]]: at least one port is needed")
    for i, t in enumerate(raw):
        p = Section(source, f"port[{i}]", t)
        port = SwitchPort(p.get("number", int, required=True, check=in_range(1, 63)),
                          p.get("local", str, required=True, check=_addr), p.get("peer", str, required=True, check=_addr))
        p.finish()
        if any(q.number == port.number for q in cfg.ports):
            raise ConfigError(f"{source}: port[{i}].number: port {port.number} is defined twice")
        cfg.ports.append(port)
    return cfg


@dataclass
class IpoibConfig:
    guid: int
    local: tuple[str, int]
    peer: tuple[str, int]
    sm: tuple[str, int]
    interface: str
    children: list[int]
    runtime_dir: Path
    log_level: str


def _children(v: list) -> list[int]:
    out = []
    for x in v:
        try:
            pk = int(x, 16) if isinstance(x, str) else int(x)
        except (TypeError, ValueError):
            raise ValueError(f"{x!r} is not a P_Key like \"0x8001\"") from None
        if not 0 < pk <= 0xFFFF or pk & 0x7FFF == 0:
            raise ValueError(f"P_Key {x!r}: 0 and 0x8000 are not partitions")
        out.append(pk | 0x8000)  # the full bit is always forced [LNX]
    if len(set(out)) != len(out):
        raise ValueError("a P_Key is listed twice")
    return out


def _ifname(v: str) -> str:
    if not IFNAME.fullmatch(v):
        raise ValueError(f"{v!r} is not an interface name (1-15 of A-Z a-z 0-9 _ . -)")
    return v


def load_ipoib(path: str | None, overrides: dict) -> IpoibConfig:
    source, data, s = _section(path, "port")
    _check_tables(source, data, {"port"})
    _override(s, overrides)
    cfg = IpoibConfig(s.get("guid", str, required=True, check=_guid), s.get("local", str, required=True, check=_addr),
                      s.get("peer", str, required=True, check=_addr), s.get("sm", str, required=True, check=_addr),
                      s.get("interface", str, "ib0", check=_ifname), s.get("children", list, [], check=_children),
                      Path(s.get("runtime_dir", str, "/run/ipoibd")), s.get("log_level", str, "info", check=_level))
    s.finish()
    for pk in cfg.children:
        _ifname(f"{cfg.interface}.{pk:04x}")
    return cfg
