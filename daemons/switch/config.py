"""gsn-switch configuration (etc/gsn-switch.toml)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import constants as C
from ..io.pmtu import check_mtu, family_of
from ..io.udp import resolve
from ..runtime.keyfile import cable_key, overhead
from ..link.link import Timers
from ..runtime.config import ConfigError, Section, in_range, load_toml
from ..runtime.linkconfig import parse_link
from ..wire.ula import parse_ula


@dataclass
class PortConfig:
    number: int
    local: tuple
    peer: tuple
    cable_id: int
    management: bool = False  # configuration Admin (CHANGE_ROUTE, ...) accepted from this port
    trust_source: bool = False  # Messages' S_ULA not checked: an uplink to another switch
    switch: bool = False  # cabled to another gsn-switch: discovery walks it, broadcast follows the tree
    mtu: int | None = None  # the underlay's MTU on this cable's path; None: the kernel's path MTU
    key_file: str | None = None  # this cable's key (the endpoint holds the same); None: unauthenticated
    key: bytes | None = None  # read from key_file


@dataclass
class SwitchConfig:
    switch_id: int = 1
    broadcast: bool = True
    runtime_dir: str = C.SWITCH_RUNTIME_DIR
    log_level: str = "info"
    ports: list[PortConfig] = field(default_factory=list)
    static: dict[bytes, int] = field(default_factory=dict)
    timers: Timers = field(default_factory=Timers)
    buffers: tuple = C.VC_BUFFER_MPS
    cable_mtu: int | None = None  # [cable] mtu: every port's, unless the port gives its own
    data_path: str = "compiled"  # "compiled" (SwitchPlane, when the cables allow it) or "python"

    @property
    def control_path(self) -> str:
        return f"{self.runtime_dir}/control.sock"


def _data_path(value: str) -> str:
    if value not in ("compiled", "python"):
        raise ValueError(f"{value!r}: expected \"compiled\" or \"python\"")
    return value


def load(path: str, overrides: dict) -> SwitchConfig:
    data = load_toml(path)
    cfg = SwitchConfig()
    unknown = set(data) - {"switch", "port", "static", "link", "cable"}
    if unknown:
        raise ConfigError(f"{path}: [{sorted(unknown)[0]}]: unknown table")
    s = Section(path, "switch", data.get("switch", {}))
    cfg.switch_id = s.get("id", int, cfg.switch_id, check=in_range(0, 255))
    cfg.broadcast = s.get("broadcast", bool, cfg.broadcast)
    cfg.runtime_dir = s.get("runtime_dir", str, cfg.runtime_dir)
    cfg.log_level = s.get("log_level", str, cfg.log_level)
    cfg.data_path = s.get("data_path", str, cfg.data_path, check=_data_path)
    s.finish()
    c = Section(path, "cable", data.get("cable", {}))
    cfg.cable_mtu = c.get("mtu", int, None)
    c.finish()
    if overrides.get("cable_mtu") is not None:
        cfg.cable_mtu = overrides["cable_mtu"]
    ports = data.get("port", [])
    if not isinstance(ports, list) or not ports:
        raise ConfigError(f"{path}: [[port]]: at least one port is required")
    for i, raw in enumerate(ports):
        p = Section(path, f"port[{i}]", raw)
        number = p.get("number", int, required=True, check=in_range(1, 254))
        if any(q.number == number for q in cfg.ports):
            raise ConfigError(f"{path}: port[{i}].number: port {number} configured twice")
        cfg.ports.append(PortConfig(
            number,
            p.get("local", str, required=True, check=resolve),
            p.get("peer", str, required=True, check=resolve),
            p.get("cable_id", int, number, check=in_range(0, 2**32 - 1)),
            p.get("management", bool, False),
            p.get("trust_source", bool, False),
            switch=p.get("switch", bool, False),
            mtu=p.get("mtu", int, None),
            key_file=p.get("key_file", str, None),
        ))
        p.finish()
        port = cfg.ports[-1]
        if port.switch and number > C.FABRIC_PORT_MAX:
            raise ConfigError(f"{path}: port[{i}].switch: an inter-switch port is numbered 1..{C.FABRIC_PORT_MAX} "
                              f"(one 64-bit Admin register holds them), not {number}")
        if port.key_file is not None:
            try:
                port.key = cable_key(port.key_file, port.local, port.peer)
            except ValueError as exc:
                raise ConfigError(f"{path}: port[{i}].key_file: {exc} (port {number})") from None
        if port.mtu is None:
            port.mtu = cfg.cable_mtu
            where = "--cable-mtu" if overrides.get("cable_mtu") is not None else f"{path}: cable.mtu"
        else:
            where = f"{path}: port[{i}].mtu"
        if port.mtu is not None:
            try:
                check_mtu(port.mtu, family_of(port.peer[0]), overhead(port.key))
            except ValueError as exc:
                raise ConfigError(f"{where}: {exc} (port {number})") from None
    numbers = {q.number for q in cfg.ports}
    for i, raw in enumerate(data.get("static", [])):
        st = Section(path, f"static[{i}]", raw)
        ula = st.get("ula", str, required=True, check=parse_ula)
        port = st.get("port", int, required=True)
        if port not in numbers:
            raise ConfigError(f"{path}: static[{i}].port: no port {port} is configured")
        if ula == C.ULA_BROADCAST:
            raise ConfigError(f"{path}: static[{i}].ula: the broadcast ULA cannot be bound to a port")
        cfg.static[ula] = port
        st.finish()
    cfg.timers, cfg.buffers = parse_link(path, data.get("link", {}))
    for key, value in overrides.items():
        if value is not None and key != "cable_mtu":
            setattr(cfg, key, value)
    return cfg
