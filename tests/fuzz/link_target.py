"""Fuzz target for CLink.receive, differential against Link.

Two pairs (Link/Link and CLink/CLink) are brought up with the same seeds; the input
is read as a sequence of operations on the victim (side 1): feed a raw datagram,
feed a mutated copy of a datagram the attacker really sent (sequenced or control),
enqueue a Message at the attacker, or advance time.  After every operation the two
victims must agree on counters, events, status and what they send; CLink must never
raise.

``one_input(data)`` is driven by atheris (fuzz_link.py) and by Hypothesis
(test_fuzz_link.py).
"""

from __future__ import annotations

import random

from daemons.link.clink import CLink
from daemons.link.link import Link, Received
from daemons.wire.message import Message
from tests.fuzz.fastpath_target import Reader

CABLE = 3
A, B = b"\x02" * 6, b"\x04" * 6


def _pair(impl):
    a = impl(CABLE, 0.0, rng=random.Random(1), buffers=(64, 256, 128, 512), window=600, max_mps=64)
    b = impl(CABLE, 0.0, rng=random.Random(2), buffers=(64, 256, 128, 512), window=600, max_mps=64)
    now = 0.0
    for _ in range(4):
        now += 0.001
        for x, y in ((a, b), (b, a)):
            for d in x.handle_timer(now) + x.datagrams(now):
                y.receive(d, now)
    assert a.up and b.up
    return a, b, now


def _obs(link, now):
    evs = [("R", e.vc, e.recs.tobytes()) if isinstance(e, Received) else e for e in link.events()]
    for e in evs:
        if isinstance(e, tuple):
            link.release(e[1], len(e[2]) // 40)
    st = link.status()
    st["counters"] = {k: v for k, v in st["counters"].items() if v}
    out = [bytes(d) for d in link.handle_timer(now) + link.datagrams(now)]
    return evs, st, out, link.timer()


def one_input(data: bytes) -> None:
    r = Reader(data)
    sides = [_pair(Link), _pair(CLink)]
    now = sides[0][2]
    sent: list[list[bytes]] = [[], []]
    for _ in range(8):
        op = r.int(1) % 5
        if op == 0:  # a raw datagram
            blob = r.take(r.int(2) % 700)
            feeds = [blob, blob]
        elif op == 1:  # the attacker queues a Message; its datagrams become material
            vc, n = r.int(1) % 4, r.int(2) % 1500
            for k, (a, _b, _) in enumerate(sides):
                a.enqueue(vc, Message(vc, A, B, 0x88B5, bytes(n)).records())
                sent[k] = [bytes(d) for d in a.handle_timer(now) + a.datagrams(now)]
            assert sent[0] == sent[1]
            feeds = None
        elif op == 2:  # a real datagram with bits flipped / truncated / extended
            pool = sent[0] or [bytes(d) for d in (sides[0][0]._control_datagram(0),)]
            d = bytearray(pool[r.int(1) % len(pool)])
            for _ in range(r.int(1) % 4):
                spot = r.int(2)
                d[spot % len(d)] ^= 1 << (spot >> 13)
            cut = r.int(1)
            if cut & 1:
                d = d[: max(0, len(d) - cut)]
            elif cut & 2:
                d += r.take(cut % 80)
            feeds = [bytes(d), bytes(d)]
        elif op == 3:  # replay a real datagram unchanged (duplicate / out of order)
            pool = sent[0]
            feeds = [pool[r.int(1) % len(pool)]] * 2 if pool else None
        else:
            now += (r.int(1) % 64) * 0.005
            feeds = None
        for k, (_a, b, _) in enumerate(sides):
            if feeds:
                b.receive(feeds[k], now)
        o0, o1 = _obs(sides[0][1], now), _obs(sides[1][1], now)
        assert o0 == o1, (o0, o1)
        for k, (a, _b, _) in enumerate(sides):  # the attacker hears the victim (acks, credits)
            for d in (o0, o1)[k][2]:
                a.receive(d, now)
            a.events()
