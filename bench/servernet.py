#!/usr/bin/env python3
"""ServerNet block goodput and 64-byte write latency, on one fabric and on both, beside
the anchor measured in the same run: bare UDP request/response between two Python
processes with the same packet sizes (an 84-byte write request, a 16-byte response)
and the same window (16 outstanding).

    .venv/bin/python bench/servernet.py [--block-mib 4] [--writes 300]

Two snetd nodes and one snet-router per fabric (X, Y) on loopback.  Goodput is the
block's payload over its time (<= 64-byte WRITEs through the router, doorbell after
every ACK); latency is one 64-byte WRITE's request-to-ACK time inside the node.
Targets: ServerNet >= 0.5x the anchor; both fabrics >= 1.6x one.  The CPU time each
process spends per WRITE of the block is printed too, and the anchor's per request: on
a loaded machine they move less than the rates do."""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from daemons.runtime.control import request  # noqa: E402

BIN = os.path.dirname(sys.executable)
A, B = 0x04001, 0x08001
BASE = 17500  # routers 17500/17501, node A 17510/17511, node B 17520/17521, anchor 17530-17532
REQ, RSP, WINDOW = 84, 16, 16  # datagram sizes of a 64-byte write and its response (with the envelope)

ANCHOR_SERVER = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", int(sys.argv[1])))
rsp = bytes(int(sys.argv[2]))
while True:
    data, addr = s.recvfrom(2048)
    s.sendto(rsp, addr)
"""


ANCHOR_RELAY = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", int(sys.argv[1])))
a, b = ("127.0.0.1", int(sys.argv[2])), ("127.0.0.1", int(sys.argv[3]))
while True:
    data, addr = s.recvfrom(2048)
    s.sendto(data, b if addr == a else a)
"""


def node_toml(tmp, name, me, peer, port):
    return f"""[node]
id = {me:#x}
name = "{name}"
control = "{tmp}/{name}.sock"
log_level = "warning"
timeout = 0.5
[fabric.x]
local = "127.0.0.1:{port}"
router = "127.0.0.1:{BASE}"
[fabric.y]
local = "127.0.0.1:{port + 1}"
router = "127.0.0.1:{BASE + 1}"
[[peer]]
id = {peer:#x}
name = "peer"
doorbell = 0x3000000
[[window]]
name = "buf"
page = 0x1000
pages = 4096
[[window]]
name = "bell"
page = 0x3000
access = "w"
interrupt = true
"""


def start(tmp: str, procs: list) -> None:
    for i, f in enumerate("xy"):
        procs.append(subprocess.Popen([f"{BIN}/snet-router", "--fabric", f, "--listen", f"127.0.0.1:{BASE + i}",
                                       "--port", f"0=127.0.0.1:{BASE + 10 + i}",
                                       "--port", f"1=127.0.0.1:{BASE + 20 + i}",
                                       "--route", f"{A:#x}=0", "--route", f"{B:#x}=1", "--log-level", "warning"]))
    for name, me, peer, port in (("a", A, B, BASE + 10), ("b", B, A, BASE + 20)):
        with open(f"{tmp}/{name}.toml", "w") as fh:
            fh.write(node_toml(tmp, name, me, peer, port))
        procs.append(subprocess.Popen([f"{BIN}/snetd", "-c", f"{tmp}/{name}.toml"]))
    deadline = time.monotonic() + 15
    while not all(os.path.exists(f"{tmp}/{n}.sock") for n in "ab"):
        if time.monotonic() > deadline:
            raise SystemExit("bench: the nodes did not start")
        time.sleep(0.05)


def cpu_s(pid: int) -> float:
    """CPU seconds a process's threads have run so far (schedstat: nanoseconds, where
    /proc/PID/stat counts 10 ms ticks, too coarse for a few hundred single WRITEs)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as fh:
                total += int(fh.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total / 1e9


def block_cost(tmp: str, length: int, fabric: str | None, procs: list) -> tuple[float, list[float]]:
    """(goodput MB/s, CPU us per 64-byte WRITE of each process: routers X, Y, node a, node b)."""
    before = [cpu_s(p.pid) for p in procs]
    rate = block(tmp, length, fabric)
    writes = -(-length // 64)
    return rate, [(cpu_s(p.pid) - b) / writes * 1e6 for p, b in zip(procs, before)]


def block(tmp: str, length: int, fabric: str | None) -> float:
    req = {"cmd": "block", "peer": "peer", "address": 0x1000000, "length": length, "seed": 1}
    r = request(f"{tmp}/a.sock", req | ({"fabric": fabric} if fabric else {}), timeout=600)
    if not r.get("ok"):
        raise SystemExit(f"bench: block failed: {r}")
    return length / r["elapsed_s"] / 1e6


def write_latency(tmp: str, n: int, fabric: str | None, procs: list) -> tuple[float, float, list[float]]:
    """(median request-to-ACK us inside node a, median us of the control request as this
    client sees it, CPU us per WRITE of each process: routers X, Y, nodes a, b)."""
    times, rtts = [], []
    before = [cpu_s(p.pid) for p in procs]
    for i in range(n):
        req = {"cmd": "write", "peer": "peer", "address": 0x1000000 + 64 * (i % 64), "data": "ab" * 64}
        t = time.perf_counter()
        r = request(f"{tmp}/a.sock", req | ({"fabric": fabric} if fabric else {}))
        rtts.append(time.perf_counter() - t)
        times.append(r["elapsed_s"])
    cpu = [(cpu_s(p.pid) - b) / n * 1e6 for p, b in zip(procs, before)]
    return statistics.median(times) * 1e6, statistics.median(rtts) * 1e6, cpu


def anchor(seconds: float, n_latency: int, relay: bool = False) -> tuple[float, float, list[float]]:
    """(goodput MB/s of 64-byte payloads at window 16, median RTT in us at window 1, CPU us
    per request of the client, the server and the relay); with ``relay``, every datagram
    passes a bare UDP relay process (a router's hop)."""
    procs = [subprocess.Popen([sys.executable, "-c", ANCHOR_SERVER, str(BASE + 30), str(RSP)])]
    if relay:
        procs.append(subprocess.Popen([sys.executable, "-c", ANCHOR_RELAY, str(BASE + 32), str(BASE + 31),
                                       str(BASE + 30)]))
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", BASE + 31))
        dst, req = ("127.0.0.1", BASE + (32 if relay else 30)), bytes(REQ)
        s.settimeout(0.2)
        deadline = time.monotonic() + 15
        while True:  # until the server (and relay) answer: on a loaded machine they start slowly
            s.sendto(req, dst)
            try:
                s.recv(2048)
                break
            except (TimeoutError, ConnectionRefusedError):
                if time.monotonic() > deadline:
                    raise SystemExit("bench: the anchor server did not answer") from None
        time.sleep(0.3)
        while True:  # late answers to the probes
            try:
                s.recv(2048)
            except TimeoutError:
                break
        for _ in range(WINDOW):
            s.sendto(req, dst)
        cpu0 = [time.process_time()] + [cpu_s(p.pid) for p in procs]
        done, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            try:
                s.recv(2048)  # one response frees one slot of the window
                done += 1
            except TimeoutError:
                pass  # a datagram lost: its slot is sent again
            s.sendto(req, dst)
        rate = done / (time.perf_counter() - t0)
        cpu = [(c - b) / max(done, 1) * 1e6 for c, b in zip([time.process_time()] + [cpu_s(p.pid) for p in procs], cpu0)]
        while True:
            try:
                s.recv(2048)
            except TimeoutError:
                break
        rtts = []
        for _ in range(n_latency):
            t = time.perf_counter()
            s.sendto(req, dst)
            try:
                s.recv(2048)
            except TimeoutError:
                continue
            rtts.append(time.perf_counter() - t)
        s.close()
        return rate * 64 / 1e6, statistics.median(rtts) * 1e6, cpu
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--block-mib", type=float, default=4.0)
    ap.add_argument("--writes", type=int, default=300)
    args = ap.parse_args()
    length = int(args.block_mib * (1 << 20))
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="snet-bench-") as tmp:
        try:
            start(tmp, procs)
            block(tmp, 1 << 16, None)  # warm up
            one, cost_one = block_cost(tmp, length, "x", procs)
            both, cost_both = block_cost(tmp, length, None, procs)
            window = request(f"{tmp}/a.sock", {"cmd": "status"})["tids_high_water"]
            lat_one, rtt_one, wcost_one = write_latency(tmp, args.writes, "x", procs)
            lat_both, rtt_both, wcost_both = write_latency(tmp, args.writes, None, procs)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait()
    anchor_gp, anchor_rtt, anchor_cpu = anchor(3.0, args.writes)
    relay_gp, relay_rtt, _ = anchor(3.0, args.writes, relay=True)
    print(f"block of {length} bytes, 64-byte WRITEs, window 16 (ServerNet I sizes)")
    print(f"  ServerNet, fabric X only   {one:8.3f} MB/s   ({one / anchor_gp:.2f}x anchor)")
    print(f"  ServerNet, X and Y         {both:8.3f} MB/s   "
          f"({both / anchor_gp:.2f}x anchor, {both / one:.2f}x one fabric)")
    print(f"  anchor: bare UDP req/resp  {anchor_gp:8.3f} MB/s   ({REQ}-byte requests, {RSP}-byte responses)")
    print(f"  (same, through a UDP relay {relay_gp:8.3f} MB/s   for scale: one hop like a router's)")
    print(f"  TIDs in flight at once (node a's high water): {window} of 16")
    print("CPU time per 64-byte WRITE of the block (user + system, us): router X, router Y, node a, node b")
    print("  fabric X only              " + "  ".join(f"{c:6.1f}" for c in cost_one))
    print("  X and Y                    " + "  ".join(f"{c:6.1f}" for c in cost_both))
    print("  anchor, per request        " + "  ".join(f"{c:6.1f}" for c in anchor_cpu) + "   (client, server)")
    print("64-byte write latency (median, request to ACK in node a; then the whole control request as snetctl sees it)")
    print(f"  ServerNet, fabric X only   {lat_one:8.1f} us   ({rtt_one:.1f} us)")
    print(f"  ServerNet, X and Y         {lat_both:8.1f} us   ({rtt_both:.1f} us)")
    print(f"  anchor: bare UDP RTT       {anchor_rtt:8.1f} us")
    print(f"  (same, through a UDP relay {relay_rtt:8.1f} us)")
    print("CPU time per single 64-byte WRITE of the latency runs (us): router X, router Y, node a, node b")
    print("  fabric X only              " + "  ".join(f"{c:6.1f}" for c in wcost_one))
    print("  X and Y                    " + "  ".join(f"{c:6.1f}" for c in wcost_both))
    print(f"targets: >= 0.5x anchor: {'met' if both >= 0.5 * anchor_gp else 'NOT met'}; "
          f"both fabrics >= 1.6x one: {'met' if both >= 1.6 * one else 'NOT met'}")


if __name__ == "__main__":
    main()
