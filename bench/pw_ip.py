#!/usr/bin/env python3
"""IP over PacketWay against IP over GSN, measured in one run (root needed).

    sudo .venv/bin/python bench/pw_ip.py [--seconds 5] [--mtu-words 8192]

Cases:
  (p2p)    gsnd <-> gsnd over one cable, gsn0 (bench/ip_over_gsn.py case a) — the anchor
  (routed) host on GSN fabric A -> pktwayd (two half-routers) -> host on GSN fabric B, over
           pw0 (pktway ip) on both hosts; every fabric is gsnd - gsn-switch - gsnd
For each: iperf3 TCP single stream and -P 4, and ping RTT (average of 20); prints the
ratio routed/p2p (issue 16 target: >= 0.7 once the compiled data plane lands) and `uptime`,
the CPU each of the routed path's 9 processes spent per routed packet and per GB through pw0,
and the bound that puts on 2 cores: Gbit/s <= 8 * 2 / (sum of CPU s per GB).
``--python``: pw0 and pktwayd without their compiled fast path (PKTWAY_FASTPATH=0), to
compare the two in alternating runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from lab.netns import BIN, Fabric, poll  # noqa: E402
from daemons.runtime.control import request  # noqa: E402
from ip_over_gsn import case_a, cpu_seconds, measure  # noqa: E402
from pktwayd.constants import FAST_ENV  # noqa: E402

H_A, R_A, R_B, H_B = 0x40, 0x50, 0x51, 0x60


def forwarded(ctl) -> int:
    """Packets pktwayd sent on its SANs (both directions: data and TCP's ACKs)."""
    return sum(h["counters"].get("tx_packets", 0) for h in request(str(ctl), {"cmd": "routes"})["halves"])


def routed(seconds: float, mtu_words: int) -> dict:
    with Fabric(2, prefix="pwba", keys=False) as fa, Fabric(2, prefix="pwbb", keys=False) as fb:
        ula_a, ula_b = fa.up(v6=False), fb.up(v6=False)
        cfg, ctl = fa.tmp / "pktwayd.toml", fa.tmp / "pktwayd.sock"
        halves = ((R_A, 0x100, fa, H_A, ula_a[0]), (R_B, 0x101, fb, H_B, ula_b[0]))
        cfg.write_text(f'[router]\nname = "bench"\ncontrol = "{ctl}"\nlog_level = "warning"\n' + "".join(
            f'[[half]]\naddr = {a}\nsan_id = {s}\nmtu = {mtu_words}\nulp = "{f.ulp_path(2)}"\n'
            f'[[half.node]]\naddr = {n}\nula = "{u}"\n' for a, s, f, n, u in halves))
        fa.spawn("pktwayd", 2, str(BIN / "pktwayd"), "-c", str(cfg))
        poll(lambda: ctl.exists() and all(h["ulp_connected"] and len(h["rts"]) == 2
                                          for h in request(str(ctl), {"cmd": "routes"})["halves"]), 15,
             what="pktwayd up")
        for fab, me, peer, ula, ip, peer_ip in ((fa, H_A, H_B, ula_a[1], "10.77.0.1", "10.77.0.2"),
                                                 (fb, H_B, H_A, ula_b[1], "10.77.0.2", "10.77.0.1")):
            fab.spawn("pw0", 1, str(BIN / "pktway"), "ip", "--ulp", fab.ulp_path(1), "--addr", hex(me), "--router", ula,
                      "--peer", f"{peer_ip}={peer:#x}", "--control", str(fab.tmp / "pw0.sock"))
            poll(lambda: fab.ns_exec(1, "ip", "link", "show", "pw0", check=False).returncode == 0, 10, what="pw0")
            fab.ns_exec(1, "ip", "addr", "add", f"{ip}/24", "dev", "pw0")
            fab.ns_exec(1, "ip", "link", "set", "pw0", "up")
        poll(lambda: request(str(fa.tmp / "pw0.sock"), {"cmd": "status"})["mtu"] != 1500, 10, what="pw0 MTU")
        mtu = request(str(fa.tmp / "pw0.sock"), {"cmd": "status"})["mtu"]

        def run(i, *argv):
            return (fa if i == 1 else fb).ns_exec(1, *argv, check=False, timeout=300)

        poll(lambda: run(1, "ping", "-c", "1", "-W", "1", "10.77.0.2").returncode == 0, 15, what="pw0 ping")
        procs = {"pw0 A": fa.procs["pw0"], "pktwayd": fa.procs["pktwayd"], "pw0 B": fb.procs["pw0"],
                 "gsnd A1": fa.procs["gsnd1"], "switch A": fa.procs["switch"], "gsnd A2": fa.procs["gsnd2"],
                 "gsnd B2": fb.procs["gsnd2"], "switch B": fb.procs["switch"], "gsnd B1": fb.procs["gsnd1"]}

        def pw0_bytes() -> int:  # what host A's pw0 sent (iperf3's data, A -> B)
            return int(run(1, "cat", "/sys/class/net/pw0/statistics/tx_bytes").stdout)

        cpu0 = {k: cpu_seconds([p.pid]) for k, p in procs.items()}
        fwd0, bytes0 = forwarded(ctl), pw0_bytes()
        out = measure(run, ["ip", "netns", "exec", fb.host_ns[0]], "10.77.0.2", seconds)
        packets = max(1, forwarded(ctl) - fwd0)
        gb = max(1, pw0_bytes() - bytes0) / 1e9
        cpu = {k: cpu_seconds([p.pid]) - cpu0[k] for k, p in procs.items()}
        out["cpu_us_per_packet"] = {k: v / packets * 1e6 for k, v in cpu.items()}
        out["cpu_s_per_gb"] = {k: v / gb for k, v in cpu.items()}
        out["packets"] = packets
        out["pw0_mtu"] = mtu
        out["router_counters"] = {k: v for h in request(str(ctl), {"cmd": "routes"})["halves"]
                                  for k, v in h["counters"].items() if "drop" in k or "over_mtu" in k}
        out["pw0_counters"] = {side: {k: v for k, v in request(str(fab.tmp / "pw0.sock"), {"cmd": "status"})[
            "counters"].items() if not k.startswith(("tx_ipv", "rx_ipv"))} for side, fab in (("A", fa), ("B", fb))}
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--mtu-words", type=int, default=8192, help="both SANs' MTU in 8-byte words (pw0 MTU = 8*this - 24)")
    ap.add_argument("--python", action="store_true", help="pw0 and pktwayd on their Python path only")
    args = ap.parse_args()
    if args.python:
        os.environ[FAST_ENV] = "0"  # the daemons inherit it
    if os.geteuid() != 0:
        print("pw_ip: needs root (network namespaces)", file=sys.stderr)
        return 2
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    res = {"p2p": case_a(args.seconds), "routed": routed(args.seconds, args.mtu_words)}
    print(f"{'case':<8} {'tcp1 Gbit/s':>12} {'tcp4 Gbit/s':>12} {'rtt ms':>8}")
    for name, r in res.items():
        print(f"{name:<8} {r['tcp1']:>12.3f} {r['tcp4']:>12.3f} {r['rtt_ms']:>8.3f}")
    p2p, rt = res["p2p"], res["routed"]
    print(f"routed/p2p: tcp1 {rt['tcp1'] / p2p['tcp1']:.3f}x  tcp4 {rt['tcp4'] / p2p['tcp4']:.3f}x  "
          f"(pw0 MTU {rt['pw0_mtu']})")
    print(f"CPU us per routed packet (whole run: tcp1, tcp4, ping; {rt['packets']} packets):",
          "  ".join(f"{k} {v:.0f}" for k, v in rt["cpu_us_per_packet"].items()))
    per_gb = rt["cpu_s_per_gb"]
    print("CPU s per GB through pw0:", "  ".join(f"{k} {v:.2f}" for k, v in per_gb.items()))
    print(f"CPU bound on 2 cores: 8 * 2 / {sum(per_gb.values()):.2f} = {16 / sum(per_gb.values()):.3f} Gbit/s"
          f" ({'Python path' if args.python else 'compiled fast path'})")
    print("router drops:", json.dumps(rt["router_counters"]))
    print("pw0 counters (besides IP packets sent/received):", json.dumps(rt["pw0_counters"]))
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
