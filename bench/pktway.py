#!/usr/bin/env python3
"""PacketWay forwarding speed: 64 KiB EEP packets from a host on GSN SAN A through
one pktwayd router (two half-routers) to a host on GSN SAN B, beside the anchor
measured in the same run: the same 64 KiB payloads between two gsnd point-to-point.

    .venv/bin/python bench/pktway.py [--seconds 5] [--size 65536]

Every SAN is a back-to-back gsnd pair on loopback (no switch): host A's gsnd -
router half A's gsnd, router half B's gsnd - host B's gsnd.  Target: ratio >= 0.7."""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from daemons.runtime.control import request  # noqa: E402
from daemons.ulpclient import UlpClient  # noqa: E402
from lab.cpu import cpu_seconds  # noqa: E402
from pktwayd.constants import ETHERTYPE_PKTWAY, PT  # noqa: E402
from pktwayd.eep import Packet  # noqa: E402
from ulp import _free_udp_ports, _sender as _ulp_sender, measure, start_pair, stop  # noqa: E402

H_A, R_A, R_B, H_B = 0x40, 0x50, 0x51, 0x60
ULAS = ["02:00:00:00:01:0a", "02:00:00:00:01:0b", "02:00:00:00:01:0c", "02:00:00:00:01:0d"]  # HA RA RB HB


def _sender(path, router_ula, size, seconds):
    c = UlpClient(path)
    c.bind(ETHERTYPE_PKTWAY)
    raw = Packet(dt=H_B, sa=H_A, pt=PT.USER, data=os.urandom(size)).encode()
    end = time.perf_counter() + seconds + 1.0
    while time.perf_counter() < end:
        c.send(router_ula, raw, vc=1, ethertype=ETHERTYPE_PKTWAY)


def start_routed(tmp, procs):
    gsnd = os.path.join(os.path.dirname(sys.executable), "gsnd")
    dirs = [f"{tmp}/{n}" for n in ("ha", "ra", "rb", "hb")]
    ports = _free_udp_ports(4)  # so that benches run beside each other
    for i, (d, ula) in enumerate(zip(dirs, ULAS)):
        peer = ports[i ^ 1]
        procs.append(subprocess.Popen([gsnd, "--local", f"127.0.0.1:{ports[i]}", "--peer", f"127.0.0.1:{peer}",
                                       "--ula", ula, "--runtime-dir", d, "--log-level", "warning", "--no-tap"]))
    cfg = f"{tmp}/pktwayd.toml"
    with open(cfg, "w") as f:
        f.write(f'[router]\nname = "bench"\ncontrol = "{tmp}/pktwayd.sock"\nlog_level = "warning"\n')
        for addr, san, d, node, ula in ((R_A, 0x100, dirs[1], H_A, ULAS[0]), (R_B, 0x101, dirs[2], H_B, ULAS[3])):
            f.write(f'[[half]]\naddr = {addr}\nsan_id = {san}\nmtu = 0\nulp = "{d}/gsn0.ulp"\nmap = false\n'
                    f'[[half.node]]\naddr = {node}\nula = "{ula}"\n')
    procs.append(subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "pktwayd"), "-c", cfg]))
    deadline = time.monotonic() + 60  # a loaded machine starts Python daemons slowly
    while True:
        try:
            r = request(f"{tmp}/pktwayd.sock", {"cmd": "routes"})
            if all(h["ulp_connected"] and len(h["rts"]) == 2 for h in r["halves"]):
                break
        except OSError:
            pass
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            raise SystemExit("bench: pktwayd did not come up in 60 s (or a daemon exited)")
        time.sleep(0.05)
    return dirs


def clients_cpu() -> float:
    """CPU seconds of this bench's reaped children: the sender and receiver processes
    once ``measure`` has joined them (the daemons still run, so are not in it)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def vc1_messages(ctl: str) -> int:
    """Messages a gsnd has delivered to its ULP clients on VC1."""
    return request(ctl, {"cmd": "status"})["status"]["per_vc"]["rx_messages"][1]


def anchor_run(dirs, ulas, size, seconds, procs):
    """The anchor, with the CPU each of its processes spent per Message delivered."""
    before, c0, m0 = [cpu_seconds(p.pid) for p in procs], clients_cpu(), vc1_messages(f"{dirs[1]}/gsn0.ctl")
    rate, gbps, _ = measure((f"{dirs[1]}/gsn0.ulp",), _ulp_sender, (f"{dirs[0]}/gsn0.ulp", ulas[1], size, 1, seconds),
                         seconds)
    n = max(1, vc1_messages(f"{dirs[1]}/gsn0.ctl") - m0)
    cpu = [cpu_seconds(p.pid) - b for p, b in zip(procs, before)] + [clients_cpu() - c0]
    return rate, gbps, [c / n for c in cpu]


def routed_run(tmp, dirs, size, seconds, procs):
    before, c0 = [cpu_seconds(p.pid) for p in procs], clients_cpu()
    rate, gbps, _ = measure((f"{dirs[3]}/gsn0.ulp",), _sender,
                         (f"{dirs[0]}/gsn0.ulp", bytes.fromhex(ULAS[1].replace(":", "")), size, seconds), seconds,
                         ethertype=ETHERTYPE_PKTWAY, overhead=24, idle=2.0)  # 24: EEP header and TAIL
    counters = request(f"{tmp}/pktwayd.sock", {"cmd": "routes"})["halves"][0]["counters"]
    n = max(1, counters.get("l3_forwarded", 0))
    cpu = [cpu_seconds(p.pid) - b for p, b in zip(procs, before)] + [clients_cpu() - c0]
    return rate, gbps, counters, [c / n for c in cpu]


def per_packet(names, cpu, rate) -> str:
    """CPU per packet of each process, their sum, the rate that sum allows on this
    machine's cores, and how near the measured rate came to it."""
    total = sum(cpu)
    bound = (os.cpu_count() or 1) / total
    return (", ".join(f"{n} {c * 1e6:.0f}" for n, c in zip(names, cpu)) +
            f" us; sum {total * 1e6:.0f} us: {os.cpu_count()} cores allow {bound:.0f}/s, ran at {rate / bound:.0%}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--size", type=int, default=65536)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="pwbench-")
    procs: list = []
    try:
        procs, pair_dirs, pair_ulas = start_pair(tmp, procs)
        dirs = start_routed(tmp, procs)
        anchor_rate, anchor_gbps, anchor_cpu = anchor_run(pair_dirs, pair_ulas, args.size, args.seconds, procs[:2])
        rate, gbps, counters, cpu = routed_run(tmp, dirs, args.size, args.seconds, procs[2:])
        print(f"{'case':<40}{'pkts/s':>10}{'Gbit/s':>10}")
        print(f"{'gsnd point-to-point (anchor)':<40}{anchor_rate:>10.0f}{anchor_gbps:>10.3f}")
        print(f"{'through one pktwayd router':<40}{rate:>10.0f}{gbps:>10.3f}")
        print(f"ratio {gbps / anchor_gbps:.3f} (target >= 0.7); router half A: "
              f"{counters.get('l3_forwarded', 0)} forwarded, {counters.get('tx_unreachable', 0)} unreachable")
        print("CPU per anchor Message: " + per_packet(["gsnd A", "gsnd B", "clients"], anchor_cpu, anchor_rate))
        names = ["gsnd host A", "gsnd router A", "gsnd router B", "gsnd host B", "pktwayd", "clients"]
        print("CPU per forwarded packet: " + per_packet(names, cpu, rate))
    finally:
        stop(procs, tmp)


if __name__ == "__main__":
    main()
