#!/usr/bin/env python3
"""ULP-socket throughput between two gsnd (back-to-back cable on loopback),
beside a bare UDP send/recv loop measured in the same run.

    .venv/bin/python bench/ulp.py [--seconds 5] [--cable-mtu 1500]

Prints messages/s and Gbit/s of payload for 1 KiB and 64 KiB messages on VC1 and
VC3, and each as a ratio of the bare-UDP anchor (same message size); then the
round trip of a 64-byte Message (ping-pong through both gsnd and back, median)
against a bare UDP ping-pong on loopback (targets, issue 11: 64 KiB >= 0.5x UDP,
64-byte round trip <= 2x UDP's)."""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from daemons.ulpclient import UlpClient  # noqa: E402
from daemons.constants import ULP_MAX_PAYLOAD  # noqa: E402
from daemons.wire.ulp import HEADER, Op  # noqa: E402

ETHERTYPE = 0x88B5
FIRST_WAIT_S = 10.0  # the receiver waits this long for the first Message


def _receiver(path, q, seconds, ethertype=ETHERTYPE, overhead=0, idle=1.0):
    """Count Messages of ``ethertype`` (payload bytes minus ``overhead`` each) for
    ``seconds`` from the first; stop early after ``idle`` quiet seconds once they came
    (the first may take longer: a loaded machine starts the sender slowly)."""
    c = UlpClient(path)
    c.bind(ethertype)
    buf = bytearray(ULP_MAX_PAYLOAD + HEADER.size)  # every frame lands here: no copy, no allocation
    q.put("ready")
    n = nbytes = 0
    t0 = None
    deadline = None
    while True:
        try:
            op, _, _, size = c.recv_into(buf, timeout=idle if t0 is not None else max(idle, FIRST_WAIT_S))
        except TimeoutError:
            break
        if op is not Op.RECV:
            continue
        if t0 is None:
            t0 = time.perf_counter()
            deadline = t0 + seconds
        n += 1
        nbytes += size - HEADER.size - overhead
        if time.perf_counter() > deadline:
            break
    q.put((n, nbytes, time.perf_counter() - (t0 or time.perf_counter())))


def _sender(path, peer, size, vc, seconds):
    c = UlpClient(path)
    c.bind(ETHERTYPE)
    payload = os.urandom(size)
    end = time.perf_counter() + seconds + 0.5
    while time.perf_counter() < end:
        c.send(peer, payload, vc=vc, ethertype=ETHERTYPE)


def cpu_ns(pid: int) -> int:
    """CPU time (ns) of every thread of ``pid`` so far (/proc/PID/task/*/schedstat)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended
    return total


def measure(rx_args: tuple, sender, tx_args: tuple, seconds: float, watch: tuple = (), **rx_kw):
    """A receiver process (``_receiver(*rx_args, q, seconds, **rx_kw)``) and a sender
    process; messages/s and Gbit/s as the receiver saw them, and the CPU µs per Message
    of the sender, of each pid in ``watch`` and of the receiver, from the sender's start
    to the receiver's count."""
    q = mp.Queue()
    r = mp.Process(target=_receiver, args=(*rx_args, q, seconds), kwargs=rx_kw)
    r.start()
    q.get(timeout=10)
    s = mp.Process(target=sender, args=tx_args)
    pids = [r.pid, *watch]
    before = [cpu_ns(p) for p in pids]
    s.start()
    pids.append(s.pid)
    before.append(0)
    n, nbytes, dt = q.get(timeout=seconds + 30)
    cpu = [cpu_ns(p) - b for p, b in zip(pids, before)]
    s.terminate()
    r.join()
    s.join()
    per = [c / 1e3 / max(n, 1) for c in (cpu[-1], *cpu[1:-1], cpu[0])]
    return n / dt, nbytes * 8 / dt / 1e9, per


def ulp_run(dirs, ulas, size, vc, seconds, gsnds=()):
    """Rate of ``size``-byte Messages from a client of gsnd a to one of gsnd b (and CPU
    µs per Message: sender, the ``gsnds`` pids, receiver)."""
    return measure((f"{dirs[1]}/gsn0.ulp",), _sender, (f"{dirs[0]}/gsn0.ulp", ulas[1], size, vc, seconds), seconds,
                   watch=gsnds)


def _udp_rx(port, q, seconds):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind(("127.0.0.1", port))
    s.settimeout(1.0)
    q.put("ready")
    n = nbytes = 0
    t0 = None
    while True:
        try:
            d = s.recv(65536)
        except TimeoutError:
            break
        if t0 is None:
            t0 = time.perf_counter()
        n += 1
        nbytes += len(d)
        if time.perf_counter() - t0 > seconds:
            break
    q.put((n, nbytes, time.perf_counter() - t0))


def udp_run(size, seconds):
    """Anchor: bare UDP datagrams of the same size, one sender and one receiver process."""
    size = min(size, 65000)
    port = 39000 + os.getpid() % 1000
    q = mp.Queue()
    r = mp.Process(target=_udp_rx, args=(port, q, seconds))
    r.start()
    q.get(timeout=10)

    def tx():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        payload = os.urandom(size)
        end = time.perf_counter() + seconds + 0.5
        while time.perf_counter() < end:
            s.sendto(payload, ("127.0.0.1", port))

    t = mp.Process(target=tx)
    t.start()
    n, nbytes, dt = q.get(timeout=seconds + 30)
    t.terminate()
    r.join()
    t.join()
    return n / dt, nbytes * 8 / dt / 1e9


ECHO_ETHERTYPE = 0x88B6


def _ulp_echo(path, q, seconds):
    """Send every 64-byte Message straight back to its source."""
    c = UlpClient(path)
    c.bind(ECHO_ETHERTYPE)
    buf = bytearray(2048)
    view = memoryview(buf)
    q.put("ready")
    while True:
        try:
            op, vc, _, size = c.recv_into(buf, timeout=seconds + 5)
        except TimeoutError:
            return
        if op is Op.RECV:
            c.send(bytes(view[4:10]), view[HEADER.size : size], vc=vc, ethertype=ECHO_ETHERTYPE)


def _udp_echo(port, q, seconds):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", port))
    s.settimeout(seconds + 5)
    q.put("ready")
    while True:
        try:
            d, peer = s.recvfrom(2048)
        except TimeoutError:
            return
        s.sendto(d, peer)


def _median_us(samples):
    samples.sort()
    return samples[len(samples) // 2] * 1e6 if samples else float("nan")


def rtt_ulp(dirs, ulas, seconds, size=64, vc=1, gsnds=(), cpu=None):
    """Median round trip of a ``size``-byte Message, client -> gsnd -> gsnd -> echo and back
    (and into ``cpu``, when given, the CPU µs per round trip of each pid in ``gsnds``)."""
    q = mp.Queue()
    e = mp.Process(target=_ulp_echo, args=(f"{dirs[1]}/gsn0.ulp", q, seconds))
    e.start()
    q.get(timeout=10)
    c = UlpClient(f"{dirs[0]}/gsn0.ulp")
    c.bind(ECHO_ETHERTYPE)
    payload, samples = os.urandom(size), []
    buf = bytearray(size + 2048)
    before = [cpu_ns(p) for p in gsnds]
    end = time.perf_counter() + seconds
    try:
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            c.send(ulas[1], payload, vc=vc, ethertype=ECHO_ETHERTYPE)
            while c.recv_into(buf, timeout=2.0)[0] is not Op.RECV:
                pass
            samples.append(time.perf_counter() - t0)
        if cpu is not None:
            cpu += [(cpu_ns(p) - b) / 1e3 / max(len(samples), 1) for p, b in zip(gsnds, before)]
    finally:
        c.close()
        e.terminate()
        e.join()
    return _median_us(samples)


def rtt_udp(seconds, size=64):
    """Anchor: median round trip of a ``size``-byte UDP datagram to an echo process."""
    port = 38000 + os.getpid() % 1000
    q = mp.Queue()
    e = mp.Process(target=_udp_echo, args=(port, q, seconds))
    e.start()
    q.get(timeout=10)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2.0)
    payload, samples = os.urandom(size), []
    end = time.perf_counter() + seconds
    try:
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            s.sendto(payload, ("127.0.0.1", port))
            s.recv(2048)
            samples.append(time.perf_counter() - t0)
    finally:
        s.close()
        e.terminate()
        e.join()
    return _median_us(samples)


def _free_udp_ports(n: int) -> list[int]:
    """``n`` loopback UDP ports free right now (so that benches run beside each other)."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def start_pair(tmp, procs, extra=(), port=None):
    """Two gsnd back to back on loopback UDP ports ``port`` and ``port + 1`` (default:
    two free ports)."""
    ports = [port, port + 1] if port is not None else _free_udp_ports(2)
    gsnd = shutil.which("gsnd") or os.path.join(os.path.dirname(sys.executable), "gsnd")
    dirs = [f"{tmp}/a", f"{tmp}/b"]
    ulas = ["02:00:00:00:00:0a", "02:00:00:00:00:0b"]
    procs += [
        subprocess.Popen([gsnd, "--local", f"127.0.0.1:{ports[0]}", "--peer", f"127.0.0.1:{ports[1]}", "--ula", ulas[0],
                          "--runtime-dir", dirs[0], "--log-level", "warning", "--no-tap", *extra]),
        subprocess.Popen([gsnd, "--local", f"127.0.0.1:{ports[1]}", "--peer", f"127.0.0.1:{ports[0]}", "--ula", ulas[1],
                          "--runtime-dir", dirs[1], "--log-level", "warning", "--no-tap", *extra]),
    ]
    pair = procs[-2:]
    deadline = time.monotonic() + 60  # a loaded machine starts Python daemons slowly
    for d in dirs:
        while not os.path.exists(f"{d}/gsn0.ulp"):
            dead = [p.pid for p in pair if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise SystemExit(f"bench: gsnd {'exited' if dead else 'not ready in 60 s'} ({' '.join(extra)})")
            time.sleep(0.05)
    for d in dirs:  # wait until each side has its ULA
        c = UlpClient(f"{d}/gsn0.ulp")
        for _ in range(100):
            if c.bind(0xFFFF).vc == 1:
                break
            time.sleep(0.05)
        c.close()
    return procs, dirs, [bytes.fromhex(u.replace(":", "")) for u in ulas]


def stop(procs, tmp) -> None:
    """Terminate the daemons, the last started first (clients before what they attach to)."""
    for p in reversed(procs):
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:  # say so, and never leave one running
            print(f"bench: pid {p.pid} ignored SIGTERM for 10 s; killed", file=sys.stderr)
            p.kill()
            p.wait()
    shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--cable-mtu", type=int, help="passed to both gsnd (loopback's own MTU is 65536)")
    ap.add_argument("--cpu", action="store_true",
                    help="also print each process's CPU us per Message (sender, gsnd a, gsnd b, receiver)")
    ap.add_argument("--sizes", default="1024,65536", help="Message sizes, comma-separated (default 1024,65536)")
    ap.add_argument("--vcs", default="1,3", help="VCs, comma-separated (default 1,3)")
    ap.add_argument("--no-rtt", action="store_true", help="skip the 64-byte round trip")
    args = ap.parse_args()
    try:
        sizes = [int(x) for x in args.sizes.split(",")]
        vcs = [int(x) for x in args.vcs.split(",")]
    except ValueError:
        ap.error("--sizes and --vcs take comma-separated integers")
    if not all(1 <= x <= ULP_MAX_PAYLOAD for x in sizes) or not all(0 <= v <= 3 for v in vcs):
        ap.error(f"sizes are 1..{ULP_MAX_PAYLOAD} bytes, VCs 0..3")
    tmp = tempfile.mkdtemp(prefix="gsnbench-")
    procs: list = []
    try:
        procs, dirs, ulas = start_pair(tmp, procs, ["--cable-mtu", str(args.cable_mtu)] if args.cable_mtu else [])
        print(f"{'case':<22}{'msgs/s':>12}{'Gbit/s':>10}{'UDP msgs/s':>14}{'UDP Gbit/s':>12}{'ratio':>8}")
        for size in sizes:
            anchor = udp_run(size, args.seconds)
            for vc in vcs:
                rate, gbps, per = ulp_run(dirs, ulas, size, vc, args.seconds, gsnds=(procs[0].pid, procs[1].pid))
                name = f"{size // 1024} KiB" if size % 1024 == 0 else f"{size} B"
                print(f"{f'{name} VC{vc}':<22}{rate:>12.0f}{gbps:>10.3f}{anchor[0]:>14.0f}"
                      f"{anchor[1]:>12.3f}{gbps / anchor[1]:>8.3f}")
                if args.cpu:
                    print("  CPU us/Message: sender {:.1f}, gsnd a {:.1f}, gsnd b {:.1f}, receiver {:.1f}".format(*per))
        if not args.no_rtt:
            cpu: list[float] = []
            ulp_us = rtt_ulp(dirs, ulas, args.seconds, gsnds=(procs[0].pid, procs[1].pid), cpu=cpu)
            udp_us = rtt_udp(args.seconds)
            print(f"64-byte round trip: ULP VC1 {ulp_us:.1f} us, bare UDP {udp_us:.1f} us, "
                  f"ratio {ulp_us / udp_us:.2f} (target <= 2)")
            if args.cpu:
                print("  CPU us/round trip: gsnd a {:.1f}, gsnd b {:.1f}".format(*cpu))
        print(f"load average {os.getloadavg()[0]:.1f}")
    finally:
        stop(procs, tmp)


if __name__ == "__main__":
    main()
