#!/usr/bin/env python3
"""CPU cost per frame of gsnd's IP path, compiled data plane against the Python path.

    .venv/bin/python bench/dataplane_cost.py [--frames 2000] [--underlay-mtu 9000]

No namespaces, no root: two Endpoints on 127.0.0.1 UDP sockets, each "TAP" an
AF_UNIX datagram socketpair (tests/unit/dprig.py).  For a 64 KiB IPv4 frame and a
52-byte TCP ACK (66-byte frame) it times, per frame:
  send:    TAP read -> Message -> micropackets -> link -> sendmsg
  receive: recvmsg -> link -> reassembly -> Message -> frame -> TAP write
through the C pumps (tap_pump / dp_send / rx_pump; the block CRC four blocks at a time by
AVX-512 VPCLMULQDQ, one at a time by carry-less multiply, then by the tables, as far as the
CPU has them: daemons/_gsncrc.h, daemons/_crcvec.h) and once through the Python
path gsnd used before (Tap-style read, frame_to_message, Endpoint.send, link.datagrams,
UdpTransport.send_many / drain, receive, Endpoint.process, message_to_frame, write).
With --underlay-mtu the links cut their datagrams for that path MTU (micropackets per
datagram as gsnd's transport would learn it: io/pmtu.py), so a 64 KiB frame takes several
datagrams, as on a 9000- or 1500-byte underlay.  Syscalls are included in both;
trio's scheduling is not.  Times are the thread's CPU time (user + system,
time.thread_time), so a machine busy with other work inflates them less than it would
wall-clock times.
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from daemons import _link  # noqa: E402
from daemons.constants import ETHERTYPE_IPV4  # noqa: E402
from daemons.endpoint.core import MessageIn  # noqa: E402
from daemons.io.pmtu import max_mps_for  # noqa: E402
from daemons.wire.ether import frame_to_message, message_to_frame  # noqa: E402
from tests.unit.dprig import ULAS, Rig  # noqa: E402


def frame(size: int) -> bytes:
    ip = bytearray(size - 14)
    ip[0] = 0x45
    struct.pack_into("!H", ip, 2, size - 14)
    return ULAS[1] + ULAS[0] + struct.pack("!H", ETHERTYPE_IPV4) + bytes(ip)


def compiled(r: Rig, f: bytes, n: int) -> tuple[float, float]:
    a, b = r.eps
    ts = tr = 0.0
    for _ in range(n):
        r.taps[0].outer.send(f)
        t0 = time.thread_time()
        r.dps[0].tap_batch(1 << 30)
        r.dps[0].send_many(a.link.datagrams(r.now))
        t1 = time.thread_time()
        r.dps[1].rx(r.now)
        b.process(r.now)
        t2 = time.thread_time()
        ts, tr = ts + t1 - t0, tr + t2 - t1
        assert r.taps[1].frames() == [f]
        r.dps[1].send_many(b.link.datagrams(r.now))  # acks and credits back
        r.dps[0].rx(r.now)
        r.now += 1e-4
    return ts / n, tr / n


def python(r: Rig, f: bytes, n: int) -> tuple[float, float]:
    a, b = r.eps
    ta, tb = r.transports
    ts = tr = 0.0
    for _ in range(n):
        r.taps[0].outer.send(f)
        t0 = time.thread_time()
        got = os.read(r.taps[0].fd, 65600)
        d, et, pl = frame_to_message(got)
        a.send(1, d, et, pl)
        ta.send_many(a.link.datagrams(r.now))
        t1 = time.thread_time()
        for dg in tb.drain():
            b.link.receive(dg, r.now)
        b.process(r.now)
        for ev in b.events():
            if isinstance(ev, MessageIn):
                m = ev.message
                os.write(r.taps[1].fd, message_to_frame(m.d_ula, m.s_ula, m.ethertype, m.payload))
        t2 = time.thread_time()
        ts, tr = ts + t1 - t0, tr + t2 - t1
        assert r.taps[1].frames() == [f]
        ta_ = b.link.datagrams(r.now)
        tb.send_many(ta_)
        for dg in ta.drain():
            a.link.receive(dg, r.now)
        a.process(r.now)
        r.now += 1e-4
    return ts / n, tr / n


# (row, path, the block CRC of the compiled link: four blocks at a time by AVX-512 VPCLMULQDQ,
# one by carry-less multiply, or the tables; a row the CPU cannot run is left out)
CASES = [("compiled vpclmul", compiled, "vpclmul"), ("compiled clmul", compiled, "clmul"),
         ("compiled tables", compiled, "tables"), ("python", python, "tables")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=2000)
    ap.add_argument("--compiled-only", action="store_true", help="leave out the Python path's rows")
    ap.add_argument("--underlay-mtu", type=int, default=0,
                    help="cut datagrams for this path MTU (576..65535; default: loopback's)")
    args = ap.parse_args()
    if args.underlay_mtu and not 576 <= args.underlay_mtu <= 65535:
        ap.error(f"--underlay-mtu {args.underlay_mtu}: not in 576..65535")
    print(f"load average {os.getloadavg()[0]:.2f}"
          + (f"; underlay MTU {args.underlay_mtu}" if args.underlay_mtu else ""))
    default = _link.crc_impl()
    print(f"{'frame':<22}{'path':<18}{'send us':>10}{'receive us':>12}")
    for label, size in (("64 KiB IPv4", 65280 + 14), ("52-byte TCP ACK", 66)):
        f = frame(size)
        for name, fn, crc in CASES:
            if (args.compiled_only and fn is python) or _link.crc_impl(crc) != crc:
                continue
            r = Rig(dataplane=fn is compiled)
            try:
                r.bring_up()
                if args.underlay_mtu:
                    for ep in r.eps:
                        ep.link.max_mps = max_mps_for(args.underlay_mtu, socket.AF_INET)
                fn(r, f, 50)  # warm up
                s, rv = fn(r, f, args.frames)
            finally:
                r.close()
            print(f"{label:<22}{name:<18}{s * 1e6:>10.1f}{rv * 1e6:>12.1f}", flush=True)
    _link.crc_impl(default)
    return 0


if __name__ == "__main__":
    sys.exit(main())
