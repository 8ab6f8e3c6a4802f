#!/usr/bin/env python3
"""CPU cost per Message of gsn-switch's data path, compiled (SwitchPlane) against Python.

    .venv/bin/python bench/switch_cost.py [--messages 2000] [--size 65536] [--mtu 65535]

No namespaces, no root: a two-port Switch on 127.0.0.1 UDP cables (UdpTransport, GSO
and GRO as the daemon uses them), a host link on each.  Host 1 sends Messages of
--size payload bytes on VC1 to host 2, which frees its buffers at once.  Timed is the
switch's work alone, per wake-up as the daemon does it (receive every cable, link,
forward, pump, timers, build and send every port's datagrams), as the thread's CPU
time (user + system, time.thread_time): once with the compiled path (SwitchPlane.rx and
SwitchPlane.flush, one C call each for all cables) and once with the Python path
(UdpTransport.drain, CLink.receive, Switch.process, the Python pump, CLink.datagrams,
UdpTransport.send_many).  Syscalls are included; trio's
scheduling is not.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from daemons import constants as C  # noqa: E402
from daemons.io.runner import cable_window  # noqa: E402
from daemons.io.udp import UdpTransport  # noqa: E402
from daemons.link.clink import CLink  # noqa: E402
from daemons.link.link import Received  # noqa: E402
from daemons.switch.core import Switch  # noqa: E402
from daemons.wire.message import encode_stream, stream_records  # noqa: E402
from daemons.wire.ula import assigned_ula  # noqa: E402

ULAS = {1: assigned_ula(9, 1), 2: assigned_ula(9, 2)}


def run(plane: bool, messages: int, size: int, mtu: int, base_port: int) -> dict:
    addr = lambda k: ("127.0.0.1", base_port + k)  # noqa: E731  1, 2: switch ports; 11, 12: hosts
    sw_t = {p: UdpTransport(addr(p), addr(10 + p), mtu=mtu) for p in (1, 2)}
    host_t = {p: UdpTransport(addr(10 + p), addr(p), mtu=mtu) for p in (1, 2)}
    now = time.monotonic()
    sw = Switch(7, [1, 2], now, rng=random.Random(1), static={ULAS[1]: 1, ULAS[2]: 2}, plane=plane,
                windows={p: cable_window(t.max_mps) for p, t in sw_t.items()})
    for p, t in sw_t.items():
        sw.ports[p].link.max_mps = t.max_mps
        if plane:
            sw.plane.cable(p, t)
    hosts = {p: CLink(p, now, rng=random.Random(p), window=cable_window(t.max_mps)) for p, t in host_t.items()}
    for p, h in hosts.items():
        h.max_mps = host_t[p].max_mps
    recs = stream_records(1, encode_stream(1, ULAS[2], ULAS[1], 0x88B5, bytes(size)))
    cpu = 0.0
    wakeups = sent = got = 0

    def switch_step(now: float) -> None:
        nonlocal cpu, wakeups
        t0 = time.thread_time()
        if plane:
            sw.plane.rx(now, C.SWITCH_PLANE_DATAGRAMS)
        for p, t in sw_t.items():
            link = sw.ports[p].link
            if not plane:
                for dg in t.drain():
                    link.receive(dg, now)
            rtx = link.handle_timer(now)
            if rtx:
                t.send_many(rtx)
            sw.process(p, now)
        if plane:  # every port's datagrams built and sent in one C call, as the daemon does
            for p, refused in sw.plane.flush(now).items():
                sw_t[p].send_many(refused)
        else:
            for p, t in sw_t.items():
                dgrams = sw.ports[p].link.datagrams(now)
                if dgrams:
                    t.send_many(dgrams)
        cpu += time.thread_time() - t0
        wakeups += 1

    deadline = time.monotonic() + 120
    while got < messages and time.monotonic() < deadline:
        now = time.monotonic()
        if sent < messages and hosts[1].queued(1) < 4 * len(recs) and all(h.up for h in hosts.values()):
            hosts[1].enqueue(1, recs)
            sent += 1
        for p, h in hosts.items():
            for dg in host_t[p].drain():
                h.receive(dg, now)
            for ev in h.events():
                if isinstance(ev, Received):
                    h.release(ev.vc, len(ev.recs))
                    if p == 2:
                        got += int(ev.recs["ctrl"][-1]) >> C.CTRL_TAIL_SHIFT & 1 if len(ev.recs) else 0
            out = h.handle_timer(now) + h.datagrams(now)
            if out:
                host_t[p].send_many(out)
        switch_step(now)
    for t in (*sw_t.values(), *host_t.values()):
        t.sock.close()
    per = max(got, 1)
    return {"messages": got, "cpu_us_per_message": cpu / per * 1e6, "wakeups_per_message": wakeups / per}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=2000, help="Messages per path (default 2000)")
    ap.add_argument("--size", type=int, default=65536, help="payload bytes per Message (default 65536)")
    ap.add_argument("--mtu", type=int, default=65535, help="the cables' MTU (default 65535; try 1500, 9000)")
    args = ap.parse_args()
    if not 0 <= args.size <= 65536 or args.messages < 1 or not 1280 <= args.mtu <= 65535:
        ap.error("--size 0..65536, --messages >= 1, --mtu 1280..65535")
    print(f"{args.messages} Messages of {args.size} bytes, cable MTU {args.mtu}; "
          f"load average {os.getloadavg()[0]:.2f}")
    res = {}
    for name, plane, port in (("compiled", True, 47000), ("python", False, 47100)):
        res[name] = r = run(plane, args.messages, args.size, args.mtu, port + os.getpid() % 50 * 200)
        print(f"{name:<9} switch CPU {r['cpu_us_per_message']:8.1f} us/Message  "
              f"({r['messages']} delivered, {r['wakeups_per_message']:.2f} wake-ups per Message)", flush=True)
    ratio = res["compiled"]["cpu_us_per_message"] / res["python"]["cpu_us_per_message"]
    print(f"compiled/python {ratio:.2f}; load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
