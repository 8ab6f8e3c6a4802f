"""Fuzz target for gsn-switch's compiled data path (Switch(plane=True),
daemons/_switchloop.h), differential against the Python Switch (its oracle).

``one_input(data)``: a three-port switch with hosts on every port; hosts 1 and 2 send
Messages (any VC and length; to host 3, to each other, broadcast, unknown, spoofed)
while host 3 frees its buffers slowly (wormhole contention, credits running out); the
datagrams to the switch are dropped, corrupted (two cancelling flips), truncated,
duplicated, or the sending host restarts.  Both switches must send the same datagrams
from every port and count the same.

``hostile_input(data)``: the hostile cable of tests/fuzz/switchfwd_target.py, but the
compiled switch receives through its C receive loop (``SwitchPlane.rx``) from a real
UDP socket on loopback, foreign senders included.

Driven by atheris (fuzz_switchloop.py), Hypothesis (test_fuzz_switchloop.py) and
``./gsn fuzz`` (target "switchloop").
"""

from __future__ import annotations

import random

from daemons import constants as C
from daemons.link.clink import CLink
from daemons.link.link import Received
from daemons.switch.core import Switch
from daemons.wire.message import encode_stream, max_payload, stream_records
from daemons.wire.ula import assigned_ula
from fuzz.draw import Draw

FAULTS = ("drop", "flip2", "truncate", "dup", "restart")
DESTS = (1, 2, 3, 3, 3, "bcast", "unknown")


ULAS = {p: assigned_ula(9, p) for p in (1, 2, 3)}
UNKNOWN = assigned_ula(9, 44)
BUFFERS = (24, 40, 16, 40)  # small: output credits run out


def rig(plane: bool, seed: int):
    sw = Switch(7, [1, 2, 3], 0.0, rng=random.Random(seed), buffers=BUFFERS,
                static={u: p for p, u in ULAS.items()}, plane=plane, windows={1: 200, 2: 200, 3: 200})
    hosts = {p: CLink(p, 0.0, buffers=BUFFERS, rng=random.Random(seed * 10 + p), window=200) for p in (1, 2, 3)}
    return sw, hosts


def run(plane: bool, seed: int, msgs, faults, release_every: int, rounds: int = 60):
    sw, hosts = rig(plane, seed)
    out, got = [], {p: [] for p in hosts}
    held = {p: [] for p in hosts}
    now = 0.0
    fault_at = {i: f for i, f in faults}
    k = 0
    for r in range(rounds):
        now += 0.004
        for src, vc, dst, spoof, n, when in msgs:
            if r == when:  # links are up from round 6
                d_ula = {"bcast": C.ULA_BROADCAST, "unknown": UNKNOWN}.get(dst, ULAS.get(dst, UNKNOWN))
                s_ula = ULAS[3] if spoof else ULAS[src]
                payload = bytes((i * 7 + n) & 0xFF for i in range(min(n, max_payload(vc))))
                hosts[src].enqueue(vc, stream_records(vc, encode_stream(vc, d_ula, s_ula, 0x88B5, payload)))
        restart = set()
        for p, host in hosts.items():
            for dg in host.handle_timer(now) + host.datagrams(now):
                f = fault_at.get(k)
                k += 1
                dg = bytes(dg)
                if f == "drop":
                    continue
                copies = [dg]
                if f == "flip2":  # the same bit in two micropackets: cancels in an XOR fold
                    b = bytearray(dg)
                    if len(b) >= C.SHIM_BYTES + 2 * C.MP_BYTES:
                        b[C.SHIM_BYTES + 5] ^= 4
                        b[C.SHIM_BYTES + C.MP_BYTES + 5] ^= 4
                    copies = [bytes(b)]
                elif f == "truncate":
                    copies = [dg[: len(dg) - 7]]
                elif f == "dup":
                    copies = [dg, dg]
                elif f == "restart" and p != 3:
                    restart.add(p)
                for c in copies:
                    sw.ports[p].link.receive(c, now)
                    sw.process(p, now)
        for p, host in hosts.items():
            link = sw.ports[p].link
            for dg in link.handle_timer(now) + link.datagrams(now):
                out.append((p, bytes(dg)))
                host.receive(dg, now)
            for ev in host.events():
                if isinstance(ev, Received):
                    got[p].append((ev.vc, ev.recs.tobytes()))
                    held[p].append((ev.vc, len(ev.recs)))
                else:
                    got[p].append(type(ev).__name__)
            # host 3 frees its buffers only every few rounds: the switch's output waits
            if p != 3 or r % release_every == 0:
                for vc, n in held[p]:
                    host.release(vc, n)
                held[p].clear()
        for p in restart:  # the host restarts mid-Message: the switch sees a RESET, its link goes down
            hosts[p] = CLink(p, now, buffers=BUFFERS, rng=random.Random(seed * 10 + p + 5), window=200)
        sw.handle_timer(now)
    st = sw.status()
    links = {n: dict(sw.ports[n].link.counters) for n in sw.ports}
    return out, got, st, links, queues(sw)


def queues(sw) -> dict:
    """What waits in the switch: per input (and the Admin engine) and VC the segments and
    micropackets queued, the open Message's targets, and the owner of each output VC --
    SwitchPlane.state() for the compiled path, read off the Python Switch otherwise."""
    if sw.plane is not None:
        return sw.plane.state()
    def inq(qs):
        return [(len(q), sum(len(seg.recs) for seg in q)) for q in qs]
    out = {n: {"inq": inq(p.inq), "current": list(p.current), "owner": list(sw.owner[n])} for n, p in sw.ports.items()}
    out["admin"] = {"inq": inq(sw.admin_q), "current": [None] * C.NUM_VCS, "owner": [None] * C.NUM_VCS}
    return out



def one_input(data: bytes) -> None:
    d = Draw(data)
    seed = d.int(2)
    msgs = [(d.choice((1, 2)), d.below(C.NUM_VCS), d.choice(DESTS), d.below(5) == 0, d.below(3001), 6 + d.below(25))
            for _ in range(d.below(13))]
    faults = [(d.below(91), d.choice(FAULTS)) for _ in range(d.below(11))]
    release_every = 1 + d.below(4)
    assert run(True, seed, msgs, faults, release_every) == run(False, seed, msgs, faults, release_every)


def hostile_input(data: bytes) -> None:
    """The compiled switch, fed through SwitchPlane.rx from a UDP socket, sends and
    counts as the Python one fed datagram by datagram."""
    from tests.fuzz.switchfwd_target import _switch_run
    from daemons.switch.forward import PyForwarder

    assert _switch_run(None, data, plane=True) == _switch_run(PyForwarder, data)
