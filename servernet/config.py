"""snetd configuration (etc/snetd.toml): the node's ID, its two fabric sockets, its
peers, and the AVT windows it exposes."""

from __future__ import annotations

from dataclasses import dataclass, field

from daemons.io.udp import resolve
from daemons.runtime.config import ConfigError, Section, in_range, load_toml

from .avt import Window
from .constants import AVT_ENTRIES, ID_MAX, INTERRUPT_QUEUE, PAGE_SHIFT, RESPONSE_TIMEOUT_S, Fabric

MAX_WINDOW_PAGES = 4096  # 16 MiB of memory per window (project choice: bounded memory)


@dataclass
class Peer:
    id: int
    name: str
    doorbell: int | None = None  # the peer's doorbell address for blocks


@dataclass
class NodeConfig:
    id: int
    name: str
    control: str
    fabrics: dict[Fabric, tuple[tuple[str, int], tuple[str, int]]]  # fabric -> (local, router)
    peers: list[Peer] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    timeout: float = RESPONSE_TIMEOUT_S
    ii: bool = False
    interrupt_queue: int = INTERRUPT_QUEUE
    log_level: str = "info"

    def peer(self, key: str) -> Peer | None:
        for p in self.peers:
            if p.name == key:
                return p
        try:
            n = int(key, 0)
        except ValueError:
            return None
        return next((p for p in self.peers if p.id == n), None)


def _fabrics(v: list) -> frozenset[int]:
    if not isinstance(v, list) or not v or any(f not in ("x", "y") for f in v):
        raise ValueError(f"{v!r} is not a list of \"x\" and \"y\"")
    return frozenset(Fabric[f.upper()] for f in v)


def load(path: str) -> NodeConfig:
    data = load_toml(path)
    unknown = set(data) - {"node", "fabric", "peer", "window"}
    if unknown:
        raise ConfigError(f"{path}: [{sorted(unknown)[0]}]: unknown table")
    n = Section(path, "node", data.get("node", {}))
    my_id = n.get("id", int, required=True, check=in_range(1, ID_MAX))
    name = n.get("name", str, f"{my_id:05x}")
    control = n.get("control", str, f"/run/snetd/{name}.sock")
    timeout = n.get("timeout", float, RESPONSE_TIMEOUT_S, check=in_range(0.001, 10.0))
    ii = n.get("servernet_ii", bool, False)
    queue = n.get("interrupt_queue", int, INTERRUPT_QUEUE, check=in_range(1, 4096))
    level = n.get("log_level", str, "info")
    n.finish()
    fab = Section(path, "fabric", data.get("fabric", {}))
    fabrics: dict[Fabric, tuple[tuple[str, int], tuple[str, int]]] = {}
    for f in ("x", "y"):
        fabric = Section(path, f"fabric.{f}", fab.get(f, dict, required=True))
        fabrics[Fabric[f.upper()]] = (fabric.get("local", str, required=True, check=resolve),
                                      fabric.get("router", str, required=True, check=resolve))
        fabric.finish()
    fab.finish()
    if fabrics[Fabric.X][0] == fabrics[Fabric.Y][0]:
        raise ConfigError(f"{path}: fabric.y.local: X and Y need separate sockets")
    cfg = NodeConfig(my_id, name, control, fabrics, timeout=timeout, ii=ii, interrupt_queue=queue, log_level=level)
    raw_peers = data.get("peer", [])
    if not isinstance(raw_peers, list) or not raw_peers:
        raise ConfigError(f"{path}: [[peer]]: give at least one peer")
    for i, raw in enumerate(raw_peers):
        p = Section(path, f"peer[{i}]", raw)
        pid = p.get("id", int, required=True, check=in_range(1, ID_MAX))
        peer = Peer(pid, p.get("name", str, f"{pid:05x}"), p.get("doorbell", int, None, check=in_range(0, 0xFFFFFFFF)))
        p.finish()
        if pid == my_id or any(q.id == pid or q.name == peer.name for q in cfg.peers):
            raise ConfigError(f"{path}: peer[{i}].id: {pid:#x} is this node or listed twice")
        cfg.peers.append(peer)
    ids = {p.id for p in cfg.peers}
    for i, raw in enumerate(data.get("window", [])):
        w = Section(path, f"window[{i}]", raw)
        sources = w.get("sources", list, None)
        if sources is not None and not all(isinstance(s, int) and s in ids for s in sources):
            raise ConfigError(f"{path}: window[{i}].sources: every source must be a configured peer's id")
        try:
            win = Window(w.get("name", str, f"w{i}"),
                         w.get("page", int, required=True, check=in_range(0, AVT_ENTRIES - 1)),
                         w.get("pages", int, 1, check=in_range(1, MAX_WINDOW_PAGES)), w.get("access", str, "rw"),
                         frozenset(sources) if sources is not None else None,
                         w.get("paths", list, frozenset({Fabric.X, Fabric.Y}), check=_fabrics),
                         w.get("interrupt", bool, False), w.get("per_source", bool, False))
        except ValueError as exc:
            raise ConfigError(f"{path}: window[{i}]: {exc}") from None
        w.finish()
        cfg.windows.append(win)
    pages: dict[int, str] = {}
    for win in cfg.windows:
        for pg in range(win.page, win.page + win.pages):
            if pg in pages:
                raise ConfigError(f"{path}: window {win.name!r}: page {pg:#x} is also in {pages[pg]!r} "
                                  f"(address {pg << PAGE_SHIFT:#x})")
            pages[pg] = win.name
    return cfg
