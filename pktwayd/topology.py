"""Build PacketWay networks of half-routers for simulations and benchmarks:
SANs joined by two-HR routers, with every HR's LRT on its SAN (spec §3.8 routes)."""

from __future__ import annotations

import random
from collections import deque

from .routing import HalfRouter, NodeEntry, lrt_route


def build(sans: dict[int, int], routers: list[tuple[int, int]], *, hosts_per_san: int = 2,
          san_loop_rule: bool = True, k: int | None = None) -> tuple[dict[int, HalfRouter], dict]:
    """``sans``: SAN-ID -> MTU (words); ``routers``: (SAN x, SAN y) pairs.
    Addresses: hosts and HRs numbered from 0x40.  Returns (HRs by address, names)."""
    nxt = iter(range(0x40, 0x7FFFFD))
    members: dict[int, list[tuple[int, bool]]] = {s: [(next(nxt), False) for _ in range(hosts_per_san)] for s in sans}
    pairs = []
    for x, y in routers:
        a, b = next(nxt), next(nxt)
        members[x].append((a, True))
        members[y].append((b, True))
        pairs.append((a, x, b, y))
    hrs = {}
    for a, x, b, y in pairs:
        for me, san, twin in ((a, x, b), (b, y, a)):
            nodes = tuple(NodeEntry(addr, () if addr == me else lrt_route(port % 256), 0 if addr == me else 1,
                                    router=is_router) for port, (addr, is_router) in enumerate(members[san]))
            hrs[me] = HalfRouter(me, san, sans[san], twin, nodes, san_loop_rule=san_loop_rule, k=k)
    return hrs, members


def random_network(n_sans: int, seed: int, extra: float = 0.5) -> tuple[dict[int, int], list[tuple[int, int]]]:
    """A connected random network: a random tree plus ``extra`` x n further routers."""
    rng = random.Random(seed)
    sans = {0x100 + i: rng.choice((256, 512, 1024, 2048)) for i in range(n_sans)}
    ids = list(sans)
    routers = [(ids[i], ids[rng.randrange(i)]) for i in range(1, n_sans)]
    for _ in range(int(extra * n_sans)):
        x, y = rng.sample(ids, 2)
        routers.append((x, y))
    return sans, routers


def converge(hrs: dict[int, HalfRouter]) -> int:
    """Flood until quiet (FIFO delivery); returns the number of RT messages."""
    q = deque((hr.addr, dest, rt) for hr in hrs.values() for dest, rt in hr.start())
    messages = 0
    while q:
        src, dest, rt = q.popleft()
        messages += 1
        for d2, rt2 in hrs[dest].receive(src, rt):
            q.append((dest, d2, rt2))
    return messages


def directed_links(hrs: dict[int, HalfRouter]) -> int:
    """Twin links plus buddy pairs, each direction counted."""
    return sum(1 + len(hr.buddies) for hr in hrs.values())
