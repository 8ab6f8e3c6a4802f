"""Regression: errors that cancel in an XOR fold must not get through.

The link used to verify a datagram's LCRCs with one XOR fold, and the reassembler
its ECRCs likewise: flipping the same bit in two micropackets of one datagram
passed both, and a corrupted Message was delivered.  Now every micropacket's LCRC
is checked on its own at the link, and ECRC exactly at the destination.
"""

from __future__ import annotations

import numpy as np

from daemons import constants as C
from daemons.link.reassembly import Delivered, Reassembler
from daemons.wire.message import Message
from daemons.wire.micropacket import MP_DTYPE, lcrc_fold_ok
from tests.unit.linkpair import Pair, each_impl

A, B = b"\x02" * 6, b"\x04" * 6


def _first_data_datagram(link, now):
    for d in link.datagrams(now):
        if d[3] & C.SHIM_FLAG_SEQUENCED and (len(d) - C.SHIM_BYTES) // C.MP_BYTES >= 8:
            return d
    raise AssertionError("no sequenced datagram with the Message")


def _flip(datagram, mps, byte, bit=0x08):
    raw = bytearray(datagram)
    for i in mps:
        raw[C.SHIM_BYTES + i * C.MP_BYTES + byte] ^= bit
    return bytes(raw)


@each_impl
def test_same_bit_flipped_in_two_micropackets_delivers_nothing_corrupt_and_counts_two_drops(impl):
    p = Pair(impl=impl, seed=11)
    p.run(0.05)
    assert p.up()
    m = Message(1, A, B, 0x88B5, bytes(range(256)) * 4)
    p.links[0].enqueue(1, m.records())
    good = _first_data_datagram(p.links[0], p.now)
    bad = _flip(good, (2, 5), byte=17)  # same data bit in two DATA micropackets
    assert lcrc_fold_ok(np.frombuffer(bad, MP_DTYPE, offset=C.SHIM_BYTES))  # the old check passed it
    before = p.links[1].counters["rx_mps"]
    p.links[1].receive(bad, p.now)
    c = p.links[1].counters
    assert c["lcrc_error"] == 2
    assert c["rx_mps"] - before == 2  # only the in-sequence prefix before the first bad one
    p.run(0.5)  # go-back-N retransmits the rest
    assert p.got[1] == [m]
    assert p.reasm[1].counters == {}  # nothing discarded, nothing corrupt delivered


@each_impl
def test_cancelling_errors_in_control_batch_drop_only_the_bad_micropackets(impl):
    p = Pair(impl=impl, seed=12)
    p.run(0.05)
    null = p.links[0]._control_datagram(C.MpType.NULL)
    two = null + null[C.SHIM_BYTES:] * 2
    bad = _flip(two, (0, 2), byte=35)  # same control bit in micropackets 0 and 2
    p.links[1].receive(bad, p.now)
    c = p.links[1].counters
    assert c["lcrc_error"] == 2 and c["dropped_after_lcrc_error_mps"] == 0


def test_reassembler_catches_cancelling_data_errors_by_ecrc():
    m = Message(2, A, B, 0x88B5, bytes(1000))
    recs = m.records()
    raw = recs.view(np.uint8).reshape(len(recs), C.MP_BYTES)
    raw[3, 9] ^= 0x40
    raw[7, 9] ^= 0x40  # LCRC not checked here: corruption past the link (e.g. in a switch)
    r = Reassembler()
    assert r.feed(2, recs) == []
    assert r.counters["discard_ecrc"] == 1
    ok = Reassembler().feed(2, m.records())
    assert [d.message for d in ok if isinstance(d, Delivered)] == [m]
