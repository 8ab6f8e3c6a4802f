#!/usr/bin/env python3
"""RRP routing-table exchange against network size: convergence time and RT
messages on random connected networks of 10, 100 and 1,000 SANs (k-best = 3,
SAN-loop rule on), with directed links x k as the yardstick (sans-IO flooding,
one process: this measures the algorithm, not the transport).

    .venv/bin/python bench/rrp.py [--sizes 10 100 1000]

Target (issue 6): messages grow no worse than links x k (per SAN originated).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from pktwayd.topology import build, converge, directed_links, random_network  # noqa: E402

K = 3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    args = ap.parse_args()
    print(f"{'SANs':>6}{'HRs':>7}{'links':>8}{'messages':>12}{'seconds':>9}{'msgs/(links*k)':>16}{'per SAN':>9}"
          f"{'reach':>7}")
    for n in args.sizes:
        sans, routers = random_network(n, seed=n)
        hrs, _ = build(sans, routers, k=K)
        t = time.perf_counter()
        msgs = converge(hrs)
        dt = time.perf_counter() - t
        links = directed_links(hrs)
        reach = all(set(hr.by_san) | {hr.san_id} == set(sans) for hr in hrs.values())
        print(f"{n:>6}{len(hrs):>7}{links:>8}{msgs:>12,}{dt:>9.2f}{msgs / (links * K):>16.1f}"
              f"{msgs / (links * K * n):>9.3f}{'yes' if reach else 'NO':>7}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
