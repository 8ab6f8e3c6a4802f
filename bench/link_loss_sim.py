#!/usr/bin/env python3
"""Goodput of the link under loss, on virtual time (no namespaces, no root).

    .venv/bin/python bench/link_loss_sim.py [--seconds 2] [--impl CLink|Link]

Two links joined by a simulated cable: each direction serialises datagrams at
--rate Gbit/s and delays them --delay ms, and the project impairer's rules apply
(tests/netns/impair.py: each datagram lost with probability LOSS, duplicated with
DUP, and with REORDER sent without the delay so it overtakes).  Link 0 keeps VC1
full of 64 KiB Messages; link 1 frees each received micropacket at once.  The
goodput is the Message bytes delivered in order per virtual second; each impaired
case is shown against the lossless run of the same cable, as in
bench/ip_over_gsn.py --impair (a1)/(a) and (a5)/(a).  The link is the only thing
measured: no TCP above it, no CPU cost (see bench/dataplane_cost.py for that).
"""

from __future__ import annotations

import argparse
import heapq
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from daemons.io.runner import cable_window  # noqa: E402
from daemons.link.clink import CLink  # noqa: E402
from daemons.link.link import Link, Received  # noqa: E402
from daemons.link.reassembly import Delivered, Reassembler  # noqa: E402
from daemons.wire.message import Message  # noqa: E402

A, B = b"\x02" * 6, b"\x04" * 6
CASES = {"lossless": (0.0, 0.0, 0.0), "1% loss": (0.01, 0.0, 0.0),
         "5% loss + 1% dup + 25% reorder": (0.05, 0.01, 0.25)}


def goodput(impl, seconds: float, rate_bps: float, delay: float, impair, seed: int, max_mps: int) -> dict:
    loss, dup, reorder = impair
    rng = random.Random(seed)
    links = [impl(1, 0.0, rng=random.Random(seed + 1), max_mps=max_mps, window=cable_window(max_mps)),
             impl(1, 0.0, rng=random.Random(seed + 2), max_mps=max_mps, window=cable_window(max_mps))]
    reasm = Reassembler()
    wire: list = []  # (arrival, n, to, datagram)
    free = [0.0, 0.0]  # when each direction's serialiser is free
    n = 0
    now, dt, delivered, t0 = 0.0, 0.0001, 0, None
    msg = Message(1, A, B, 0x0800, bytes(65000)).records()
    while now < seconds + (t0 or 0.0):
        now += dt
        for i, link in enumerate(links):
            if link.up and i == 0 and link.queued(1) < 4 * len(msg):
                link.enqueue(1, msg)
            for d in link.handle_timer(now) + link.datagrams(now):
                free[i] = max(free[i], now) + len(d) * 8 / rate_bps
                if rng.random() < loss:
                    continue
                for _ in range(2 if rng.random() < dup else 1):
                    n += 1
                    heapq.heappush(wire, (free[i] + (0.0 if rng.random() < reorder else delay), n, 1 - i, d))
        while wire and wire[0][0] <= now:
            _, _, to, d = heapq.heappop(wire)
            links[to].receive(d, now)
        links[0].events()
        for ev in links[1].events():
            if isinstance(ev, Received):
                for out in reasm.feed(ev.vc, ev.recs):
                    if isinstance(out, Delivered) and t0 is not None:
                        delivered += len(out.message.payload)
                links[1].release(ev.vc, len(ev.recs))
        if t0 is None and links[0].up and links[1].up:
            t0 = now
    c = links[0].counters
    return {"gbps": delivered * 8 / seconds / 1e9, "tx_mps": c["tx_mps"], "rtx_mps": c["rtx_mps"],
            "fast_rtx_mps": c["fast_rtx_mps"], "timeout_rtx_mps": c["timeout_rtx_mps"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=2.0, help="virtual seconds per case (default 2)")
    ap.add_argument("--rate", type=float, default=1.0, help="cable rate each way, Gbit/s (default 1)")
    ap.add_argument("--delay", type=float, default=1.0, help="one-way delay, ms (default 1, as impair.py)")
    ap.add_argument("--max-mps", type=int, default=1600, help="micropackets per datagram (36: a 1500 MTU)")
    ap.add_argument("--impl", choices=("CLink", "Link"), default="CLink")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if not (0 < args.seconds <= 60 and 0 < args.rate <= 100 and 0 <= args.delay <= 1000
            and 1 <= args.max_mps <= 1600):
        ap.error("--seconds 0..60, --rate 0..100, --delay 0..1000, --max-mps 1..1600")
    impl = CLink if args.impl == "CLink" else Link
    print(f"{args.impl}, {args.rate:g} Gbit/s each way, {args.delay:g} ms one way, {args.max_mps} micropackets "
          f"per datagram, {args.seconds:g} virtual s per case")
    print(f"{'case':<34}{'Gbit/s':>8}{'x lossless':>12}{'resent/sent':>13}{'fast':>10}{'timeout':>10}")
    base = None
    for name, imp in CASES.items():
        r = goodput(impl, args.seconds, args.rate * 1e9, args.delay / 1000, imp, args.seed, args.max_mps)
        base = base or r["gbps"]
        print(f"{name:<34}{r['gbps']:>8.3f}{r['gbps'] / base:>12.2f}{r['rtx_mps'] / max(1, r['tx_mps']):>13.3f}"
              f"{r['fast_rtx_mps']:>10}{r['timeout_rtx_mps']:>10}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
