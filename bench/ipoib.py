#!/usr/bin/env python3
"""IPoIB on ib0 over the InfiniBand-style fabric against OpenVPN at the same MTU, in one
run (root needed).

    sudo .venv/bin/python bench/ipoib.py [--seconds 5]

Cases, each between two host namespaces:
  (a) ipoibd -> ib-switch -> ipoibd (ib-sm beside the switch), ib0 MTU 2044
  (b) OpenVPN 2.6 p2p TAP, --cipher none --auth none, TAP MTU 2044
For each: iperf3 TCP single stream, the CPU seconds (utime + stime) of every daemon on the
path per GB it moved, and ping RTT (average of 20; the minimum beside it, less at the
mercy of a loaded machine's scheduler).
Targets (issue 15): TCP (a) >= 0.8x (b); RTT (a) <= 1.5x (b).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from bench.ip_over_gsn import Pair, cpu_seconds  # noqa: E402
from lab.netns import BIN, Fabric, iperf3_run, poll  # noqa: E402

MTU = 2044


def measure(run, server_prefix: list[str], addr: str, seconds: float, pids) -> dict:
    cpu0 = cpu_seconds(pids)
    out = {"tcp1": iperf3_run(lambda *a: run(1, *a), server_prefix, addr, "-t", str(seconds))}
    gb = out["tcp1"] * seconds / 8  # Gbit/s x s / 8
    out["cpu_s_per_gb"] = (cpu_seconds(pids) - cpu0) / gb if gb else float("nan")
    r = run(1, "ping", "-c", "20", "-i", "0.05", "-q", addr)
    rtt = [line for line in r.stdout.splitlines() if "rtt" in line]
    stats = rtt[0].split("=")[1].split("/") if rtt else ["nan"] * 4
    out["rtt_ms"], out["rtt_min_ms"] = float(stats[1]), float(stats[0])
    return out


def case_ipoib(seconds: float) -> dict:
    with Fabric(2, prefix="ibb") as fab:
        t = fab.tmp
        ports = "".join(f"[[port]]\nnumber = {i}\nlocal = \"198.18.{i}.1:4701\"\npeer = \"198.18.{i}.2:4800\"\n"
                        for i in (1, 2))
        (t / "sw.toml").write_text(f"[switch]\nguid = \"0x1001\"\nsm = \"127.0.0.1:4791\"\nruntime_dir = \"{t}/sw\"\n"
                                   + ports)
        fab._spawn("sm", fab.sw_ns, [str(BIN / "ib-sm"), "--listen", "0.0.0.0:4791", "--state-file",
                                     str(t / "sm" / "lids.json"), "--runtime-dir", str(t / "sm"), "--log-level",
                                     "error"])
        fab._spawn("sw", fab.sw_ns, [str(BIN / "ib-switch"), "-c", str(t / "sw.toml"), "--log-level", "error"])
        run = lambda i, *a: fab.ns_exec(i, *a, check=False, timeout=120)  # noqa: E731
        for i in (1, 2):
            fab.spawn(f"ipoibd{i}", i, str(BIN / "ipoibd"), "--guid", f"{0x0002C90300000000 + i:#x}", "--local",
                      f"198.18.{i}.2:4800", "--peer", f"198.18.{i}.1:4701", "--sm", f"198.18.{i}.1:4791",
                      "--runtime-dir", str(t / f"h{i}"), "--log-level", "error")
        for i in (1, 2):
            poll(lambda: f"mtu {MTU}" in run(i, "ip", "link", "show", "ib0").stdout, 15, what="ib0 up, MTU 2044")
            run(i, "ip", "addr", "add", f"192.0.2.{i}/24", "dev", "ib0")
            run(i, "ip", "link", "set", "ib0", "up")
        poll(lambda: run(1, "ping", "-c", "1", "-W", "1", "192.0.2.2").returncode == 0, 15, what="ib0 ping")
        pids = [p.pid for name, p in fab.procs.items() if name != "sm"]  # ipoibd x2, ib-switch
        return measure(run, ["ip", "netns", "exec", fab.host_ns[1]], "192.0.2.2", seconds, pids)


def case_openvpn(seconds: float) -> dict:
    p = Pair("ov")
    try:
        for i in (1, 2):
            p.spawn(i, "openvpn", "--dev", "ovpn0", "--dev-type", "tap", "--local", f"198.18.0.{i}", "--remote",
                    f"198.18.0.{3 - i}", "--proto", "udp", "--cipher", "none", "--auth", "none", "--tun-mtu", str(MTU),
                    "--ifconfig", f"192.0.2.{i}", "255.255.255.0", "--verb", "0")
        poll(lambda: p.exec(1, "ping", "-c", "1", "-W", "1", "192.0.2.2").returncode == 0, 20, what="openvpn ping")
        return measure(p.exec, ["ip", "netns", "exec", p.ns[1]], "192.0.2.2", seconds, [q.pid for q in p.procs])
    finally:
        p.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/ipoib.py: needs root (network namespaces)", file=sys.stderr)
        return 1
    if not shutil.which("openvpn") or not shutil.which("iperf3"):
        print("bench/ipoib.py: needs openvpn and iperf3 (apt-get install openvpn iperf3)", file=sys.stderr)
        return 1
    res = {}
    print(f"{'case':<28}{'TCP x1 Mbit/s':>15}{'ping RTT ms':>13}{'min ms':>8}{'CPU s/GB':>10}")
    for name, fn in (("(a) IPoIB ib0 via ib-switch", case_ipoib), ("(b) OpenVPN TAP", case_openvpn)):
        res[name] = r = fn(args.seconds)
        print(f"{name:<28}{r['tcp1'] * 1000:>15.1f}{r['rtt_ms']:>13.3f}{r['rtt_min_ms']:>8.3f}{r['cpu_s_per_gb']:>10.2f}",
              flush=True)
    a, b = res["(a) IPoIB ib0 via ib-switch"], res["(b) OpenVPN TAP"]
    ratio = lambda x, y: x / y if y else float("nan")  # noqa: E731
    print(f"\nTCP (a)/(b) {ratio(a['tcp1'], b['tcp1']):.2f} (target >= 0.8)   "
          f"RTT (a)/(b) {ratio(a['rtt_ms'], b['rtt_ms']):.2f} (target <= 1.5)   "
          f"CPU s/GB (a)/(b) {ratio(a['cpu_s_per_gb'], b['cpu_s_per_gb']):.2f}")
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
