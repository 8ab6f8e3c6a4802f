#!/usr/bin/env python3
"""IP over GSN against OpenVPN and plain veth, measured in one run (root needed).

    sudo .venv/bin/python bench/ip_over_gsn.py [--seconds 5]

Cases, each between two network namespaces joined by a veth underlay:
  (a) gsnd <-> gsnd over one cable (back-to-back, gsn0 MTU 65280)
  (b) gsnd -> gsn-switch -> gsnd
  (c) OpenVPN 2.6 p2p TAP, --cipher none --auth none, TAP MTU 65280, 4 MiB socket buffers
  (d) plain veth, MTU 65280
For each: iperf3 TCP single stream and -P 4, and ping RTT (average of 20).
Prints the table and the ratios (a)/(c), (b)/(a) and the RTT ratio (a)/(c).
Targets (issue 3): (a) >= 1.0x (c) and >= 6.4 Gbit/s; (b) >= 0.7x (a); RTT(a) <= 1.5x RTT(c).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from daemons.netns import BIN, Fabric, iperf3_run, poll, sh  # noqa: E402


class Pair:
    """Two namespaces with a veth underlay 198.18.0.1/30 <-> 198.18.0.2/30."""

    def __init__(self, tag: str) -> None:
        self.ns = [f"gsnb{tag}a", f"gsnb{tag}b"]
        self.procs: list[subprocess.Popen] = []
        self.tmp = tempfile.mkdtemp(prefix="gsnbench-")
        for ns in self.ns:
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "link", "add", "ul0", "netns", self.ns[0], "type", "veth", "peer", "name", "ul0", "netns", self.ns[1])
        for i, ns in enumerate(self.ns, 1):
            sh("ip", "-n", ns, "addr", "add", f"198.18.0.{i}/30", "dev", "ul0")
            sh("ip", "-n", ns, "link", "set", "ul0", "mtu", "65280", "up")

    def spawn(self, i: int, *argv: str) -> None:
        self.procs.append(subprocess.Popen(["ip", "netns", "exec", self.ns[i - 1], *argv],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def exec(self, i: int, *argv: str, timeout=120):
        return subprocess.run(["ip", "netns", "exec", self.ns[i - 1], *argv], capture_output=True, text=True,
                              timeout=timeout)

    def close(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()
        for ns in self.ns:
            sh("ip", "netns", "del", ns, check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)


def measure(run, server_ns_exec, addr: str, seconds: float) -> dict:
    """run(i, *argv) executes in host i (1 = client side, 2 = server side)."""
    out = {}
    for label, extra in (("tcp1", []), ("tcp4", ["-P", "4"])):
        out[label] = iperf3_run(lambda *a: run(1, *a), server_ns_exec, addr, "-t", str(seconds), *extra)
    r = run(1, "ping", "-c", "20", "-i", "0.05", "-q", addr)
    rtt = [l for l in r.stdout.splitlines() if "rtt" in l]
    out["rtt_ms"] = float(rtt[0].split("=")[1].split("/")[1]) if rtt else float("nan")
    return out


def up_gsn0(run, i: int, addr: str) -> None:
    poll(lambda: run(i, "ip", "link", "show", "gsn0").returncode == 0, 10, what="gsn0")
    run(i, "ip", "addr", "add", addr, "dev", "gsn0")
    run(i, "ip", "link", "set", "gsn0", "up")


def case_a(seconds: float) -> dict:
    p = Pair("a")
    try:
        for i in (1, 2):
            p.spawn(i, str(BIN / "gsnd"), "--local", f"198.18.0.{i}:6400", "--peer", f"198.18.0.{3 - i}:6400",
                    "--ula", f"02:00:00:00:00:0{i}", "--runtime-dir", f"{p.tmp}/{i}", "--log-level", "error")
        for i in (1, 2):
            up_gsn0(p.exec, i, f"192.0.2.{i}/24")
        poll(lambda: p.exec(1, "ping", "-c", "1", "-W", "1", "192.0.2.2").returncode == 0, 15, what="gsn ping")
        return measure(p.exec, ["ip", "netns", "exec", p.ns[1]], "192.0.2.2", seconds)
    finally:
        p.close()


def case_b(seconds: float) -> dict:
    with Fabric(2, prefix="b") as fab:
        fab.up(v6=False)
        run = lambda i, *a: fab.ns_exec(i, *a, check=False, timeout=120)  # noqa: E731
        poll(lambda: run(1, "ping", "-c", "1", "-W", "1", "192.0.2.2").returncode == 0, 15, what="gsn ping")
        return measure(run, ["ip", "netns", "exec", fab.host_ns[1]], "192.0.2.2", seconds)


def case_c(seconds: float) -> dict:
    p = Pair("c")
    try:
        for i in (1, 2):
            p.spawn(i, "openvpn", "--dev", "ovpn0", "--dev-type", "tap", "--local", f"198.18.0.{i}", "--remote",
                    f"198.18.0.{3 - i}", "--proto", "udp", "--cipher", "none", "--auth", "none", "--tun-mtu", "65280",
                    "--sndbuf", "4194304", "--rcvbuf", "4194304", "--ifconfig", f"192.0.2.{i}", "255.255.255.0",
                    "--verb", "0")
        poll(lambda: p.exec(1, "ping", "-c", "1", "-W", "1", "192.0.2.2").returncode == 0, 20, what="openvpn ping")
        return measure(p.exec, ["ip", "netns", "exec", p.ns[1]], "192.0.2.2", seconds)
    finally:
        p.close()


def case_d(seconds: float) -> dict:
    p = Pair("d")
    try:
        return measure(p.exec, ["ip", "netns", "exec", p.ns[1]], "198.18.0.2", seconds)
    finally:
        p.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/ip_over_gsn.py: needs root (network namespaces)", file=sys.stderr)
        return 1
    if not shutil.which("openvpn") or not shutil.which("iperf3"):
        print("bench/ip_over_gsn.py: needs openvpn and iperf3 (apt-get install openvpn iperf3)", file=sys.stderr)
        return 1
    cases = {"(a) gsnd<->gsnd": case_a, "(b) via gsn-switch": case_b, "(c) OpenVPN TAP": case_c,
             "(d) plain veth": case_d}
    res = {}
    print(f"{'case':<22}{'TCP x1 Gbit/s':>15}{'TCP x4 Gbit/s':>15}{'ping RTT ms':>13}")
    for name, fn in cases.items():
        res[name] = r = fn(args.seconds)
        print(f"{name:<22}{r['tcp1']:>15.2f}{r['tcp4']:>15.2f}{r['rtt_ms']:>13.3f}", flush=True)
    a, b, c = res["(a) gsnd<->gsnd"], res["(b) via gsn-switch"], res["(c) OpenVPN TAP"]
    ratio = lambda x, y: x / y if y else float("nan")  # noqa: E731
    print(f"\n(a)/(c) TCP x1 {ratio(a['tcp1'], c['tcp1']):.2f}   x4 {ratio(a['tcp4'], c['tcp4']):.2f}   (target >= 1.0)")
    print(f"(b)/(a) TCP x1 {ratio(b['tcp1'], a['tcp1']):.2f}   x4 {ratio(b['tcp4'], a['tcp4']):.2f}   (target >= 0.7)")
    print(f"RTT (a)/(c)    {ratio(a['rtt_ms'], c['rtt_ms']):.2f}   (target <= 1.5)")
    print(f"(a) TCP x1 {a['tcp1']:.2f} Gbit/s against the 6.4 Gbit/s GSN line rate: {a['tcp1'] / 6.4:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
