"""The compiled reassembly (what gsnd's data plane runs for VC1) against the oracle
Reassembler, on whole, corrupted, truncated, split and VC-interleaved Messages."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from daemons import _link
from daemons.constants import MpType
from daemons.wire.message import encode_stream, single_records, stream_records
from tests.unit.reasmdiff import check

A, B = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")
LIMITS = {0: 2000, 1: 9000, 2: 9000, 3: 9000}


def message(vc, size, ethertype=0x0800, fill=1):
    return stream_records(vc, encode_stream(vc, A, B, ethertype, bytes([fill]) * size)).tobytes()


def admin(vc, tail=True):
    rec = single_records(vc, MpType.ADMIN, bytes(range(32)))
    if not tail:
        rec["ctrl"] &= np.uint64(~(1 << 57) & (2**64 - 1))  # LCRC is the link's business, not reassembly's
    return rec.tobytes()


def flip(mps: bytes, bit: int) -> bytes:
    b = bytearray(mps)
    b[(bit // 8) % len(b)] ^= 1 << (bit % 8)
    return bytes(b)


def test_whole_messages_each_vc():
    out = check([(vc, message(vc, 100 * vc + 7)) for vc in range(4)])
    assert [o[0] for o in out[0]] == ["message"] * 4


def test_two_cancelling_errors_are_caught_by_ecrc():
    # the same bit flipped in two DATA micropackets: each one's ECRC fails on its own
    m = bytearray(message(1, 300))
    for k in (2, 3):
        m[40 * k + 5] ^= 0x10
    out, counters = check([(1, bytes(m))])
    assert out == [] and counters == {"discard_ecrc": 1}


def test_truncated_header_in_open_message_stray_and_reset():
    m = message(1, 500)
    out, counters = check([(1, m[:200]), (1, m), (1, m[80:]), (1, m[:120]), None, (1, m)])
    assert counters["discard_header_in_open_message"] == 1 and counters["aborted_on_reset"] == 1
    assert counters["stray_data_mps"] > 0 and len(out) == 1


def test_admin_defects_and_limits():
    check([(1, admin(1)), (1, admin(1, tail=False)), (2, flip(admin(2), 3))])
    check([(1, message(1, 5000))], max_payload=4000)
    check([(0, message(0, 2176)), (0, message(0, 2180))])


@st.composite
def batches(draw):
    """Messages and ADMINs on random VCs, cut into batches, interleaved across VCs,
    some corrupted (any bit of data or control word), truncated or reset between."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    pieces = []
    for _ in range(draw(st.integers(1, 8))):
        vc = draw(st.integers(0, 3))
        if draw(st.integers(0, 5)) == 0:
            mps = admin(vc, tail=draw(st.booleans()))
        else:
            mps = message(vc, draw(st.integers(0, LIMITS[vc])), draw(st.sampled_from([0x0800, 0x86DD, 0x88B5])),
                          fill=draw(st.integers(0, 255)))
        for _ in range(draw(st.integers(0, 2))):
            mps = flip(mps, draw(st.integers(0, 8 * len(mps) - 1)))
        if draw(st.integers(0, 4)) == 0:  # truncate or drop a piece from the middle
            n = len(mps) // 40
            a = draw(st.integers(0, n - 1))
            b = draw(st.integers(a, n))
            mps = mps[: 40 * a] + mps[40 * b:]
        cuts = sorted(rng.randrange(0, len(mps) // 40 + 1) for _ in range(draw(st.integers(0, 3))))
        prev = 0
        for c in cuts + [len(mps) // 40]:
            if c > prev:
                pieces.append((vc, mps[40 * prev: 40 * c]))
            prev = c
    if draw(st.booleans()):
        rng.shuffle(pieces)  # interleaved VCs (and, within one, out of order: the oracle's business too)
    else:  # keep order per VC, interleave across VCs
        per = {}
        for p in pieces:
            per.setdefault(p[0], []).append(p)
        pieces = []
        while per:
            vc = rng.choice(sorted(per))
            pieces.append(per[vc].pop(0))
            if not per[vc]:
                del per[vc]
    if draw(st.integers(0, 6)) == 0:
        pieces.insert(draw(st.integers(0, len(pieces))), None)
    return pieces


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batches(), st.sampled_from([None, 3000, 100000]))
def test_compiled_reassembly_matches_oracle(bs, max_payload):
    check(bs, max_payload)


_DEFAULT = _link.crc_impl()
IMPLS = ["tables"] + [i for i in ("clmul", "vpclmul") if _link.crc_impl(i) == i]
_link.crc_impl(_DEFAULT)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("k", [1, 5, 7, 8, 13, 16, 63, 64, 100, 120])
def test_an_error_bit_anywhere_in_a_long_run(impl, k):
    """ra_append takes whole groups of eight at once where the CPU can (crc_impl
    "vpclmul"), up to a group with an ERROR bit, which the scalar loop takes in order:
    the ERROR bit of micropacket k alone, after a wrong ECRC earlier in the run, and
    before one later, gives the oracle's reason each time (ERROR before ECRC)."""
    before = _link.crc_impl()
    assert _link.crc_impl(impl) == impl
    try:
        m = bytearray(message(1, 4000, fill=7))
        m[40 * k + 32] ^= 0x01  # bit 56 of micropacket k's control word: ERROR
        check([(1, bytes(m))])
        for other in (k - 1, k + 3):
            e = bytearray(m)
            e[40 * other + 3] ^= 0x20  # a data bit: that micropacket's stored ECRC is wrong
            check([(1, bytes(e))])
            check([(1, bytes(e[: 40 * (k + 9)])), (1, bytes(e[40 * (k + 9):]))])  # the run cut after it
    finally:
        _link.crc_impl(before)


def test_bad_arguments_are_errors_not_crashes():
    with pytest.raises(ValueError):
        _link.reassemble(-1, [(4, b"")])
    with pytest.raises(ValueError):
        _link.reassemble(-1, [(1, b"x" * 39)])
    with pytest.raises(TypeError):
        _link.reassemble(-1, [5])
