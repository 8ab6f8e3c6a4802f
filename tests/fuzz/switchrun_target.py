"""Fuzz target for gsn-switch's compiled data-plane loop, ``SwitchPlane.run``
(daemons/_switchrun.h): ppoll over the cabled port's socket and trio's descriptor with the
GIL released, the receive (recvmsg, the peer check, the link's per-micropacket receive,
the compiled walk and pump), the flush of every cabled port after each batch, and its
return reasons -- differential against the Python Switch (PyForwarder, no plane) fed the
same datagrams.

The rig (fuzz.targets_cores._switch twice: the compiled switch whose port 1 is a real UDP
socket on loopback, and the oracle) is kept for RIG_INPUTS inputs or until a link is down,
so inputs meet the state earlier ones left.  Per input the attacker sends 1-3 rounds of
hostile datagrams (fuzz/frames.py ``attack``: built, one field mutated, raw bytes,
replays; now and then a stranger's datagram too) into the compiled switch's socket, and
the same datagrams are handed to the oracle's link; ``run(now, now, trio_fd)`` is called
until every datagram is received (trio's descriptor made readable now and then: run must
return CONTROL first and receive nothing).  Checked, besides "nothing raises":

- every datagram is received exactly once and counted (the stranger's as foreign), run
  refuses nothing on loopback, its reasons are the documented ones;
- every datagram run counts as sent is read off the wire;
- what each switch forwards to port 2 (the Messages its well-behaved neighbour receives,
  its link driven in Python the same way in both) is the same: nothing forwarded that the
  oracle drops, nothing dropped that it forwards; the forwarding counters agree.

``one_input(data)`` is driven by ``./gsn fuzz`` (target "switchloop.run") and the suite's
short runs (test_fuzz_targets.py).
"""

from __future__ import annotations

import os
import socket
import time
from collections import Counter
from types import SimpleNamespace

from daemons import constants as C
from daemons.link.clink import REASONS
from daemons.link.link import Received
from fuzz.draw import Draw
from tests.fuzz.switchfwd_target import recv_all

RIG_INPUTS = 64  # inputs per rig before it is rebuilt (a fresh pair of switches now and then)
STRANGER_EVERY = 5  # every 5th datagram is preceded by a stranger's (not drawn: cheap)
# Time.  run() takes its own clock: now + the time the call has run (microseconds; under load,
# preempted, milliseconds), the oracle the caller's now.  While the rig's time stands still no
# link deadline falls between the two (the shortest delay, ACK_DELAY_S, is longer than
# RUN_EXACT_S, and a rig in which a call took longer is compared no more and rebuilt), so
# the two switches stay in lockstep and are compared.  Every other pair of rigs lets time
# move (STEPS_S: retransmissions, acks, keepalives, run's TIMER return) and is checked for
# the invariants only: a deadline that falls on a step for one switch and a hair after it
# for the other (the adaptive RTO takes any value) parts them without a fault.
STEPS_S = (0.0, 0.00037, 0.0043, 0.371)
RUN_EXACT_S = 0.0003
MAX_RUNS = 64  # run() calls to take one round's datagrams in (each takes up to LOOP_DATAGRAMS)


def _delivered(link) -> list:
    """The neighbour's events, Messages as their bytes; every buffer given back."""
    out = []
    for ev in link.events():
        if isinstance(ev, Received):
            out.append((ev.vc, ev.recs.tobytes()))
            link.release(ev.vc, len(ev.recs))
        else:
            out.append(type(ev).__name__)
    return out


OTHER_ULA = bytes.fromhex("02000000000a")  # port 2's neighbour, bound there as S_ULA is to port 1


def _switch(forwarder=None, plane=False, bound=True):
    """fuzz.targets_cores._switch with port 2's neighbour's address bound (static) and, with
    ``bound``, the attacker's source address (fuzz/frames.py S_ULA) too, so that its
    well-formed Messages are forwarded; without, they are all spoofed."""
    import random

    from daemons.switch.core import Switch
    from fuzz.frames import CABLE, S_ULA, bring_up, new_link

    sw = Switch(7, [1, 2], 0.0, rng=random.Random(5), cable_ids={1: CABLE, 2: 2}, forwarder=forwarder,
                static={S_ULA: 1, OTHER_ULA: 2} if bound else {OTHER_ULA: 2}, plane=plane)
    attacker, other = new_link(CABLE, 6), new_link(2, 7)

    def rx(port):
        def f(dg, now):
            sw.ports[port].link.receive(dg, now)
            sw.process(port, now)
        return f

    def out(port):
        return lambda now: sw.ports[port].link.handle_timer(now) + sw.ports[port].link.datagrams(now)

    now = bring_up(other, rx(2), out(2))
    now = bring_up(attacker, rx(1), out(1), now)
    return sw, attacker, other, now


class Rig:
    built = 0  # rigs so far: every other one leaves the attacker's source unbound

    def __init__(self) -> None:
        from daemons.switch.forward import PyForwarder

        Rig.built += 1
        bound = Rig.built % 2 == 1
        self.moving = Rig.built % 4 in (2, 3)  # time moves: no oracle comparison (see STEPS_S)
        self.sw, self.attacker, self.other, self.now = _switch(None, plane=True, bound=bound)
        self.py, _att, self.py_other, now = _switch(PyForwarder, bound=bound)
        assert now == self.now
        self.socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(3)]  # switch, peer, stranger
        for s in self.socks:
            s.bind(("127.0.0.1", 0))
            s.setblocking(False)
        self.addr = self.socks[0].getsockname()
        self.cable: Counter = Counter()
        self.sw.plane.cable(1, SimpleNamespace(sock=self.socks[0], peer=self.socks[1].getsockname(),
                                               counters=self.cable, gso=True, max_sent=0))
        self.trio_r, self.trio_w = os.pipe()  # trio's epoll descriptor's stand-in
        os.set_blocking(self.trio_r, False)
        self.targets = [C.ULA_BROADCAST, C.ULA_NONE, OTHER_ULA, OTHER_ULA, self.sw.ula, *list(self.sw.table)[:4]]
        self.history: list[bytes] = []
        self.inputs = self.sent = self.strangers = 0
        self.reasons: Counter[str] = Counter()
        self.tainted = self.moving  # a run() call took longer than RUN_EXACT_S: no oracle comparison
        self.failed = False  # an input raised: the next one starts on a fresh rig

    def usable(self) -> bool:
        return ((self.moving or not self.tainted) and not self.failed and self.inputs < RIG_INPUTS
                and self.attacker.up and self.other.up and self.py_other.up
                and all(p.link.up for sw in (self.sw, self.py) for p in sw.ports.values()))

    def close(self) -> None:
        for s in self.socks:
            s.close()
        os.close(self.trio_r)
        os.close(self.trio_w)


_RIG: list[Rig] = []
COMPARED, TAINTED = [0], [0]  # inputs compared with the oracle / not (a slow run() call in their rig)


def _rig() -> Rig:
    if _RIG and not _RIG[0].usable():
        _RIG.pop().close()
    if not _RIG:
        _RIG.append(Rig())
    return _RIG[0]


def _run_until(rig: Rig, now: float, dgrams: list[bytes], control: bool) -> list[bytes]:
    """run() until `dgrams` (sent on the socket) are received; what it sent on port 1, read off
    the wire.  The oracle, in lockstep: each batch run received, then its port 1's datagrams
    built (run's flush) and its timer (the daemon's pass after a return other than DEADLINE)."""
    sw, py, got, wire = rig.sw, rig.py, 0, []
    if control:  # trio has work: run returns at once, receiving nothing
        os.write(rig.trio_w, b"x")
        t0 = time.monotonic()
        reason, received, refused = sw.plane.run(now, now, rig.trio_r)
        rig.tainted |= time.monotonic() - t0 > RUN_EXACT_S
        assert REASONS[reason] == "control" and received == {} and refused == {}, (reason, received, refused)
        rig.reasons["control"] += 1
        os.read(rig.trio_r, 16)
    for _ in range(MAX_RUNS):
        if got >= len(dgrams):
            break
        tx0 = rig.cable["tx_datagrams"]
        t0 = time.monotonic()
        reason, received, refused = sw.plane.run(now, now, rig.trio_r)
        rig.tainted |= time.monotonic() - t0 > RUN_EXACT_S
        assert REASONS[reason] in ("idle", "deadline", "events", "timer"), REASONS[reason]
        assert refused == {}, refused  # loopback takes all
        assert set(received) <= {1}, received  # only port 1 is cabled
        n = received.get(1, 0)
        for dg in dgrams[got:got + n]:
            py.ports[1].link.receive(dg, now)
            py.process(1, now)
        py.ports[1].link.datagrams(now)  # the oracle's answers to the attacker go nowhere
        got += n
        out = recv_all(rig.socks[1])
        assert rig.cable["tx_datagrams"] - tx0 == len(out), "run's sends counted otherwise than on the wire"
        wire += out
        rig.reasons[REASONS[reason]] += 1
        if REASONS[reason] != "deadline":  # Python's pass, as the daemon's _plane_pass
            wire += [bytes(dg) for dg in sw.ports[1].link.handle_timer(now)]
            py.ports[1].link.handle_timer(now)
    assert got == len(dgrams), f"run received {got} of {len(dgrams)} datagrams"
    return wire


def _port2(sw, other, now: float) -> None:
    link2 = sw.ports[2].link
    for dg in link2.handle_timer(now) + link2.datagrams(now):
        other.receive(dg, now)
    for dg in other.handle_timer(now) + other.datagrams(now):
        link2.receive(dg, now)
        sw.process(2, now)


def one_input(data: bytes) -> None:
    from fuzz.frames import attack
    from fuzz.targets_cores import _drain_received

    rig = _rig()
    rig.inputs += 1
    rig.failed = True  # until this input passes
    d = Draw(data)
    sw, py, now = rig.sw, rig.py, rig.now
    got_c, got_py = [], []
    for _ in range(1 + d.below(3)):
        round_ = list(attack(d, rig.attacker, sw.ports[1].link, rig.targets, now, rig.history))
        for dgram in round_:
            if rig.sent % STRANGER_EVERY == 2:
                rig.socks[2].sendto(b"\x47\x53" + bytes(dgram)[2:], rig.addr)
                rig.strangers += 1
            rig.socks[1].sendto(dgram, rig.addr)  # loopback: queued before sendto returns
            rig.sent += 1
        wire = _run_until(rig, now, [bytes(dg) for dg in round_], control=d.below(8) == 0)
        wire += [bytes(dg) for dg in sw.ports[1].link.handle_timer(now)]
        py.ports[1].link.handle_timer(now)
        assert sw.plane.flush(now) == {}
        py.ports[1].link.datagrams(now)
        wire += recv_all(rig.socks[1])
        for dg in wire:
            rig.attacker.receive(dg, now)
        for dg in rig.attacker.handle_timer(now):  # the attacker's own retransmissions
            rig.socks[1].sendto(dg, rig.addr)
            rig.sent += 1
            for w in _run_until(rig, now, [bytes(dg)], control=False):
                rig.attacker.receive(w, now)
        _drain_received(rig.attacker)
        for s, other, got in ((sw, rig.other, got_c), (py, rig.py_other, got_py)):
            _port2(s, other, now)
            got += _delivered(other)
        now += d.choice(STEPS_S) if rig.moving else 0.0
    rig.now = now
    sw.handle_timer(now)
    py.handle_timer(now)
    rx = {k: v for k, v in rig.cable.items() if k.startswith("rx_")}
    assert rx == {k: v for k, v in (("rx_datagrams", rig.sent), ("rx_foreign_datagram", rig.strangers)) if v}, rx
    if rig.tainted:
        TAINTED[0] += 1
        rig.failed = False
        return
    COMPARED[0] += 1
    assert got_c == got_py, "the compiled loop forwarded to port 2 otherwise than the Python switch"
    fwd_c, fwd_py = (Counter({k: v for k, v in s.status()["counters"].items() if v}) for s in (sw, py))
    assert fwd_c == fwd_py, f"switch counters differ: {fwd_c - fwd_py} / {fwd_py - fwd_c}"
    rig.failed = False
