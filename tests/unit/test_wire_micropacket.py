import numpy as np
import pytest
from hypothesis import given, strategies as st

from daemons.constants import CRC_CHECK, MpType
from daemons.wire import crc
from daemons.wire.errors import DecodeError
from daemons.wire.micropacket import (
    MP_DTYPE, Micropacket, from_records, lcrc_exact, lcrc_fold_ok, pack_ctrl, restamp, to_records,
)

# spec §8 worked example: InHARP_REQUEST from 02:00:00:00:00:02 to the HARP server
HDR = bytes.fromhex("00103bffffe0" "020000000002" "00000025" "aaaa03000000" "0806" "001c080000080406")
DATA = bytes.fromhex("06" "c0000202" "00000000" "020000000002" "00103bffffe0") + bytes(11)


def test_crc_check_value():
    assert crc.crc16(b"123456789") == CRC_CHECK == 0x29B1


def test_worked_example_control_words():
    e1 = crc.crc16(HDR)
    e2 = crc.crc16(DATA, e1)
    assert (e1, e2) == (0xCF73, 0xDAB3)
    h = Micropacket(HDR, vc=1, type=MpType.HEADER, rseq=0xFF, tseq=0, ecrc=e1)
    d = Micropacket(DATA, vc=1, type=MpType.DATA, tail=1, rseq=0xFF, tseq=1, ecrc=e2)
    assert h.ctrl() == 0x4800FF00CF73EC08
    assert d.ctrl() == 0x4600FF01DAB33562
    assert Micropacket.decode(h.encode()) == h


mp_strategy = st.builds(
    Micropacket,
    data=st.binary(min_size=32, max_size=32),
    vc=st.integers(0, 3), type=st.sampled_from(list(MpType)), tail=st.integers(0, 1), error=st.integers(0, 1),
    vcr=st.integers(0, 3), cr=st.integers(0, 63), rseq=st.integers(0, 255), tseq=st.integers(0, 255),
    ecrc=st.integers(0, 0xFFFF),
)


@given(mp_strategy)
def test_roundtrip(mp):
    assert Micropacket.decode(mp.encode()) == mp


@given(st.binary(max_size=80))
def test_garbage_raises_only_decode_error(blob):
    try:
        Micropacket.decode(blob)
    except DecodeError as exc:
        assert exc.field and exc.offset >= 0


@given(mp_strategy, st.integers(0, 40 * 8 - 1))
def test_any_single_bit_flip_is_caught(mp, bit):
    raw = bytearray(mp.encode())
    raw[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(DecodeError):
        Micropacket.decode(bytes(raw))


def test_reserved_type_rejected_with_field_and_offset():
    word = pack_ctrl(type=0x9)
    data = bytes(32)
    raw = data + (word | crc.crc16(data + word.to_bytes(8, "big")[:6])).to_bytes(8, "big")
    with pytest.raises(DecodeError) as ei:
        Micropacket.decode(raw)
    assert ei.value.field == "TYPE" and ei.value.offset == 32


@given(st.lists(mp_strategy, min_size=1, max_size=40), st.data())
def test_bulk_restamp_and_fold_agree_with_scalar(mps, data):
    recs = to_records(mps)
    assert lcrc_fold_ok(recs) and lcrc_exact(recs).all()
    new = recs["ctrl"].astype(np.uint64) ^ np.uint64(data.draw(st.integers(1, 0xFFFFFF)) << 32)
    restamp(recs, new)
    assert lcrc_exact(recs).all()
    for mp in from_records(recs):  # decodes: LCRC right per micropacket
        assert mp.type in MpType
    i = data.draw(st.integers(0, len(recs) - 1))
    raw = recs.view(np.uint8).reshape(len(recs), 40)
    raw[i, data.draw(st.integers(0, 37))] ^= 1 << data.draw(st.integers(0, 7))
    assert not lcrc_fold_ok(recs)
    assert list(np.flatnonzero(~lcrc_exact(recs))) == [i]


@given(st.binary(min_size=32, max_size=32 * 50).filter(lambda b: len(b) % 32 == 0))
def test_running_crc_matches_scalar(blob):
    blocks = np.frombuffer(blob, np.uint8).reshape(-1, 32)
    running = crc.running_crc(crc.block_crc0(blocks))
    c, ref = 0xFFFF, []
    for k in range(len(blocks)):
        c = crc.crc16(blob[32 * k: 32 * k + 32], c)
        ref.append(c)
    assert running.tolist() == ref
    assert crc.ecrc_chain_ok(blocks, running)
    bad = blocks.copy()
    bad[-1, 0] ^= 0x40
    assert not crc.ecrc_chain_ok(bad, running)


def test_dtype_is_wire_layout():
    assert MP_DTYPE.itemsize == 40
