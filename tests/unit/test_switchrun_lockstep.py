"""SwitchPlane.run (daemons/_switchrun.h) against the Python Switch, one batch at a time.

run() receives what one ppoll wake-up finds on a cable as one batch: every datagram into
the port's link (its Messages walked into the input queues, its ADMIN micropackets answered
into the Admin engine's queue), then ONE pump, then the flush.  The Python switch does the
same when the batch is received into its link and then processed once, as its own daemon
path does (daemons/io/runner.py LinkRunner.run: the drained datagrams received, then one
on_input).  Fed so, the two agree down to the rng: Switch.pump shuffles its sources (with
the Switch's rng, which its links draw their nonces from too) only when two or more have
segments waiting, and the plane calls that same shuffle at the same moment.

Processed after every datagram instead, the Python switch pumps more often, with fewer
sources waiting each time, and draws less: that is how the fuzz target switchloop.run's
first oracle (a pump per datagram) drifted from the C loop without any fault in either,
its rng one shuffle behind, until a later pump with the Admin engine and port 1 both
waiting for port 1's output put them in a different order (fuzz/README.md).
"""

from __future__ import annotations

from daemons import constants as C
from daemons.constants import AdminCmd, MpType
from daemons.wire.admin import Admin
from daemons.wire.message import encode_stream, single_records, stream_records
from fuzz.frames import S_ULA
from tests.fuzz.switchrun_target import OTHER_ULA, Rig, _delivered, _port2, _run_until


def _batch(rig: Rig) -> list[bytes]:
    """Two datagrams from the attacker, sent on the socket before run() is called: an Admin
    request for this switch (answered on port 1 by the Admin engine), then a Message to
    port 2's neighbour.  Pumped together, two sources wait (the Admin engine and port 1)
    and the pump shuffles them; pumped one after the other, one waits each time."""
    a, now = rig.attacker, rig.now
    a.enqueue(C.VC_ADMIN_REQUEST, single_records(C.VC_ADMIN_REQUEST, MpType.ADMIN,
                                                 Admin(AdminCmd.ARE_YOU_THERE, xid=7).encode()))
    first = a.datagrams(now)
    a.enqueue(0, stream_records(0, encode_stream(0, OTHER_ULA, S_ULA, 0x88B5, bytes(range(100)))))
    second = a.datagrams(now)
    assert len(first) == len(second) == 1
    dgrams = [bytes(first[0]), bytes(second[0])]
    for dg in dgrams:
        rig.socks[1].sendto(dg, rig.addr)
    return dgrams


def test_run_takes_a_batch_as_one_pass_of_the_python_switch():
    for _ in range(5):  # a run() call preempted past RUN_EXACT_S runs on another clock: try again
        rig = Rig(1)  # the attacker's source bound, time standing still
        try:
            dgrams = _batch(rig)
            py_out: list[bytes] = []
            wire = _run_until(rig, rig.now, dgrams, False, py_out)
            if rig.tainted:
                continue
            assert [(reason, n) for _, reason, n, _ in rig.trace] == [("events", 2)]  # one batch (ADMIN: events)
            assert rig.sw.rng.getstate() == rig.py.rng.getstate()  # the same shuffles
            assert wire == py_out and wire  # port 1: the Admin answer, acks and credits, byte for byte
            got = []
            for sw, other in ((rig.sw, rig.other), (rig.py, rig.py_other)):
                _port2(sw, other, rig.now)
                got.append(_delivered(other))
            assert got[0] == got[1] and len(got[0]) == 1  # the Message, at port 2's neighbour
            assert rig.sw.status()["ports"] == rig.py.status()["ports"]
            return
        finally:
            rig.close()
    raise AssertionError("every run() call was slower than RUN_EXACT_S")


def test_a_pump_per_datagram_draws_otherwise():
    """The batch above, the Python switch pumping after each datagram: same Messages, but
    its rng is one shuffle behind the C loop's (what the old lockstep hid for many inputs)."""
    rig = Rig(1)
    try:
        dgrams = _batch(rig)
        reason, received, _ = rig.sw.plane.run(rig.now, rig.now, rig.trio_r)
        assert received == {1: 2}
        for dg in dgrams:
            rig.py.ports[1].link.receive(dg, rig.now)
            rig.py.process(1, rig.now)
        assert rig.sw.rng.getstate() != rig.py.rng.getstate()
        rig.py.rng.shuffle([0, 1, 2])  # the draw it missed
        assert rig.sw.rng.getstate() == rig.py.rng.getstate()
    finally:
        rig.close()
