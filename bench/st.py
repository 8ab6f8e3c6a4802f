#!/usr/bin/env python3
"""ST goodput against TCP over gsn0, between the same two hosts, in one run (root).

    sudo .venv/bin/python bench/st.py [--size-mib 1024]

Two hosts and a gsn-switch in namespaces.  (1) `stp send` of a --size-mib file on
VC3 (mapped by stpd, no copy through the API socket); (2) iperf3 TCP over gsn0 for
the same number of bytes.  Prints both in Gbit/s and the ratio ST/TCP
(target: >= 1.2).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from lab.netns import BIN, Fabric, poll  # noqa: E402
from stpd.client import StClient  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=1024)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/st.py: needs root (network namespaces)", file=sys.stderr)
        return 1
    size = args.size_mib << 20
    with Fabric(2, prefix="stb", keys=False) as fab:  # plain cables: the compiled data plane
        apis = fab.start_stpds(fab.up(v6=False), "--log-level", "warning")
        src = fab.tmp / "st.bin"
        with open(src, "wb") as f:
            for _ in range(args.size_mib):
                f.write(os.urandom(1 << 20))
        (fab.tmp / "in").mkdir()
        rx = subprocess.Popen([str(BIN / "stp"), "--socket", apis[1], "recv", str(fab.tmp / "in")],
                              stdout=subprocess.DEVNULL)
        poll(lambda: 5001 in StClient(apis[1]).status()["listeners"], 10)
        r = subprocess.run([str(BIN / "stp"), "--socket", apis[0], "send", "--vc", "3", str(src), "192.0.2.2"],
                           capture_output=True, text=True, timeout=900)
        rx.wait(60)
        m = re.search(r"in ([\d.]+) s", r.stdout)
        st_gbps = size * 8 / float(m.group(1)) / 1e9 if m else 0.0
        tcp_gbps = fab.iperf3(1, 2, "-n", str(size))
    print(f"ST  ({args.size_mib} MiB on VC3)   {st_gbps:6.2f} Gbit/s")
    print(f"TCP ({args.size_mib} MiB, iperf3)  {tcp_gbps:6.2f} Gbit/s")
    print(f"ST/TCP                  {st_gbps / tcp_gbps if tcp_gbps else float('nan'):6.2f}   (target >= 1.2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
