"""The compiled ingress walk (daemons._switchfwd.Forwarder) against its Python oracle
(daemons.switch.forward.PyForwarder): for the same switch (ports with their flags and
link states, ULA table, broadcast, spanning tree) and the same batches, on any input
VC, both return the same segments, open-Message state, drop counts and stray counts,
or both raise the same error.  Batches are drawn with arbitrary control words
(corrupt TYPE/TAIL bits, HEADERs inside Messages, stray DATA, ADMIN in between),
known, unknown and broadcast ULAs, and interleaved input VCs and ports."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from daemons import constants as C
from daemons.constants import MpType
from daemons.switch.forward import COUNTERS, Forwarder, PyForwarder
from tests.fuzz.switchfwd_target import POOL, PORTS, make_ports, mp

KIND = st.sampled_from([MpType.DATA] * 6 + [MpType.HEADER] * 3 + [MpType.ADMIN, MpType.NULL, 0xF])
ULA = st.sampled_from(POOL)
# any ERROR/VCR/CR/RSEQ/TSEQ/ECRC/LCRC bits (the walk reads TYPE and TAIL only)
MICROPACKET = st.builds(mp, KIND, st.integers(0, 1), st.integers(0, (1 << 57) - 1), ULA, ULA, st.integers(0, 3))
SWITCH = st.tuples(
    st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans()), min_size=len(PORTS), max_size=len(PORTS)),
    st.lists(st.booleans(), min_size=len(PORTS), max_size=len(PORTS)),
    st.dictionaries(ULA.filter(lambda u: u != C.ULA_BROADCAST), st.sampled_from(PORTS), max_size=6),
    st.booleans(),
    st.integers(0, (1 << 64) - 1),
)
BATCHES = st.lists(st.tuples(st.sampled_from(PORTS), st.integers(0, 3), st.lists(MICROPACKET, max_size=24)),
                   max_size=8)


def walk_all(fwd, ports, batches, broadcast, tree):
    """Feed every batch as Switch._ingress does (resume after each ADMIN); return
    everything the walk said, in order."""
    current = {(p, vc): None for p in ports for vc in range(C.NUM_VCS)}
    said = []
    for in_port, vc, mps in batches:
        recs, pos = b"".join(mps), 0
        while pos < len(mps):
            segs, pos, current[in_port, vc], counts, strays = fwd.ingress(
                recs, vc, in_port, current[in_port, vc], pos, broadcast, tree)
            said.append((segs, pos, current[in_port, vc], counts, strays))
            pos += 1  # past the ADMIN micropacket
    return said


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(SWITCH, BATCHES)
def test_compiled_walk_matches_python(switch, batches):
    flags, ups, table, broadcast, tree = switch
    ports = make_ports(flags, ups)
    got = walk_all(Forwarder(ports, dict(table)), ports, batches, broadcast, tree)
    want = walk_all(PyForwarder(ports, dict(table)), ports, batches, broadcast, tree)
    assert got == want
    for segs, _, _, counts, _ in got:
        assert len(counts) == len(COUNTERS)
        assert all(t in PORTS for s in segs for t in s[2])


def _header(d: bytes, s: bytes, vc: int = 1, tail: int = 0) -> bytes:
    return mp(MpType.HEADER, tail, 0, d, s, vc)


def test_a_message_is_routed_segmented_and_closed():
    """A hand-checked case both walks must give: HEADER+DATA to a known ULA, then a
    HEADER inside an open Message (closed with TAIL + ERROR), stray DATA, an unknown ULA."""
    ports = make_ports([(False, False, False)] * len(PORTS), [True] * len(PORTS))
    table = {POOL[0]: 1, POOL[1]: 2}
    recs = b"".join([_header(POOL[1], POOL[0]), mp(MpType.DATA, 0, 0, b"\0" * 6, b"\0" * 6, 1),
                     _header(POOL[5], POOL[0]), mp(MpType.DATA, 1, 0, b"\0" * 6, b"\0" * 6, 1),
                     mp(MpType.DATA, 1, 0, b"\0" * 6, b"\0" * 6, 1)])
    for impl in (Forwarder, PyForwarder):
        segs, pos, cur, counts, strays = impl(ports, table).ingress(recs, 1, 1, None, 0, True, 0)
        assert segs == [(0, 2, (2,), False), (2, 2, (2,), True), (2, 4, (), True)]
        assert (pos, cur, strays) == (5, None, 1)
        named = {n: k for n, k in zip(COUNTERS, counts) if k}
        assert named == {"rx_messages": 2, "header_inside_message": 1, "drop_unknown_ula": 1, "drop_stray_data": 1}


def test_broadcast_follows_the_tree():
    """From a tree port: every host port that is up and the other tree ports; from an
    inter-switch port off the tree: dropped."""
    flags = [(False, False, False), (False, False, False), (False, False, True), (True, False, False),
             (True, False, False)]
    ports = make_ports(flags, [True, False, True, True, True])
    recs = _header(C.ULA_BROADCAST, POOL[0], tail=1)
    for impl in (Forwarder, PyForwarder):
        fwd = impl(ports, {})
        segs, *_ = fwd.ingress(recs, 1, 7, None, 0, True, 1 << 6 | 1 << 39)
        assert segs == [(0, 1, (1, 40), True)]  # port 2 down, port 3 a stray switch
        segs, _, _, counts, _ = fwd.ingress(recs, 1, 7, None, 0, True, 1 << 39)
        assert segs == [(0, 1, (), True)] and counts[COUNTERS.index("drop_broadcast_off_tree")] == 1


@pytest.mark.parametrize("impl", [Forwarder, PyForwarder])
@pytest.mark.parametrize("recs, vc, pos", [(b"\0" * 39, 0, 0), (b"\0" * 81, 0, 0), (b"\0" * 40, 4, 0),
                                           (b"\0" * 40, -1, 0), (b"\0" * 40, 0, 2), (b"\0" * 40, 0, -1)])
def test_truncated_batches_and_bad_arguments_are_refused(impl, recs, vc, pos):
    ports = make_ports([(False, False, False)] * len(PORTS), [True] * len(PORTS))
    with pytest.raises(ValueError):
        impl(ports, {}).ingress(recs, vc, 1, None, pos, True, 0)


@pytest.mark.parametrize("impl", [Forwarder, PyForwarder])
def test_unknown_ingress_port_is_a_key_error(impl):
    ports = make_ports([(False, False, False)] * len(PORTS), [True] * len(PORTS))
    with pytest.raises(KeyError):
        impl(ports, {}).ingress(b"", 0, 99, None, 0, True, 0)
