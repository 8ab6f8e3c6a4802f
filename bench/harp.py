#!/usr/bin/env python3
"""harpd as a HARP server under load: resolutions served per second with 100,000
table entries, and harpd's RSS (root: it runs harpd in a scratch namespace).

    sudo .venv/bin/python bench/harp.py [--entries 100000] [--requests 100000]

The bench plays gsnd: it serves the ULP socket harpd connects to, registers
``--entries`` clients (InHARP_REQUEST, as real clients do), then sends
HARP_REQUESTs for random registered addresses with up to 512 outstanding and
counts the HARP_REPLYs.  The anchor is the same decode/lookup/encode loop run
in this process without harpd's I/O (the core alone).
Targets (issue 4): >= 20,000 resolutions/s, RSS <= 100 MB.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from ipaddress import IPv4Address, IPv4Network

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from daemons.constants import ETHERTYPE_ARP, ULA_HARP_SERVER  # noqa: E402
from lab.netns import BIN, sh  # noqa: E402
from daemons.wire.ulp import Frame, Op as UOp  # noqa: E402
from harpd.constants import Op  # noqa: E402
from harpd.core import HarpCore, LisConfig  # noqa: E402
from harpd.wire import Harp, decode  # noqa: E402

NET = IPv4Network("198.18.0.0/15")
SERVER_IP = IPv4Address("198.18.0.1")
SERVER_ULA = bytes.fromhex("020000000001")


def client(k: int) -> tuple[IPv4Address, bytes]:
    return NET.network_address + 2 + k, b"\x02\x01" + k.to_bytes(4, "big")


def rss_kb(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def pump(conn, frames, expect_op, window=512):
    """Send frames keeping at most `window` unanswered; count answers with ar$op = expect_op."""
    got = sent = 0
    conn.setblocking(False)
    buf = bytearray(70000)
    while got < len(frames):
        while sent < len(frames) and sent - got < window:
            try:
                conn.send(frames[sent])
                sent += 1
            except BlockingIOError:
                break
        try:
            n = conn.recv_into(buf)
        except BlockingIOError:
            time.sleep(0.0002)
            continue
        f = Frame.decode(memoryview(buf)[:n])
        if f.op is UOp.SEND and decode(f.payload).op is expect_op:
            got += 1
    return got


def core_anchor(entries: int, requests: int, rng) -> float:
    core = HarpCore([LisConfig(NET, role="server")], 0.0)
    core.set_port(SERVER_ULA, [SERVER_IP], 0.0)
    for k in range(entries):
        ip, ula = client(k)
        core.receive(ula, Harp(Op.INHARP_REQUEST, ip, IPv4Address(0), ula, ULA_HARP_SERVER).encode(), 1.0)
    core.outgoing()
    reqs = [Harp(Op.HARP_REQUEST, client(0)[0], client(rng.randrange(entries))[0], client(0)[1], bytes(6)).encode()
            for _ in range(requests)]
    t = time.perf_counter()
    for r in reqs:
        core.receive(client(0)[1], r, 2.0)
        core.outgoing()
    return requests / (time.perf_counter() - t)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--requests", type=int, default=100_000)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/harp.py: needs root (a scratch network namespace)", file=sys.stderr)
        return 1
    rng = random.Random(1)
    tmp = tempfile.mkdtemp(prefix="harpbench-")
    ns = f"gsnharpb{os.getpid() % 10000}"
    sh("ip", "netns", "add", ns)
    proc = None
    try:
        sh("ip", "-n", ns, "link", "add", "gsn0", "type", "veth", "peer", "name", "gsn0p")
        sh("ip", "-n", ns, "addr", "add", f"{SERVER_IP}/15", "dev", "gsn0")
        sh("ip", "-n", ns, "link", "set", "gsn0", "up")
        ulp_path = f"{tmp}/gsn0.ulp"
        lsock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        lsock.bind(ulp_path)
        lsock.listen(1)
        with open(f"{tmp}/harpd.options", "w") as f:
            f.write(f"lis gsn0 {NET}\nrole gsn0 server\n")
        proc = subprocess.Popen(["ip", "netns", "exec", ns, str(BIN / "harpd"), "-f", f"{tmp}/harpd.options",
                                 "--runtime-dir", f"{tmp}/run", "--state-dir", f"{tmp}/state", "--gsnd-runtime", tmp,
                                 "--log-level", "error"])
        lsock.settimeout(10)
        conn, _ = lsock.accept()
        for s in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            conn.setsockopt(socket.SOL_SOCKET, s, 8 << 20)
        conn.settimeout(10)
        Frame.decode(conn.recv(70000))  # BIND
        conn.send(Frame(UOp.STATUS, 1, 0, SERVER_ULA).encode())
        time.sleep(3)  # harpd reads gsn0's address and comes up as the LIS server
        regs = []
        for k in range(args.entries):
            ip, ula = client(k)
            h = Harp(Op.INHARP_REQUEST, ip, IPv4Address(0), ula, ULA_HARP_SERVER).encode()
            regs.append(Frame(UOp.RECV, 1, ETHERTYPE_ARP, ula, h).encode())
        t = time.perf_counter()
        done = pump(conn, regs, Op.INHARP_REPLY)
        reg_rate = done / (time.perf_counter() - t)
        me_ip, me_ula = client(0)
        reqs = [Frame(UOp.RECV, 1, ETHERTYPE_ARP, me_ula, Harp(
            Op.HARP_REQUEST, me_ip, client(rng.randrange(args.entries))[0], me_ula, bytes(6)).encode()).encode()
            for _ in range(args.requests)]
        t = time.perf_counter()
        done = pump(conn, reqs, Op.HARP_REPLY)
        rate = done / (time.perf_counter() - t)
        rss = rss_kb(proc.pid) / 1024
        anchor = core_anchor(args.entries, min(args.requests, 50_000), rng)
        print(f"table entries           {args.entries:>10,}")
        print(f"registrations/s         {reg_rate:>10,.0f}")
        print(f"resolutions/s (harpd)   {rate:>10,.0f}   target >= 20,000")
        print(f"harpd RSS               {rss:>10.1f} MB  target <= 100 MB")
        print(f"core alone (anchor)     {anchor:>10,.0f} /s   harpd/core = {rate / anchor:.2f}")
    finally:
        if proc:
            proc.kill()
            proc.wait()
        sh("ip", "netns", "del", ns, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
