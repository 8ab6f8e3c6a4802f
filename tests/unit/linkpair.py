"""Two sans-IO links joined by a hand-stepped lossy wire (no trio, no clock)."""

from __future__ import annotations

import random

import pytest

from daemons.link.clink import CLink
from daemons.link.link import Link, LinkDown, LinkUp, Received, Timers
from daemons.link.reassembly import Delivered, Reassembler

# Every link test runs against both: Link (Python + numpy, the oracle) and CLink
# (daemons/_link.c, what the daemons use).
LINK_IMPLS = [Link, CLink]
each_impl = pytest.mark.parametrize("impl", LINK_IMPLS, ids=[i.__name__ for i in LINK_IMPLS])


class Pair:
    def __init__(self, seed=0, drop=0.0, dup=0.0, reorder=0.0, timers=Timers(), buffers=None, max_mps=None,
                 impl=Link, tap=None, lose=None):
        self.rng = random.Random(seed)
        self.impl = impl
        self.tap = tap  # tap(i, datagram) sees every datagram link i sends, before the wire loses it
        self.lose = lose  # lose(i, datagram) -> True: the wire loses this one
        kw = {"timers": timers} | ({"buffers": buffers} if buffers else {}) | ({"max_mps": max_mps} if max_mps else {})
        self.links = [impl(9, 0.0, rng=random.Random(seed + 1), **kw), impl(9, 0.0, rng=random.Random(seed + 2), **kw)]
        self.reasm = [Reassembler(), Reassembler()]
        self.got = [[], []]
        self.events = [[], []]
        self.drop, self.dup, self.reorder = drop, dup, reorder
        self.cut = False
        self.now = 0.0
        self.held: list = []

    def step(self, dt=0.001):
        self.now += dt
        for i, link in enumerate(self.links):
            out = link.handle_timer(self.now) + link.datagrams(self.now)
            for d in out:
                if self.tap:
                    self.tap(i, d)
                if self.cut or self.rng.random() < self.drop or (self.lose and self.lose(i, d)):
                    continue
                copies = 2 if self.rng.random() < self.dup else 1
                for _ in range(copies):
                    if self.rng.random() < self.reorder:
                        self.held.append((1 - i, d))
                    else:
                        self.links[1 - i].receive(d, self.now)
        if self.held and self.rng.random() < 0.5:
            for j, d in self.held:
                self.links[j].receive(d, self.now)
            self.held.clear()
        for i, link in enumerate(self.links):
            for ev in link.events():
                self.events[i].append(ev)
                if isinstance(ev, Received):
                    for out in self.reasm[i].feed(ev.vc, ev.recs):
                        if isinstance(out, Delivered):
                            self.got[i].append(out.message)
                    link.release(ev.vc, len(ev.recs))
                elif isinstance(ev, (LinkUp, LinkDown)):
                    self.reasm[i].reset()

    def run(self, seconds, dt=0.001):
        for _ in range(int(seconds / dt)):
            self.step(dt)

    def up(self):
        return all(link.up for link in self.links)
