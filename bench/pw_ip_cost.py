#!/usr/bin/env python3
"""CPU cost per IP packet of IP over PacketWay's Python stages, measured as thread CPU
time (not wall time, so a loaded machine shifts it little):

  pw0 tx   IpNode.from_tun + encoding the L3 packet (what pktway ip does per TUN read)
  router   Engine.from_san_bytes + encoding for the next SAN (one half-router crossing,
           through the twin: both halves of one pktwayd)
  pw0 rx   IpNode.from_pw_bytes (decode, checks, learning) up to the TUN write

    .venv/bin/python bench/pw_ip_cost.py [--packets 20000]

Prints microseconds per packet per stage for IP packets of 1500, 8168 and 65512 bytes
(pw0's MTU on a 1024- and an 8192-word route) and the load average."""

from __future__ import annotations

import argparse
import ipaddress
import os
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from pktwayd.engine import Engine  # noqa: E402
from pktwayd.ipnode import IpNode  # noqa: E402
from pktwayd.routing import HalfRouter, NodeEntry  # noqa: E402
from pktwayd.eep import L2RH  # noqa: E402

A, B, RA, RB = 0x40, 0x60, 0x50, 0x51
ULA_A, ULA_B = bytes.fromhex("024753010100"), bytes.fromhex("024753010200")


def ip_packet(size: int) -> bytes:
    src, dst = ipaddress.IPv4Address("10.77.0.1").packed, ipaddress.IPv4Address("10.77.0.2").packed
    return struct.pack(">BBHHHBBH4s4s", 0x45, 0, size, 1, 0x4000, 64, 6, 0, src, dst) + os.urandom(size - 20)


def cpu_us(fn, n: int) -> float:
    t0 = time.thread_time()
    for _ in range(n):
        fn()
    return (time.thread_time() - t0) / n * 1e6


def router() -> tuple[Engine, Engine]:
    ha = HalfRouter(RA, 0x100, 8192, RB, (NodeEntry(A, sr=(L2RH(ULA_A),)),), sn=1)
    hb = HalfRouter(RB, 0x101, 8192, RA, (NodeEntry(B, sr=(L2RH(ULA_B),)),), sn=1)
    ea, eb = Engine(ha), Engine(hb)
    for _ in range(3):  # exchange LRTs until each knows the other's SAN
        for src, dst in ((ea, eb), (eb, ea)):
            for where, _to, pkt in src.powerup() if _ == 0 else src.twin_up():
                if where == "twin":
                    dst.from_twin(pkt)
    return ea, eb


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=20000)
    args = ap.parse_args()
    n = args.packets
    print("load average:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    ea, eb = router()
    print(f"{'IP bytes':>9} {'pw0 tx us':>10} {'router us':>10} {'pw0 rx us':>10} {'total us':>9}")
    for size in (1500, 8168, 65512):
        raw = ip_packet(size)
        tx = IpNode(A, peers={"10.77.0.2": B})
        rx = IpNode(B, peers={"10.77.0.1": A})
        (_, pkt, _), = tx.from_tun(raw, 0.0)
        wire = pkt.encode()

        def stage_tx():
            for action in tx.from_tun(raw, 0.0):
                action[1].encode()

        def stage_router():
            for where, _to, p in ea.from_san_bytes(wire, src_route=ULA_A):
                if where == "twin":
                    for _w, _t, q in eb.from_twin(p):
                        q.encode()

        out = ea.from_san_bytes(wire, src_route=ULA_A)
        assert out and out[0][0] == "twin", out
        assert eb.from_twin(out[0][2])[0][0] == "san"

        def stage_rx():
            rx.from_pw_bytes(wire, "pw0", ULA_A, 0.0)

        assert rx.from_pw_bytes(wire, "pw0", ULA_A, 0.0)[-1] == ("tun", raw)
        costs = [cpu_us(f, n if size < 10000 else n // 4) for f in (stage_tx, stage_router, stage_rx)]
        print(f"{size:>9} {costs[0]:>10.2f} {costs[1]:>10.2f} {costs[2]:>10.2f} {sum(costs):>9.2f}")
    print("load average:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
