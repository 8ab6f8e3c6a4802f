"""A userspace stand-in for `tc netem loss L duplicate D [delay 1ms reorder R]` on one
UDP cable (this kernel has no sch_netem).  Run inside a namespace:

    python impair.py LISTEN_HOST:PORT  INNER_PEER_HOST:PORT  OUTER_BIND_HOST:PORT  OUTER_PEER_HOST:PORT
                     LOSS DUP REORDER SEED [FRAG_MTU]

Datagrams from the inner peer (gsnd) arriving on LISTEN go out of OUTER_BIND to
OUTER_PEER (the switch port), and the other way round.  Each datagram is lost with
probability LOSS and sent twice with DUP.  With REORDER > 0, as netem's
`delay 1ms reorder R` does, each copy is sent at once with probability REORDER or else
delayed by 1 ms, so the prompt ones overtake.  With REORDER 0 nothing is delayed, so a
loss-only or duplication-only run adds no latency to the path it impairs.
With FRAG_MTU, LOSS is per IP packet on an underlay of that MTU: a datagram that
would travel as k fragments is lost with probability 1 - (1 - LOSS)**k, as one
lost fragment loses the whole datagram.

The relay itself is impair.c (a Python relay capped the link it was measuring below
1 Gbit/s); this script compiles it once into build/ (keyed by the source's hash) and
runs it in its place.
"""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).with_name("impair.c")
BUILD = Path(__file__).resolve().parents[2] / "build"


def binary() -> Path:
    """The compiled relay for the current source, built if missing."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    exe = BUILD / f"impair-{digest}"
    if not exe.exists():
        BUILD.mkdir(exist_ok=True)
        tmp = exe.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run(["cc", "-O2", "-Wall", "-o", str(tmp), str(SOURCE), "-lm"], check=True)
        os.replace(tmp, exe)  # atomic: concurrent builders never run a half-written file
    return exe


if __name__ == "__main__":
    exe = binary()
    os.execv(exe, [str(exe), *sys.argv[1:]])
