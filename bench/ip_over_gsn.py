#!/usr/bin/env python3
"""IP over GSN against OpenVPN and plain veth, measured in one run (root needed).

    sudo .venv/bin/python bench/ip_over_gsn.py [--seconds 5] [--underlay-mtu 1500|9000|65280] [--impair]

Cases, each between two network namespaces joined by a veth underlay (MTU
--underlay-mtu, default 65280; (b)'s fabric uses it on every veth too, so that (b)/(a)
compares like with like):
  (a) gsnd <-> gsnd over one cable (back-to-back, gsn0 MTU 65280)
  (b) gsnd -> gsn-switch -> gsnd (the switch's compiled data path; (b-py) its Python one)
  (c) OpenVPN 2.6 p2p TAP, --cipher none --auth none, TAP MTU 65280, 4 MiB socket buffers
  (d) plain veth
  with --impair, (a) again through tests/netns/impair.py (compiled impair.c) on the cable:
  (a0) no loss (the impairer's own ceiling), (a1) 1% loss,
  (a5) 5% loss + 1% duplication + 25% reordering; (a1) and (a5) are shown against (a)
  and against (a0).  The impairer delays nothing in (a0) and (a1); in (a5), as netem's
  `delay 1ms reorder 25%`, it sends 25% of the datagrams at once and delays the rest by
  1 ms so that they are overtaken (reordering needs a delay), so (a5) also pays a 1 ms
  longer path
For each: iperf3 TCP single stream and -P 4, and ping RTT (average of 200, 10 ms apart); for (a)
and (c) the daemons' CPU seconds (utime + stime, /proc/PID/stat) per GB moved in the
single-stream run (for (b) the switch's alone), the whole machine's busy CPU per GB of
that run (every process and the kernel: lab/cpu.py machine_busy), and gsnd's resident
memory before any traffic.
Prints the table and the ratios (a)/(c), (b)/(a) and the RTT ratio (a)/(c).
Targets (issue 11): (a) >= 1.0x (c) and >= 6.4 Gbit/s; (b) >= 0.8x (a); RTT(a) <= 1.5x RTT(c);
(a1) >= 0.5x (a), (a5) >= 0.25x (a).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from lab.cpu import cpu_seconds, machine_busy  # noqa: E402
from lab.netns import BIN, Fabric, iperf3_run, poll, sh  # noqa: E402


class Pair:
    """Two namespaces with a veth underlay 198.18.0.1/30 <-> 198.18.0.2/30."""

    def __init__(self, tag: str, mtu: int = 65280) -> None:
        tag = f"{tag}{os.getpid() % 100000}"  # runs beside other benches on the machine
        self.ns = [f"gsnb{tag}a", f"gsnb{tag}b"]
        self.procs: list[subprocess.Popen] = []
        self.tmp = tempfile.mkdtemp(prefix="gsnbench-")
        for ns in self.ns:
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "link", "add", "ul0", "netns", self.ns[0], "type", "veth", "peer", "name", "ul0", "netns", self.ns[1])
        for i, ns in enumerate(self.ns, 1):
            sh("ip", "-n", ns, "addr", "add", f"198.18.0.{i}/30", "dev", "ul0")
            sh("ip", "-n", ns, "link", "set", "ul0", "mtu", str(mtu), "up")

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


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def measure(run, server_ns_exec, addr: str, seconds: float, pids=()) -> dict:
    """run(i, *argv) executes in host i (1 = client side, 2 = server side); pids: the
    daemons whose CPU time per GB the single-stream run reports.  The machine's busy CPU
    per GB of the same run (every process, iperf3 and the kernel included) is what the
    rates follow once both cores are busy, so ratios of it bound the ratios of rates."""
    out = {}
    for label, extra in (("tcp1", []), ("tcp4", ["-P", "4"])):
        cpu0, busy0 = cpu_seconds(*pids), machine_busy()
        out[label] = iperf3_run(lambda *a: run(1, *a), server_ns_exec, addr, "-t", str(seconds), *extra)
        if label == "tcp1":
            gb = out[label] * seconds / 8  # Gbit/s x s / 8 = GB
            out["machine_s_per_gb"] = (machine_busy() - busy0) / gb if gb else float("nan")
            if pids:
                out["cpu_s_per_gb"] = (cpu_seconds(*pids) - cpu0) / gb if gb else float("nan")
    r = run(1, "ping", "-c", str(PINGS), "-i", "0.01", "-q", addr)
    rtt = [line for line in r.stdout.splitlines() if "rtt" in line]
    out["rtt_ms"] = float(rtt[0].split("=")[1].split("/")[1]) if rtt else float("nan")
    return out


PINGS = 200  # ping -c 200 -i 0.01: the RTT is their average


def up_gsn0(run, i: int, addr: str) -> None:
    poll(lambda: run(i, "ip", "link", "show", "gsn0").returncode == 0, 30, what="gsn0")  # a loaded host starts slowly
    run(i, "ip", "addr", "add", addr, "dev", "gsn0")
    run(i, "ip", "link", "set", "gsn0", "up")


IMPAIR = os.path.join(os.path.dirname(__file__), "..", "tests", "netns", "impair.py")


def case_a(seconds: float, mtu: int = 65280, impair: tuple[float, float, float] | None = None) -> dict:
    """gsnd <-> gsnd; with ``impair`` (loss, dup, reorder) the cable runs through
    impair.py in host 1: gsnd1 -> 198.18.0.1:6500 -> (impaired) 198.18.0.1:6401 -> gsnd2."""
    p = Pair("a", mtu)
    try:
        peers = {1: "198.18.0.2:6400", 2: "198.18.0.1:6400"}
        if impair:
            p.spawn(1, sys.executable, IMPAIR, "198.18.0.1:6500", "198.18.0.1:6400", "198.18.0.1:6401",
                    "198.18.0.2:6400", *map(str, impair), "1")
            peers = {1: "198.18.0.1:6500", 2: "198.18.0.1:6401"}
        for i in (1, 2):
            p.spawn(i, str(BIN / "gsnd"), "--local", f"198.18.0.{i}:6400", "--peer", peers[i],
                    "--ula", f"02:00:00:00:00:0{i}", "--runtime-dir", f"{p.tmp}/{i}", "--log-level", "error")
        gsnds = [q.pid for q in p.procs[-2:]]
        for i in (1, 2):
            up_gsn0(p.exec, i, f"192.0.2.{i}/24")
        poll(lambda: p.exec(1, "ping", "-c", "1", "-W", "1", "192.0.2.2").returncode == 0, 15, what="gsn ping")
        rss = rss_mib(gsnds[0])
        out = measure(p.exec, ["ip", "netns", "exec", p.ns[1]], "192.0.2.2", seconds, gsnds)
        out["idle_rss_mib"] = rss
        return out
    finally:
        p.close()


def case_b(seconds: float, data_path: str = "compiled", mtu: int = 65280) -> dict:
    """gsnd -> gsn-switch -> gsnd; CPU s/GB is the switch's alone (its [switch] data_path:
    "compiled", the C SwitchPlane, or "python", its oracle)."""
    with Fabric(2, prefix="b", keys=False, switch_data_path=data_path,
                underlay_mtu=mtu) as fab:  # plain cables, like OpenVPN
        fab.up(v6=False)
        run = lambda i, *a: fab.ns_exec(i, *a, check=False, timeout=120)  # noqa: E731
        poll(lambda: run(1, "ping", "-c", "1", "-W", "1", "192.0.2.2").returncode == 0, 15, what="gsn ping")
        return measure(run, ["ip", "netns", "exec", fab.host_ns[1]], "192.0.2.2", seconds,
                       [switch_pid(fab.procs["switch"].pid)])


def switch_pid(wrapper: int) -> int:
    """The gsn-switch process under ``ip netns exec`` (which execs, so usually itself)."""
    try:
        with open(f"/proc/{wrapper}/task/{wrapper}/children") as f:
            children = f.read().split()
    except OSError:
        children = []
    return int(children[0]) if children else wrapper


def case_c(seconds: float, mtu: int = 65280) -> dict:
    p = Pair("c", mtu)
    try:
        for i in (1, 2):
            p.spawn(i, "openvpn", "--dev", "ovpn0", "--dev-type", "tap", "--local", f"198.18.0.{i}", "--remote",
                    f"198.18.0.{3 - i}", "--proto", "udp", "--cipher", "none", "--auth", "none", "--tun-mtu", "65280",
                    "--sndbuf", "4194304", "--rcvbuf", "4194304", "--ifconfig", f"192.0.2.{i}", "255.255.255.0",
                    "--verb", "0")
        poll(lambda: p.exec(1, "ping", "-c", "1", "-W", "1", "192.0.2.2").returncode == 0, 20, what="openvpn ping")
        return measure(p.exec, ["ip", "netns", "exec", p.ns[1]], "192.0.2.2", seconds, [q.pid for q in p.procs])
    finally:
        p.close()


def case_d(seconds: float, mtu: int = 65280) -> dict:
    p = Pair("d", mtu)
    try:
        return measure(p.exec, ["ip", "netns", "exec", p.ns[1]], "198.18.0.2", seconds)
    finally:
        p.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--underlay-mtu", type=int, default=65280, metavar="MTU",
                    help="the veth underlay's MTU for every case (1500, 9000, ...; default 65280)")
    ap.add_argument("--impair", action="store_true",
                    help="also (a) through the impairer (tests/netns/impair.c): with no loss, 1%% loss "
                         "(neither delayed), and 5%% loss + 1%% dup + 25%% reordering (netem's "
                         "delay 1ms reorder 25%%: 75%% of datagrams 1 ms late)")
    ap.add_argument("--cases", default="abcd", metavar="LETTERS",
                    help="which of (a) (b) (c) (d) to run, e.g. ac for a quick ratio against OpenVPN "
                         "(default abcd; --impair adds (a1) and (a5))")
    args = ap.parse_args()
    if not args.cases or set(args.cases) - set("abcd"):
        ap.error(f"--cases {args.cases!r}: letters from abcd")
    if not 1280 <= args.underlay_mtu <= 65535:
        ap.error(f"--underlay-mtu {args.underlay_mtu}: must be 1280..65535")
    if os.geteuid() != 0:
        print("bench/ip_over_gsn.py: needs root (network namespaces)", file=sys.stderr)
        return 1
    if not shutil.which("openvpn") or not shutil.which("iperf3"):
        print("bench/ip_over_gsn.py: needs openvpn and iperf3 (apt-get install openvpn iperf3)", file=sys.stderr)
        return 1
    mtu = args.underlay_mtu
    cases = {"(a) gsnd<->gsnd": lambda s: case_a(s, mtu), "(b) via gsn-switch": lambda s: case_b(s, mtu=mtu),
             "(b-py) switch in Python": lambda s: case_b(s, "python", mtu),
             "(c) OpenVPN TAP": lambda s: case_c(s, mtu), "(d) plain veth": lambda s: case_d(s, mtu)}
    cases = {name: fn for name, fn in cases.items() if name[1] in args.cases}
    if args.impair:
        # the impairer is a process of its own (tests/netns/impair.c): (a0) is its ceiling, the anchor the link's
        # loss recovery is judged against (as well as (a))
        cases["(a0) impairer, no loss"] = lambda s: case_a(s, mtu, (0.0, 0.0, 0.0))
        cases["(a1) 1% loss"] = lambda s: case_a(s, mtu, (0.01, 0.0, 0.0))
        cases["(a5) 5%/1%dup/25%reord"] = lambda s: case_a(s, mtu, (0.05, 0.01, 0.25))
    res = {}
    print(f"underlay MTU {mtu}; load average {os.getloadavg()[0]:.2f} at the start")
    print(f"{'case':<24}{'TCP x1 Gbit/s':>15}{'TCP x4 Gbit/s':>15}{'ping RTT ms':>13}{'CPU s/GB':>10}"
          f"{'machine s/GB':>14}{'idle RSS MiB':>14}")
    for name, fn in cases.items():
        res[name] = r = fn(args.seconds)
        print(f"{name:<24}{r['tcp1']:>15.2f}{r['tcp4']:>15.2f}{r['rtt_ms']:>13.3f}"
              f"{r.get('cpu_s_per_gb', float('nan')):>10.2f}{r['machine_s_per_gb']:>14.2f}"
              f"{r.get('idle_rss_mib', float('nan')):>14.1f}",
              flush=True)
    nan = dict.fromkeys(("tcp1", "tcp4", "rtt_ms", "cpu_s_per_gb", "machine_s_per_gb"), float("nan"))
    a, b, c = (res.get(k, nan) for k in ("(a) gsnd<->gsnd", "(b) via gsn-switch", "(c) OpenVPN TAP"))
    ratio = lambda x, y: x / y if y else float("nan")  # noqa: E731
    print(f"\n(a)/(c) TCP x1 {ratio(a['tcp1'], c['tcp1']):.2f}   x4 {ratio(a['tcp4'], c['tcp4']):.2f}   (target >= 1.0)")
    print(f"(b)/(a) TCP x1 {ratio(b['tcp1'], a['tcp1']):.2f}   x4 {ratio(b['tcp4'], a['tcp4']):.2f}   (target >= 0.8)")
    bp = res.get("(b-py) switch in Python", nan)
    print(f"(b-py)/(a) TCP x1 {ratio(bp['tcp1'], a['tcp1']):.2f}   switch CPU s/GB compiled {b['cpu_s_per_gb']:.2f}, "
          f"Python {bp['cpu_s_per_gb']:.2f} ({ratio(b['cpu_s_per_gb'], bp['cpu_s_per_gb']):.2f})")
    print(f"RTT (a)/(c)    {ratio(a['rtt_ms'], c['rtt_ms']):.2f}   (target <= 1.5)")
    print(f"(a) TCP x1 {a['tcp1']:.2f} Gbit/s against the 6.4 Gbit/s GSN line rate: {a['tcp1'] / 6.4:.2f}")
    print(f"CPU s/GB (a)/(c) {ratio(a['cpu_s_per_gb'], c['cpu_s_per_gb']):.2f}   (both daemons of each pair)")
    print(f"machine s/GB (c)/(a) {ratio(c['machine_s_per_gb'], a['machine_s_per_gb']):.2f}, (a)/(b) "
          f"{ratio(a['machine_s_per_gb'], b['machine_s_per_gb']):.2f}   (what the x1 ratios above reach on "
          f"2 busy cores)")
    if args.impair and "a" in args.cases:
        for name, target in (("(a1) 1% loss", 0.5), ("(a5) 5%/1%dup/25%reord", 0.25)):
            print(f"{name} / (a) TCP x1 {ratio(res[name]['tcp1'], a['tcp1']):.2f}   (target >= {target});"
                  f"  / (a0) {ratio(res[name]['tcp1'], res['(a0) impairer, no loss']['tcp1']):.2f}")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
