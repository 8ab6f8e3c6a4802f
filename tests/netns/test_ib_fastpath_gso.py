"""ib/_ibfast.c's GSO runs where the route's MTU is below a UD packet (an underlay of
1500 bytes): the kernel refuses UDP_SEGMENT larger than the MTU, the batch falls back to
one datagram per message (the kernel fragments those) and nothing is lost or miscounted."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import socket, time
from ib import _ibfast, addr, packet
MAC, QPN = b"\\x00\\x02\\xc9\\x00\\x00\\x01", 0x48
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); s.setblocking(False); return s
cable, peer = udp(), udp()
tap, kernel = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
tap.setblocking(False)
p = _ibfast.Port(cable.fileno(), *peer.getsockname())
p.configure(2, True, MAC, [(tap.fileno(), True, QPN, 0xFFFF, 0xB1B, 2044)])
p.set_neighbours([(0, addr.remac(QPN, 3), 3, QPN, 0)])
frames = [addr.remac(QPN, 3) + MAC + b"\\x08\\x00" + bytes([k]) * 2000 for k in range(10)]
for f in frames:
    kernel.send(f)
assert p.tap_pump(0, 1.0, 64) is None
time.sleep(0.1)
got = []
while True:
    try:
        got.append(peer.recv(65535))
    except BlockingIOError:
        break
assert got == [p.tx(0, f, 1.0) for f in frames], [len(g) for g in got]
assert not [k for k in p.counters() if k[0] == "send"], p.counters()
print("ok", len(got))
"""


def test_gso_falls_back_below_the_route_mtu():
    ns = f"ibgso{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "mtu", "1500", "up"], check=True)
        r = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True,
                           text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        assert r.returncode == 0 and r.stdout.startswith("ok 10"), r.stdout + r.stderr
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
