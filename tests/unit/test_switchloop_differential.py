"""gsn-switch's compiled data path (Switch(plane=True), daemons/_switchloop.h) against its
Python oracle (the Switch's own _ingress + pump): the same cable datagrams in give the
same datagrams out of every port, the same counters (switch, ports, links) and the same
Messages at the hosts.

A three-port switch, hosts on ports 1 and 2 sending Messages of any length on any VC
(to host 3, to each other, broadcast, to an unknown ULA, with a spoofed source) while
host 3 frees its receive buffers slowly: two inputs contend for one output VC (the
wormhole) and the output's credits run out (the back-pressure).  On the way to the
switch datagrams are corrupted (two cancelling bit flips included), truncated, dropped,
duplicated; links are reset in the middle of Messages.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from daemons import constants as C
from daemons.wire.micropacket import MP_DTYPE
from tests.fuzz.switchloop_target import DESTS, FAULTS, run

MSG = st.tuples(st.sampled_from([1, 2]), st.integers(0, 3), st.sampled_from(DESTS),
                st.integers(0, 4).map(lambda x: x == 0), st.integers(0, 3000), st.integers(6, 30))
FAULT = st.tuples(st.integers(0, 90), st.sampled_from(FAULTS))


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 2**16), st.lists(MSG, max_size=12), st.lists(FAULT, max_size=10), st.integers(1, 4))
def test_compiled_switch_matches_python(seed, msgs, faults, release_every):
    want = run(False, seed, msgs, faults, release_every)
    got = run(True, seed, msgs, faults, release_every)
    assert got[0] == want[0]  # every datagram out of every port
    assert got[1] == want[1]  # what the hosts received
    assert got[2] == want[2]  # switch and port counters, tables
    assert got[3] == want[3]  # link counters
    assert got[4] == want[4]  # what is left queued, open Messages, output VC owners


def test_two_inputs_contend_for_one_output_and_credits_run_out():
    """Hand-checked: both hosts send long Messages to host 3 on VC1; the output VC carries
    one Message at a time (no interleaving at host 3), and host 3's slow release holds
    the switch's output queue at the VC's buffer."""
    msgs = [(1, 1, 3, False, 900, 6), (2, 1, 3, False, 900, 6), (1, 1, 3, False, 300, 6), (2, 1, 3, False, 500, 7)]
    for plane in (False, True):
        _, got, st_, _, _ = run(plane, 3, msgs, [], 3, rounds=120)
        stream = b"".join(recs for e in got[3] if isinstance(e, tuple) for recs in [e[1]])
        recs = np.frombuffer(stream, MP_DTYPE)
        types = (recs["ctrl"] >> np.uint64(58)) & np.uint64(0xF)
        tails = (recs["ctrl"] >> np.uint64(57)) & np.uint64(1)
        headers, ends = np.flatnonzero(types == C.MpType.HEADER), np.flatnonzero(tails)
        assert len(headers) == 4 and len(ends) == 4
        assert all(h < e < h2 for h, e, h2 in zip(headers, ends, list(headers[1:]) + [len(recs)]))
        assert st_["ports"]["3"]["counters"]["tx_mps"] == len(recs)
    assert run(False, 3, msgs, [], 3, rounds=120) == run(True, 3, msgs, [], 3, rounds=120)


def test_an_output_vc_is_owned_mid_message_the_same_way():
    """Two rounds after both hosts start: host 2's Message holds port 3's VC1 (the
    wormhole) and is still open at the input; both paths say so."""
    msgs = [(1, 1, 3, False, 900, 6), (2, 1, 3, False, 900, 6), (1, 1, 3, False, 300, 6), (2, 1, 3, False, 500, 7)]
    got, want = run(True, 3, msgs, [], 3, rounds=8)[4], run(False, 3, msgs, [], 3, rounds=8)[4]
    assert got == want
    assert got[3]["owner"][1] == 2 and got[2]["current"][1] == (3,)
