"""The transmit side of daemons/_txfast.h against the path it shortcuts.

A large TAP frame is queued as its stream and encoded straight into the datagram that
takes it (tx_encode, in pieces when a frame spans datagrams); the reference is the same
frame turned into a Message by wire/ether.py, encoded by Endpoint.send and copied into
the datagram by the link (tx_stamp).  Two rigs in the same state, one fed each way: the
link's datagrams must be equal byte for byte, whatever the block CRC in use.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from daemons import _link
from daemons.constants import ETHERTYPE_IPV4, ETHERTYPE_IPV6, ULA_BROADCAST
from daemons.wire.ether import FrameDrop, frame_to_message
from tests.unit.dprig import MTU, ULAS, Rig
from tests.unit.test_dataplane import frame, ipv4

_DEFAULT = _link.crc_impl()
IMPLS = ["tables"] + [i for i in ("clmul", "vpclmul") if _link.crc_impl(i) == i]
_link.crc_impl(_DEFAULT)


@pytest.fixture(scope="module", params=IMPLS)
def crc_impl(request):
    before = _link.crc_impl()
    assert _link.crc_impl(request.param) == request.param
    yield request.param
    _link.crc_impl(before)


@st.composite
def tx_frames(draw):
    size = draw(st.one_of(st.integers(20, 2100), st.integers(2100, MTU)))  # below and above TX_RAW_MIN
    if draw(st.booleans()):
        payload = ipv4(size)
        et = ETHERTYPE_IPV4
    else:
        payload = draw(st.binary(min_size=1, max_size=256)) * (size // 256 + 1)
        payload, et = payload[:size], ETHERTYPE_IPV6
    return frame(draw(st.sampled_from([ULAS[1], ULA_BROADCAST])), et, payload)


def datagrams_both_ways(fs, window_steps: int) -> tuple[list[bytes], list[bytes]]:
    """The datagrams side 0's link sends for frames fs: (through the TAP pump, through
    Endpoint.send), taken in window_steps rounds (a frame may span datagrams and rounds)."""
    rigs = [Rig(seed=5), Rig(seed=5)]
    try:
        for r in rigs:
            r.bring_up()
        for f in fs:
            rigs[0].taps[0].outer.send(f)
        assert rigs[0].dps[0].tap_batch(1 << 30) == len(fs)
        for f in fs:
            m = frame_to_message(f, MTU)
            assert not isinstance(m, FrameDrop)
            rigs[1].eps[0].send(1, *m)
        out: tuple[list[bytes], list[bytes]] = ([], [])
        for step in range(window_steps):
            now = rigs[0].now + 0.001 * (step + 1)
            for r, got in zip(rigs, out):
                got.extend(bytes(d) for d in r.eps[0].link.datagrams(now))
        return out
    finally:
        for r in rigs:
            r.close()


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(fs=st.lists(tx_frames(), min_size=1, max_size=4))
def test_frames_encoded_into_the_datagram_match_the_python_encoding(crc_impl, fs):
    pumped, sent = datagrams_both_ways(fs, 3)
    assert pumped, "nothing was sent"
    assert pumped == sent


def test_a_frame_split_over_datagrams_keeps_its_running_ecrc(crc_impl):
    big = frame(ULAS[1], ETHERTYPE_IPV4, ipv4(MTU))  # 2,042 micropackets: more than one datagram
    pumped, sent = datagrams_both_ways([big, big], 4)
    assert len(pumped) >= 3
    assert pumped == sent
