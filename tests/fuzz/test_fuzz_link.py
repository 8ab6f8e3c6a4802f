"""Short fuzz runs of CLink.receive against Link (see link_target.py).

GSN_FUZZ_RUNS sets the number of inputs (default 300 here; run longer by hand with
fuzz_link.py).
"""

from __future__ import annotations

import pytest

from daemons.link.clink import CLink
from daemons.link.link import Link
from daemons.wire.message import Message
from tests.fuzz.link_target import A, B, _obs, _pair, one_input
from tests.fuzz.shortrun import atheris_short_run, random_inputs


@random_inputs(600)
def test_random_inputs_agree_with_link(data):
    one_input(data)


@pytest.mark.parametrize("seed", [bytes([op, 1, 0, 200, 2, 7, 0, 0, 0, 0]) * 8 for op in range(5)]
                         + [bytes([1, 1, 5, 220, 2, 0, 0, 9, 3, 3, 1, 7, 4, 30, 3, 0]),
                            # a replayed datagram with bit 63 of its shim seq flipped: CLink took
                            # the distance as signed, buffered it (out_of_order) and SACKed it
                            b"\x01\x004\xc5\x03\x00\xa7\x00\x01\xe4"])
def test_seed_inputs(seed):
    one_input(seed)
    one_input(seed[:5])


def test_atheris_short_run():
    atheris_short_run("tests.fuzz.fuzz_link", 600)


def test_seq_whose_end_passes_2_64_is_out_of_window():
    """A datagram at seq 2^64 - 1 with more micropackets than the victim's expected + 1:
    its end wraps past 2^64 in CLink's u64 to just ahead of expected; Link's ints see it
    2^64 ahead (out_of_window). CLink buffered it (out_of_order) and SACKed it."""
    a, b, now = _pair(Link)
    _ca, cb, _ = _pair(CLink)
    a.next_seq = a.base = 2**64 - 1  # the attacker's next datagram carries shim seq 2^64 - 1
    a.enqueue(0, Message(0, A, B, 0x88B5, bytes(1200)).records())
    (d, *_) = [bytes(x) for x in a.handle_timer(now) + a.datagrams(now)]
    assert (len(d) - 32) // 40 > b.expected + 1
    b.receive(d, now)
    cb.receive(d, now)
    o0, o1 = _obs(b, now), _obs(cb, now)
    assert o0[1]["counters"].get("out_of_window") == 1
    assert o0 == o1
