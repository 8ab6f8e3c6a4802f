"""The fabric map a walk builds, and what is computed from it: hop distances,
shortest-path next hops, the broadcast spanning tree, every switch's wanted routes.

Pure functions on plain data (no I/O, no time).  Every choice is deterministic so
that any switch computing from the same map gets the same answer: neighbours are
taken in (switch id, port) order, so among equal-cost paths the one through the
lowest switch id (then the lowest port) wins, and the tree is the breadth-first
tree from the lowest switch id (the fabric manager).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypedDict

from ..wire.ula import format_ula

End = tuple[int, int]  # (switch id, port)
Link = tuple[End, End]  # the lower end first
Adjacency = dict[int, list[tuple[int, int, int]]]  # switch -> [(neighbour, my port, its port)]


def link(a: End, b: End) -> Link:
    return (a, b) if a <= b else (b, a)


@dataclass
class SwitchNode:
    id: int
    serial: int
    route: tuple[int, ...]  # output ports from the walking switch to reach it (() = itself)
    ports_up: int = 0  # bitmap of inter-switch ports up (bit p-1)
    fabric_ports: int = 0  # bitmap of inter-switch ports configured (manager's reads)
    tree: int = 0  # its TREE_PORTS register as read (manager's reads)
    table: dict[bytes, int] | None = None  # its ULA -> port table (manager's LIST_ULAS)


class Conflict(TypedDict):
    """One switch id seen with two serials: the route to the switch that is to change it."""

    id: int
    serials: list[str]
    renumber: list[int]


@dataclass
class FabricMap:
    walker: int
    switches: dict[int, SwitchNode] = field(default_factory=dict)
    links: set[Link] = field(default_factory=set)
    conflicts: list[Conflict] = field(default_factory=list)  # switch ids seen with two serials

    @property
    def manager(self) -> int:
        return min(self.switches)

    def adjacency(self) -> Adjacency:
        """switch -> [(neighbour, my port, its port)] sorted by (neighbour, my port)."""
        adj: Adjacency = {s: [] for s in self.switches}
        for (a, pa), (b, pb) in self.links:
            if a in adj and b in adj and a != b:
                adj[a].append((b, pa, pb))
                adj[b].append((a, pb, pa))
        for nbrs in adj.values():
            nbrs.sort()
        return adj


def distances(adj: Adjacency, src: int) -> dict[int, int]:
    dist = {src: 0}
    q = deque([src])
    while q:
        s = q.popleft()
        for n, _, _ in adj[s]:
            if n not in dist:
                dist[n] = dist[s] + 1
                q.append(n)
    return dist


def next_hops(adj: Adjacency) -> dict[int, dict[int, int]]:
    """next_hops[s][t] = the port of s on a shortest path to t (t != s, reachable)."""
    out: dict[int, dict[int, int]] = {s: {} for s in adj}
    for t in adj:
        dist = distances(adj, t)
        for s, d in dist.items():
            if s != t:
                out[s][t] = next(p for n, p, _ in adj[s] if dist.get(n) == d - 1)
    return out


def spanning_tree(adj: Adjacency, root: int) -> set[Link]:
    """Breadth-first tree from root: one link per switch reached (its parent link)."""
    seen = {root}
    tree: set[Link] = set()
    q = deque([root])
    while q:
        s = q.popleft()
        for n, p, q_port in adj[s]:
            if n not in seen:
                seen.add(n)
                tree.add(link((s, p), (n, q_port)))
                q.append(n)
    return tree


def tree_bitmaps(tree: set[Link], switches: Iterable[int]) -> dict[int, int]:
    bits = {s: 0 for s in switches}
    for (a, pa), (b, pb) in tree:
        bits[a] |= 1 << (pa - 1)
        bits[b] |= 1 << (pb - 1)
    return bits


def ports_of(bitmap: int) -> list[int]:
    return [i + 1 for i in range(64) if bitmap >> i & 1]


def endpoints(fmap: FabricMap) -> tuple[dict[bytes, End], list[dict[str, object]]]:
    """ULAs bound to a switch's host (not inter-switch) ports: ula -> (switch, port).
    A ULA bound on two switches keeps the lower switch id; the other is reported."""
    found: dict[bytes, End] = {}
    collisions: list[dict[str, object]] = []
    for sid in sorted(fmap.switches):
        node = fmap.switches[sid]
        for ula, port in sorted((node.table or {}).items()):
            if node.fabric_ports >> (port - 1) & 1 if 1 <= port <= 64 else False:
                continue  # a route, not an endpoint
            if ula in found:
                collisions.append({"ula": format_ula(ula), "kept": list(found[ula]), "ignored": [sid, port]})
                continue
            found[ula] = (sid, port)
    return found, collisions


def wanted_routes(fmap: FabricMap, eps: dict[bytes, End]) -> dict[int, dict[bytes, int]]:
    """Each switch's routes to the endpoints of other switches (shortest paths)."""
    hops = next_hops(fmap.adjacency())
    want: dict[int, dict[bytes, int]] = {s: {} for s in fmap.switches}
    for ula, (t, _) in eps.items():
        for s in fmap.switches:
            if s != t and t in hops[s]:
                want[s][ula] = hops[s][t]
    return want


def current_routes(node: SwitchNode) -> dict[bytes, int]:
    """Entries of a switch's table that point at its inter-switch ports."""
    return {u: p for u, p in (node.table or {}).items() if 1 <= p <= 64 and node.fabric_ports >> (p - 1) & 1}


def describe(fmap: FabricMap, tree: set[Link], eps: dict[bytes, End] | None) -> dict[str, object]:
    """The map as JSON-ready data (gsnctl fabric)."""
    adj = fmap.adjacency()
    dist = distances(adj, fmap.walker) if fmap.walker in adj else {}
    bits = tree_bitmaps(tree, fmap.switches)
    return {
        "walker": fmap.walker,
        "manager": fmap.manager if fmap.switches else None,
        "switches": [
            {"id": s, "serial": f"{n.serial:012x}", "route": list(n.route), "hops": dist.get(s),
             "ports_up": ports_of(n.ports_up), "tree_ports": ports_of(bits[s])}
            for s, n in sorted(fmap.switches.items())
        ],
        "links": [{"a": list(a), "b": list(b), "tree": (a, b) in tree} for a, b in sorted(fmap.links)],
        "path_costs": {str(s): dist.get(s) for s in sorted(fmap.switches)},
        "endpoints": None if eps is None else [
            {"ula": format_ula(u), "switch": s, "port": p} for u, (s, p) in sorted(eps.items())],
        "conflicts": list(fmap.conflicts),
    }
