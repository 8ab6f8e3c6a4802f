#!/usr/bin/env python3
"""Fabric discovery on a random fabric of many switches, on trio's virtual clock
(real switch and endpoint cores, real links, in-memory cables; one process).

    .venv/bin/python bench/fabric.py [--switches 64] [--extra 40] [--seed 1]

A random spanning tree plus --extra more cables (re-drawn until every switch is
within the 7 switches an Admin ROUTE can name), one host per switch.  Prints the
virtual time until every switch has mapped the fabric and the manager has programmed
every table, the Admin requests that took (walks, the manager's reads and writes,
change notices) and the Admin micropackets all links carried, then checks every
switch's table against shortest paths computed from the cabling.  Then one
inter-switch cable is cut and mended: time and Admin cost of each re-convergence.
The yardstick is the map's size: Admin requests per (switch x link).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

import trio
import trio.testing

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from daemons import constants as C  # noqa: E402
from tests.sim.mesh import SimMesh, random_fabric, true_next_hops  # noqa: E402


def eccentricity_ok(links, n) -> bool:
    truth = true_next_hops(links, range(1, n + 1))
    return all((s, t) in truth and truth[(s, t)][0] <= C.ADMIN_ROUTE_SLOTS
               for s in range(1, n + 1) for t in range(1, n + 1) if s != t)


def admin_totals(mesh) -> tuple[int, int, int, int]:
    requests = sum(sw.agent.counters["tx_requests"] for sw in mesh.switches.values())
    notices = sum(sw.agent.counters["tx_notice"] for sw in mesh.switches.values())
    carried = sum(pt.counters["rx_admin"] for sw in mesh.switches.values() for pt in sw.ports.values())
    lost = sum(sw.agent.counters[k] for sw in mesh.switches.values()
               for k in ("request_timeout", "request_port_down", "response_invalid"))
    return requests, notices, carried, lost


def tables_agree(mesh, links, hosts) -> tuple[int, int]:
    truth = true_next_hops(links, list(mesh.switches))
    where = {ep.ula: hosts[i][0] for i, ep in enumerate(mesh.endpoints)}
    good = bad = 0
    for s, sw in mesh.switches.items():
        for ula, t in where.items():
            if t == s:
                ok = ula in sw.table and not sw.ports[sw.table[ula]].fabric
            else:
                ok = sw.table.get(ula) in truth[(s, t)][1]
            good, bad = good + ok, bad + (not ok)
    return good, bad


async def run(n: int, extra: int, seed: int) -> int:
    rng = random.Random(seed)
    while True:
        links = random_fabric(rng, n, extra)
        if eccentricity_ok(links, n):
            break
    hosts = [(s, 1) for s in range(1, n + 1)]
    truth = true_next_hops(links, range(1, n + 1))
    diameter = max(d for d, _ in truth.values())
    mesh = SimMesh(links, hosts, seed=seed)
    print(f"{n} switches, {len(links)} inter-switch cables, {len(hosts)} hosts, diameter {diameter} hops")
    print(f"{'event':<22}{'virtual s':>10}{'walks':>7}{'requests':>10}{'notices':>9}{'admin mps':>11}"
          f"{'req/(sw*link)':>15}{'unanswered':>11}{'tables ok':>11}{'wall s':>8}")
    async with trio.open_nursery() as nursery:
        await mesh.run(nursery)
        rows = []

        def row(label, t0, before, walks0, wall, links_now):
            r, no, ca, lost = (x - y for x, y in zip(admin_totals(mesh), before))
            walks = sum(sw.agent.generation for sw in mesh.switches.values()) - walks0
            good, bad = tables_agree(mesh, links_now, hosts)
            print(f"{label:<22}{trio.current_time() - t0:>10.3f}{walks:>7}{r:>10,}{no:>9,}{ca:>11,}"
                  f"{r / (n * len(links)):>15.2f}{lost:>11}{f'{good}/{good + bad}':>11}"
                  f"{time.perf_counter() - wall:>8.1f}", flush=True)
            return bad == 0

        wall0 = time.perf_counter()
        await mesh.converge(600)
        maps_ok = all(len(sw.agent.map.switches) == n for sw in mesh.switches.values())
        rows.append(row("start (cold fabric)", 0.0, (0, 0, 0, 0), 0, wall0, links) and maps_ok)
        a, b = links[-1]
        cable = mesh.cable(a, b)
        for label, connected in (("cut one cable", False), ("mend it", True)):
            before, t0, wall = admin_totals(mesh), trio.current_time(), time.perf_counter()
            walks0 = sum(sw.agent.generation for sw in mesh.switches.values())
            cable.connected = connected
            port = mesh.switches[a[0]].ports[a[1]]
            while port.link.up != connected:  # the link's dead interval (cut) or bring-up (mend)
                await trio.sleep(0.01)
            await trio.sleep(2 * C.FABRIC_SETTLE_S)
            await mesh.converge(600)
            rows.append(row(label, t0, before, walks0, wall, links if connected else links[:-1]))
        nursery.cancel_scope.cancel()
    print("converged, every table on a shortest path" if all(rows) else "FAILED: a table is not on a shortest path")
    return 0 if all(rows) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--switches", type=int, default=64)
    ap.add_argument("--extra", type=int, default=40, help="cables beyond a spanning tree")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    return trio.run(run, args.switches, args.extra, args.seed, clock=trio.testing.MockClock(autojump_threshold=0))


if __name__ == "__main__":
    sys.exit(main())
