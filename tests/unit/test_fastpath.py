"""Differential tests: every daemons._fastpath kernel against its numpy/Python oracle.

Also run, in a subprocess, against an ASan+UBSan build (test_fastpath_sanitizers.py),
so keep it quick and self-contained.
"""

from __future__ import annotations

import binascii

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from daemons import _fastpath as F
from daemons import constants as C
from daemons.wire.crc import ecrc_chain_ok
from daemons.wire.message import stream_records_numpy
from daemons.wire.micropacket import MP_DTYPE, lcrc_exact, lcrc_fold_ok
from tests.unit.fastpath_oracle import oracle_ecrc_first_bad, oracle_stamp

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# the block CRC by the tables, by carry-less multiply and four blocks at a time by AVX-512
# VPCLMULQDQ (when this CPU has them): every implementation goes through every test below
_DEFAULT = F.crc_impl()
IMPLS = ["tables"] + [i for i in ("clmul", "vpclmul") if F.crc_impl(i) == i]
F.crc_impl(_DEFAULT)


@pytest.fixture(scope="module", autouse=True, params=IMPLS)
def crc_impl(request):
    before = F.crc_impl()
    assert F.crc_impl(request.param) == request.param
    yield request.param
    F.crc_impl(before)


def oracle_records(vc, stream, first_type=C.MpType.HEADER):
    return stream_records_numpy(vc, stream, first_type)


def c_records(vc, head, payload=b"", first_type=C.MpType.HEADER):
    n = -(-(len(head) + len(payload)) // C.MP_DATA_BYTES)
    out = np.empty(n, MP_DTYPE)
    assert F.encode(head, payload, out, vc, first_type) == n
    return out


def padded(stream: bytes) -> bytes:
    return stream + bytes(-len(stream) % C.MP_DATA_BYTES)


messages = st.builds(
    lambda vc, t, s: (vc, t, s),
    st.integers(0, 3),
    st.sampled_from([int(C.MpType.HEADER), int(C.MpType.ADMIN), int(C.MpType.DATA)]),
    # 1..22 blocks, and 32..200: several of the encode's 64-block chunks, the running ECRC
    # carried from one to the next, and a chunk's tail
    st.binary(min_size=1, max_size=700) | st.binary(min_size=1000, max_size=6400),
)


# --- CRC ---------------------------------------------------------------------------


@SETTINGS
@given(st.lists(st.binary(min_size=32, max_size=32) | st.sampled_from([bytes(32), b"\xff" * 32]),
                min_size=1, max_size=40))
def test_encode_crcs_match_bitwise_crc_of_each_block(blocks):
    # ECRC and LCRC of every micropacket from the block CRC under test, against binascii
    head = b"".join(blocks)
    mps = c_records(1, head, first_type=C.MpType.DATA)
    ecrc = 0xFFFF
    for i, blk in enumerate(blocks):
        ecrc = binascii.crc_hqx(blk, ecrc)
        raw = mps[i].tobytes()
        assert int.from_bytes(raw[36:38], "big") == ecrc
        assert int.from_bytes(raw[38:40], "big") == binascii.crc_hqx(raw[:38], 0xFFFF)


@SETTINGS
@given(st.binary(max_size=300), st.integers(0, 0xFFFF))
def test_crc16_matches_binascii(data, init):
    assert F.crc16(data, init) == binascii.crc_hqx(data, init)
    assert F.crc16(data) == binascii.crc_hqx(data, C.CRC_INIT)


def test_crc16_check_value_and_large_buffer():
    assert F.crc16(b"123456789") == C.CRC_CHECK
    big = np.random.default_rng(1).integers(0, 256, 100_000, dtype=np.uint8)  # releases the GIL
    assert F.crc16(big) == binascii.crc_hqx(big.tobytes(), C.CRC_INIT)


# --- encode --------------------------------------------------------------------------


@SETTINGS
@given(messages, st.integers(0, 700))
def test_encode_matches_numpy_stream_records(msg, cut):
    vc, first_type, body = msg
    stream = padded(body)
    want = oracle_records(vc, stream, first_type)
    assert c_records(vc, stream, b"", first_type).tobytes() == want.tobytes()
    # head/payload split anywhere, unpadded: the kernel zero-fills
    cut = min(cut, len(body))
    assert c_records(vc, body[:cut], body[cut:], first_type).tobytes() == want.tobytes()


def test_encode_spec_regression_vectors():
    # spec §8: HEADER then DATA after a link reset (stamped RSEQ 0xFF, TSEQ 0 and 1)
    from daemons.wire.message import Message

    m = Message(1, bytes.fromhex("020000000002"), bytes.fromhex("00103bffffe0"), C.ETHERTYPE_ARP, bytes(28))
    recs = c_records(1, m.stream()[:24], m.payload)
    assert recs.tobytes() == m.records().tobytes()


def test_encode_large_message_into_bigger_buffer():
    rng = np.random.default_rng(2)
    payload = rng.integers(0, 256, 65536, dtype=np.uint8)
    head = bytes(range(24))
    n = -(-(24 + len(payload)) // 32)
    out = bytearray(n * 40 + 123)
    assert F.encode(head, payload, out, 3) == n
    want = oracle_records(3, padded(head + payload.tobytes()))
    assert bytes(out[: n * 40]) == want.tobytes() and bytes(out[n * 40 :]) == bytes(123)


# --- LCRC check -------------------------------------------------------------------------


def _flags(buf, n):
    ok = np.empty(n, np.uint8)
    bad = F.lcrc_check(buf, ok)
    assert bad == F.lcrc_check(buf) == int((ok == 0).sum())
    return ok.astype(bool)


@SETTINGS
@given(st.binary(max_size=40 * 12).map(lambda b: b[: len(b) - len(b) % 40]))
def test_lcrc_check_matches_exact_oracle_on_garbage(blob):
    recs = np.frombuffer(blob, MP_DTYPE)
    assert (_flags(blob, len(recs)) == lcrc_exact(recs)).all()


@SETTINGS
@given(messages, st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 39 * 8 + 7)), max_size=4))
def test_lcrc_check_finds_exactly_the_corrupt_micropackets(msg, flips):
    vc, first_type, body = msg
    recs = oracle_records(vc, padded(body), first_type)
    raw = bytearray(recs.tobytes())
    for mp, bit in flips:
        raw[(mp % len(recs)) * 40 + bit // 8] ^= 1 << (bit % 8)
    got = _flags(raw, len(recs))
    assert (got == lcrc_exact(np.frombuffer(bytes(raw), MP_DTYPE))).all()
    # a single bit error in a micropacket is always detected
    hits = np.zeros(len(recs), int)
    for mp, _ in flips:
        hits[mp % len(recs)] += 1
    assert not got[hits == 1].any()


@SETTINGS
@given(st.integers(2, 40), st.data())
def test_cancelling_errors_pass_the_fold_but_not_the_exact_check(n, data):
    stream = bytes(data.draw(st.binary(min_size=32 * n, max_size=32 * n)))
    recs = oracle_records(1, stream)
    i, k = data.draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True))
    byte, bit = data.draw(st.integers(0, 39)), data.draw(st.integers(0, 7))
    raw = bytearray(recs.tobytes())
    raw[i * 40 + byte] ^= 1 << bit
    raw[k * 40 + byte] ^= 1 << bit
    bad = np.frombuffer(bytes(raw), MP_DTYPE)
    assert lcrc_fold_ok(bad)  # the flaw of the old fold ...
    ok = _flags(raw, n)
    assert sorted(np.flatnonzero(~ok)) == sorted([i, k])  # ... the kernel is exact
    if byte < 32:  # data corruption also slips through the ECRC fold, never the exact check
        assert ecrc_chain_ok(np.ascontiguousarray(bad["data"]), ((bad["ctrl"] >> 16) & 0xFFFF).astype(np.uint16))
        assert F.ecrc_check(raw) == min(i, k)


# --- stamp ---------------------------------------------------------------------------------


@SETTINGS
@given(messages, st.integers(0, 255), st.integers(-1, 255), st.lists(st.tuples(st.integers(0, 3), st.integers(0, 63)),
                                                                          max_size=6), st.booleans())
def test_stamp_matches_numpy_restamp(msg, rseq, tseq, grants, corrupt):
    vc, first_type, body = msg
    recs = oracle_records(vc, padded(body), first_type)
    grants = grants[: len(recs)] if tseq >= 0 else []
    if corrupt:  # a corrupt micropacket stays corrupt after stamping (linearity)
        raw = recs.view(np.uint8).reshape(len(recs), 40)
        raw[len(recs) // 2, 7] ^= 0x10
    want, got = recs.copy(), recs.copy()
    oracle_stamp(want, rseq, tseq, grants)
    F.stamp(got, rseq, tseq, bytes(x for g in grants for x in g))
    assert got.tobytes() == want.tobytes()
    assert (lcrc_exact(got) == lcrc_exact(recs)).all()
    F.stamp(got, (rseq + 1) % 256)  # RSEQ-only restamp, as on retransmission
    oracle_stamp(want, (rseq + 1) % 256, -1, [])
    assert got.tobytes() == want.tobytes()


# --- ECRC check -----------------------------------------------------------------------------


@SETTINGS
@given(messages, st.integers(0, 20), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 39 * 8 + 7)),
                                              max_size=3))
def test_ecrc_check_matches_exact_oracle(msg, split, flips):
    vc, first_type, body = msg
    recs = oracle_records(vc, padded(body), first_type)
    raw = bytearray(recs.tobytes())
    for mp, bit in flips:
        raw[(mp % len(recs)) * 40 + bit // 8] ^= 1 << (bit % 8)
    bad = np.frombuffer(bytes(raw), MP_DTYPE)
    assert F.ecrc_check(raw) == oracle_ecrc_first_bad(bad, C.CRC_INIT)
    # continuing from a previous part, as the reassembler does
    split = min(split, len(recs) - 1)
    if split:
        init = int((bad["ctrl"][split - 1] >> 16) & 0xFFFF)
        assert F.ecrc_check(raw[split * 40 :], init) == oracle_ecrc_first_bad(bad[split:], init)
    if not flips:
        assert F.ecrc_check(raw) == -1


# --- de-interleave -----------------------------------------------------------------------------


@SETTINGS
@given(st.binary(max_size=40 * 10).map(lambda b: b[: len(b) - len(b) % 40]), st.integers(0, 50))
def test_deinterleave_matches_numpy(blob, offset):
    recs = np.frombuffer(blob, MP_DTYPE)
    out = bytearray(offset + 32 * len(recs) + 5)
    assert F.deinterleave(recs, out, offset) == 32 * len(recs)
    assert bytes(out[offset : offset + 32 * len(recs)]) == recs["data"].tobytes()
    assert bytes(out[:offset]) == bytes(offset) and bytes(out[-5:]) == bytes(5)


# --- bad input: a clean exception, never a crash ------------------------------------------------


@pytest.mark.parametrize("length", [1, 39, 41, 79, 121])
def test_truncated_buffers_raise_value_error(length):
    blob = bytearray(length)
    for call in (lambda: F.lcrc_check(blob), lambda: F.ecrc_check(blob), lambda: F.stamp(blob, 0),
                 lambda: F.deinterleave(blob, bytearray(1000))):
        with pytest.raises(ValueError):
            call()


def test_wrong_sizes_and_types_raise_cleanly():
    recs = oracle_records(0, bytes(96))
    raw = recs.tobytes()
    with pytest.raises(ValueError):
        F.lcrc_check(raw, bytearray(2))  # ok buffer too short
    with pytest.raises(ValueError):
        F.encode(bytes(24), bytes(100), bytearray(3 * 40), 0)  # needs 4 micropackets
    with pytest.raises(ValueError):
        F.encode(b"", b"", bytearray(40), 0)  # empty Message
    for vc, t in ((4, 2), (-1, 2), (0, 16), (0, -1)):
        with pytest.raises(ValueError):
            F.encode(bytes(24), b"", bytearray(40), vc, t)
    with pytest.raises(ValueError):
        F.deinterleave(raw, bytearray(95))
    with pytest.raises(ValueError):
        F.deinterleave(raw, bytearray(96), 1)
    with pytest.raises(ValueError):
        F.deinterleave(raw, bytearray(200), -1)
    w = bytearray(raw)
    for args in ((256,), (-1,), (0, 256), (0, -2), (0, 0, b"\x04\x00"), (0, 0, b"\x00\x40"), (0, 0, b"\x00"),
                 (0, -1, b"\x00\x01"), (0, 0, bytes(8))):
        with pytest.raises(ValueError):
            F.stamp(w, *args)
    assert bytes(w) == raw  # nothing written on error
    with pytest.raises((TypeError, BufferError)):
        F.stamp(raw, 0)  # read-only
    with pytest.raises((TypeError, BufferError, ValueError)):
        F.stamp(np.frombuffer(raw, MP_DTYPE), 0)  # read-only numpy view
    with pytest.raises((TypeError, BufferError)):
        F.encode(bytes(24), b"", bytes(40), 0)
    with pytest.raises((TypeError, BufferError, ValueError)):
        F.lcrc_check(np.zeros(4, MP_DTYPE)[::2])  # not contiguous
    with pytest.raises(TypeError):
        F.lcrc_check("not a buffer")
    for init in (0x10000, -1, 2**32 + 5, 2**70):
        with pytest.raises((ValueError, OverflowError)):
            F.crc16(b"", init)
        with pytest.raises((ValueError, OverflowError)):
            F.ecrc_check(raw, init)
    w = bytearray(raw)
    with pytest.raises(ValueError):
        F.lcrc_check(w, memoryview(w)[10:])  # ok overlaps the micropackets
    buf = bytearray(200)
    with pytest.raises(ValueError):
        F.encode(memoryview(buf)[:24], b"", memoryview(buf)[10:], 0)  # out overlaps input


def test_accepts_every_buffer_kind():
    recs = oracle_records(2, bytes(range(64)))
    raw = recs.tobytes()
    for buf in (raw, bytearray(raw), memoryview(raw), recs, np.frombuffer(raw, np.uint8)):
        assert F.lcrc_check(buf) == 0 and F.ecrc_check(buf) == -1
    assert F.lcrc_check(b"") == 0 and F.ecrc_check(b"") == -1
    assert F.deinterleave(b"", bytearray(0)) == 0
    F.stamp(bytearray(), 0)


def test_large_batches_release_the_gil_and_still_agree():
    """Batches past the GIL-release threshold, all kernels, with corruption."""
    rng = np.random.default_rng(5)
    body = rng.integers(0, 256, 32 * 300, dtype=np.uint8).tobytes()
    recs = oracle_records(3, body)
    assert c_records(3, body[:24], body[24:]).tobytes() == recs.tobytes()
    raw = recs.view(np.uint8).reshape(len(recs), 40)
    for i in (0, 77, 150, 151, 299):
        raw[i, (i * 7) % 40] ^= 0x21
    ok = np.empty(len(recs), np.uint8)
    assert F.lcrc_check(recs, ok) == 5 and (ok.astype(bool) == lcrc_exact(recs)).all()
    assert F.ecrc_check(recs) == oracle_ecrc_first_bad(recs)
    want, got = recs.copy(), recs.copy()
    oracle_stamp(want, 9, 200, [(1, 63), (3, 5)])
    F.stamp(got, 9, 200, bytes([1, 63, 3, 5]))
    assert got.tobytes() == want.tobytes()
    out = bytearray(32 * len(recs))
    assert F.deinterleave(recs, out) == len(out) and bytes(out) == recs["data"].tobytes()
