"""Drive a pair of links of one implementation through a seeded lossy wire and record
everything observable: every datagram sent, every event, counters, status.

The same seed and inputs give Link (the oracle) and CLink the same trace, byte for
byte: the differential tests compare the two traces whole.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from daemons.link.link import Received, Timers
from daemons.link.reassembly import Delivered, Reassembler
from daemons.wire.message import Message

A, B = b"\x02" * 6, b"\x04" * 6


@dataclass
class Scenario:
    seed: int = 0
    drop: float = 0.0
    dup: float = 0.0
    reorder: float = 0.0
    corrupt: float = 0.0  # flip one random bit of a datagram
    buffers: tuple = (512, 16384, 4096, 16384)
    window: int = 38272
    max_mps: int = 1600
    hold: float = 0.0  # chance the receiver holds a Received's credits for a while (reclaim/release)
    sizes: list = field(default_factory=list)  # (side, vc, payload length, step)
    steps: int = 600
    drain: int = 4000  # then a clean wire (no loss, no held credits) until everything is delivered
    timers: Timers = Timers(rtx_limit=1000)


def _ev(ev):
    return ("Received", ev.vc, ev.recs.tobytes()) if isinstance(ev, Received) else ev


def run(impl, sc: Scenario):
    rng = random.Random(sc.seed)
    kw = dict(buffers=sc.buffers, timers=sc.timers, window=sc.window, max_mps=sc.max_mps)
    links = [impl(5, 0.0, rng=random.Random(sc.seed + 1), **kw), impl(5, 0.0, rng=random.Random(sc.seed + 2), **kw)]
    reasm = [Reassembler(), Reassembler()]
    trace: list = []
    got: list = [[], []]
    sent: list = [[], []]
    held: list = []
    withheld = [[0] * 4, [0] * 4]
    todo = sorted(sc.sizes, key=lambda s: s[3])
    now = 0.0
    for step in range(sc.steps + sc.drain):
        now = round(now + 0.001, 6)
        clean = step >= sc.steps
        if clean and not todo and not held and all(len(got[1 - k]) == len(sent[k]) for k in (0, 1)):
            break
        while todo and todo[0][3] <= step:
            side, vc, n, _ = todo.pop(0)
            m = Message(vc, A, B, 0x88B5, random.Random(n * 31 + step).randbytes(n))
            sent[side].append(m)
            links[side].enqueue(vc, m.records())
        for i, link in enumerate(links):
            for vc in range(4):  # held credits: sometimes reclaimed before sending, released later
                if withheld[i][vc] and (clean or rng.random() < 0.2):
                    link.release(vc, withheld[i][vc])
                    withheld[i][vc] = 0
            out = link.handle_timer(now) + link.datagrams(now)
            trace.append((step, i, "timer", link.timer()))
            for d in out:
                trace.append((step, i, "tx", bytes(d)))
                if not clean and rng.random() < sc.drop:
                    continue
                if not clean and rng.random() < sc.corrupt:
                    raw = bytearray(d)
                    bit = rng.randrange(len(raw) * 8)
                    raw[bit >> 3] ^= 1 << (bit & 7)
                    d = bytes(raw)
                for _ in range(2 if not clean and rng.random() < sc.dup else 1):
                    if not clean and rng.random() < sc.reorder:
                        held.append((1 - i, d))
                    else:
                        links[1 - i].receive(d, now)
        if held and rng.random() < 0.5:
            for j, d in held:
                links[j].receive(d, now)
            held.clear()
        for i, link in enumerate(links):
            for ev in link.events():
                trace.append((step, i, "ev", _ev(ev)))
                if isinstance(ev, Received):
                    for out in reasm[i].feed(ev.vc, ev.recs):
                        if isinstance(out, Delivered):
                            got[i].append(out.message)
                    if not clean and rng.random() < sc.hold:
                        withheld[i][ev.vc] += len(ev.recs)
                    else:
                        link.release(ev.vc, len(ev.recs))
                else:
                    reasm[i].reset()
                    withheld[i] = [0] * 4
            if not clean and rng.random() < sc.hold:
                vc = rng.randrange(4)
                withheld[i][vc] += link.reclaim(vc, rng.randrange(64))
        for i, link in enumerate(links):
            status = link.status()
            status["counters"] = {k: v for k, v in status["counters"].items() if v}  # Link keeps some zeros
            trace.append((step, i, "status", status, link.up, link.state, list(link.credits),
                          [link.queued(vc) for vc in range(4)]))
    return trace, got, sent, links
