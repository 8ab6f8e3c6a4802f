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
- what each switch sends its port 1 neighbour (the attacker: Admin answers, Messages to
  port 1, acks, credits) is the same, byte for byte;
- what each switch forwards to port 2 (the Messages its well-behaved neighbour receives,
  its link driven in Python the same way in both) is the same: nothing forwarded that the
  oracle drops, nothing dropped that it forwards; the forwarding counters agree.

The lockstep: the oracle takes each batch run() received as run does -- every datagram
into the link, then ONE Switch.process (one pump) -- which is also how the Python switch's
daemon path takes a drained batch (daemons/io/runner.py LinkRunner.run).  A process per
datagram is not the same switch: Switch.pump shuffles its sources with the Switch's rng
(shared with its links' nonces) only when two or more wait, so pumping per datagram draws
less often than the C loop's pump per batch; the rngs part silently and, dozens of inputs
later, a pump in which the Admin engine and port 1 both wait for one output VC orders them
otherwise (the mismatch the first version of this target stopped on: fuzz/README.md,
tests/unit/test_switchrun_lockstep.py).

A mismatch depends on the rig's whole history, not on the last input: with
GSN_SWITCHRUN_DUMP=DIR in the environment a failing rig's serial (bound/moving) and every
input it took are pickled into DIR, and ``replay(path)`` rebuilds that rig and feeds them
again (``python -m tests.fuzz.switchrun_target DUMP``).

``one_input(data)`` is driven by ``./gsn fuzz`` (target "switchloop.run") and the suite's
short runs (test_fuzz_targets.py).
"""

from __future__ import annotations

import os
import time
from collections import Counter

from daemons import constants as C
from daemons.link.clink import REASONS
from daemons.link.link import Received
from fuzz.draw import Draw
from tests.fuzz.switchfwd_target import recv_all
from tests.fuzz.switchrx_target import loopback_cable

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
    from fuzz.frames import S_ULA
    from fuzz.targets_cores import _switch as switch

    return switch(forwarder, plane=plane, static={S_ULA: 1, OTHER_ULA: 2} if bound else {OTHER_ULA: 2})


class Rig:
    built = 0  # rigs so far: every other one leaves the attacker's source unbound

    def __init__(self, serial: int | None = None) -> None:
        from daemons.switch.forward import PyForwarder

        if serial is None:
            Rig.built += 1
            serial = Rig.built
        self.serial = serial  # what bound and moving are made of: kept with the history (replay)
        self.log: list[bytes] = []  # every input this rig took, in order: its replay
        self.trace: list[tuple] = []  # per run() call: (input, reason, datagrams received, seconds)
        bound = serial % 2 == 1
        self.moving = serial % 4 in (2, 3)  # time moves: no oracle comparison (see STEPS_S)
        self.sw, self.attacker, self.other, self.now = _switch(None, plane=True, bound=bound)
        self.py, _att, self.py_other, now = _switch(PyForwarder, bound=bound)
        assert now == self.now
        self.socks, self.cable = loopback_cable(self.sw)
        self.addr = self.socks[0].getsockname()
        self.trio_r, self.trio_w = os.pipe()  # trio's epoll descriptor's stand-in
        os.set_blocking(self.trio_r, False)
        self.targets = [C.ULA_BROADCAST, C.ULA_NONE, OTHER_ULA, OTHER_ULA, self.sw.ula, *list(self.sw.table)[:4]]
        self.history: list[bytes] = []
        self.inputs = self.sent = self.strangers = 0
        self.reasons: Counter[str] = Counter()
        self.tainted = self.moving  # a run() call took longer than RUN_EXACT_S: no oracle comparison
        self.failed = False  # an input raised: the next one starts on a fresh rig
        self.diff: tuple = ()  # a compared input's outputs when they differed: what the dump's reader wants

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
STATS_EVERY = int(os.environ.get("GSN_SWITCHRUN_STATS", "0"))  # print the two every N inputs (long runs)


def _rig() -> Rig:
    if _RIG and not _RIG[0].usable():
        _RIG.pop().close()
    if not _RIG:
        _RIG.append(Rig())
    return _RIG[0]


def _run_until(rig: Rig, now: float, dgrams: list[bytes], control: bool, py_out: list[bytes]) -> list[bytes]:
    """run() until `dgrams` (sent on the socket) are received; what it sent on port 1, read off
    the wire.  The oracle, in lockstep: each batch run received into its port 1 link and one
    Switch.process for the batch (run's pump), then its port 1's datagrams built (run's flush;
    into `py_out`) and its timer (the daemon's pass after a return other than DEADLINE)."""
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
        took = time.monotonic() - t0
        rig.tainted |= took > RUN_EXACT_S
        rig.trace.append((rig.inputs, REASONS[reason], received.get(1, 0), took))
        assert REASONS[reason] in ("idle", "deadline", "events", "timer"), REASONS[reason]
        assert refused == {}, refused  # loopback takes all
        assert set(received) <= {1}, received  # only port 1 is cabled
        n = received.get(1, 0)
        for dg in dgrams[got:got + n]:  # the batch into the link, then one pass: run pumps once per batch
            py.ports[1].link.receive(dg, now)
        if n:
            py.process(1, now)
        py_out += [bytes(dg) for dg in py.ports[1].link.datagrams(now)]  # run's flush
        got += n
        out = recv_all(rig.socks[1])
        assert rig.cable["tx_datagrams"] - tx0 == len(out), "run's sends counted otherwise than on the wire"
        wire += out
        rig.reasons[REASONS[reason]] += 1
        if REASONS[reason] != "deadline":  # Python's pass, as the daemon's _plane_pass
            wire += [bytes(dg) for dg in sw.ports[1].link.handle_timer(now)]
            py_out += [bytes(dg) for dg in py.ports[1].link.handle_timer(now)]
    assert got == len(dgrams), f"run received {got} of {len(dgrams)} datagrams"
    return wire


def _port2(sw, other, now: float) -> None:
    link2 = sw.ports[2].link
    for dg in link2.handle_timer(now) + link2.datagrams(now):
        other.receive(dg, now)
    for dg in other.handle_timer(now) + other.datagrams(now):
        link2.receive(dg, now)
        sw.process(2, now)


DUMP_DIR = os.environ.get("GSN_SWITCHRUN_DUMP", "")  # where a failing rig's history is written


def one_input(data: bytes) -> None:
    rig = _rig()
    rig.log.append(bytes(data))
    if STATS_EVERY and (COMPARED[0] + TAINTED[0]) % STATS_EVERY == 0:
        print(f"switchrun: {COMPARED[0]} inputs compared with the oracle, {TAINTED[0]} not", flush=True)
    try:
        _one_input(rig, data)
    except BaseException:
        if DUMP_DIR:
            _dump(rig)
        raise


def _dump(rig: Rig) -> None:
    import pickle

    os.makedirs(DUMP_DIR, exist_ok=True)
    path = os.path.join(DUMP_DIR, f"rig-{rig.serial}-{os.getpid()}-{len(rig.log)}.pkl")
    with open(path, "wb") as f:
        pickle.dump({"serial": rig.serial, "inputs": rig.log, "trace": rig.trace,
                     "tainted": rig.tainted, "moving": rig.moving}, f)
    print(f"switchrun: rig {rig.serial}'s history ({len(rig.log)} inputs) in {path}", flush=True)


def replay(path: str, tries: int = 10) -> int:
    """Rebuild the rig a dump names (same serial: same bound and moving) and feed it the
    same inputs; returns the index of the input that raised, -1 if none did.  A replay in
    which a run() call was slow (tainted: not compared) proves nothing and is tried again."""
    import pickle
    import traceback

    with open(path, "rb") as f:
        dumped = pickle.load(f)
    for _ in range(tries):
        while _RIG:
            _RIG.pop().close()
        _RIG.append(Rig(dumped["serial"]))
        rig = _RIG[0]
        for i, data in enumerate(dumped["inputs"]):
            rig.log.append(data)
            try:
                _one_input(rig, data)
            except AssertionError:
                traceback.print_exc()
                return i
        if not rig.tainted or rig.moving:
            break
    return -1


def _one_input(rig: Rig, data: bytes) -> None:
    from fuzz.frames import attack
    from fuzz.targets_cores import _drain_received

    rig.inputs += 1
    rig.failed = True  # until this input passes
    d = Draw(data)
    sw, py, now = rig.sw, rig.py, rig.now
    got_c, got_py = [], []  # what each switch's port 2 neighbour received
    out_c, out_py = [], []  # what each switch sent its port 1 neighbour (the attacker)
    for _ in range(1 + d.below(3)):
        round_ = list(attack(d, rig.attacker, sw.ports[1].link, rig.targets, now, rig.history))
        for dgram in round_:
            if rig.sent % STRANGER_EVERY == 2:
                rig.socks[2].sendto(b"\x47\x53" + bytes(dgram)[2:], rig.addr)
                rig.strangers += 1
            rig.socks[1].sendto(dgram, rig.addr)  # loopback: queued before sendto returns
            rig.sent += 1
        wire = _run_until(rig, now, [bytes(dg) for dg in round_], d.below(8) == 0, out_py)
        wire += [bytes(dg) for dg in sw.ports[1].link.handle_timer(now)]
        out_py += [bytes(dg) for dg in py.ports[1].link.handle_timer(now)]
        assert sw.plane.flush(now) == {}
        out_py += [bytes(dg) for dg in py.ports[1].link.datagrams(now)]
        wire += recv_all(rig.socks[1])
        for dg in wire:
            rig.attacker.receive(dg, now)
        out_c += wire
        for dg in rig.attacker.handle_timer(now):  # the attacker's own retransmissions
            rig.socks[1].sendto(dg, rig.addr)
            rig.sent += 1
            wire = _run_until(rig, now, [bytes(dg)], False, out_py)
            for w in wire:
                rig.attacker.receive(w, now)
            out_c += wire
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
    if got_c != got_py or out_c != out_py:
        rig.diff = (got_c, got_py, out_c, out_py)
    assert out_c == out_py, "the compiled loop sent on port 1 otherwise than the Python switch"
    assert got_c == got_py, "the compiled loop forwarded to port 2 otherwise than the Python switch"
    fwd_c, fwd_py = (Counter({k: v for k, v in s.status()["counters"].items() if v}) for s in (sw, py))
    assert fwd_c == fwd_py, f"switch counters differ: {fwd_c - fwd_py} / {fwd_py - fwd_c}"
    ports_c, ports_py = sw.status()["ports"], py.status()["ports"]
    assert ports_c == ports_py, f"port counters or links differ: {ports_c} / {ports_py}"
    rig.failed = False


if __name__ == "__main__":
    import sys

    for arg in sys.argv[1:]:
        print(arg, "raised at input", replay(arg))
