"""EEP codec: the seed documents' byte examples as vectors, the prefix coding,
the EI rule, the MessageWay v5 dialect, and malformed input."""

import struct

import pytest
from hypothesis import given, settings, strategies as st

from daemons.wire.errors import DecodeError
from pktwayd.constants import ADDR_HEY_YOU, PT, RrpTE
from pktwayd.eep import (L2RH, OptField, Packet, Symbol, decode, ei_update, ei_update_mw5, first_word_kind,
                         mw_to_pw_addr, pw_to_mw_addr)


def test_gvl2_worked_bytes():  # spec §1.13
    p = Packet(dt=0x59, sa=0x40, pt=PT.RRP, te=RrpTE.GVL2, data=bytes.fromhex("010100010000005f"))
    assert p.encode() == bytes.fromhex("0000005900010002" "0000000100000040" "010100010000005f" "0000000000000000")
    assert decode(p.encode()) == p


def test_rtbl_header_words():  # spec §2.6, first two EEP words
    p = Packet(dt=0x56, sa=0x55, pt=PT.RRP, te=RrpTE.RTBL, data=bytes(64))
    assert p.encode()[:16] == bytes.fromhex("0000005600090002" "0000000800000055")


@pytest.mark.parametrize("route,words,raw", [
    (bytes([3, 0, 3, 0]), 1, "0084030003000000"),  # Appendix-C step 8 route, PacketWay rendering
    (bytes(5), 1, None),  # L=5 -> 1 word, 1 pad
    (bytes(13), 2, None),  # L=13 -> 2 words, 1 pad
])
def test_l2rh_sizes(route, words, raw):
    enc = L2RH(route).encode()
    assert len(enc) == 8 * words
    if raw:
        assert enc.hex() == raw
    assert first_word_kind(enc) == "l2rh"


def test_symbol_and_optional_fields():
    s = Symbol(1, bytes(range(9)))
    assert len(s.encode()) == 16 and s.encode()[:5] == bytes.fromhex("00f0000109")  # L=9: 2 words, 2 pad
    assert OptField(5, bytes.fromhex("d1d2d3d4"), mandatory=True).encode(last=True).hex() == "c504d1d2d3d40000"
    p = Packet(dt=0x60, sa=0x40, pt=PT.USER, data=b"hello world", prefix=(L2RH(b"\x01\x02"), Symbol(1, b"x")),
               options=(OptField(1, b"ab"), OptField(2, b"", mandatory=True)), trailer=bytes(8), tail=5)
    raw = p.encode()
    assert decode(raw) == p
    h = raw[16:32]  # after one L2RH word and one symbol word
    assert h[12] & 0x80 and (h[8] >> 1) & 7 == 5  # h set; PL = 5 pad bytes
    assert first_word_kind(raw[:8]) == "l2rh" and first_word_kind(raw[8:16]) == "symbol"


def test_logical_destination_is_a_header_and_reserved_prefix_rejected():
    assert first_word_kind(Packet(dt=0xE00005, sa=1, pt=6).encode()[:8]) == "header"
    bad = bytearray(Packet(dt=0x60, sa=1, pt=6).encode())
    bad[1] = 0xC5
    with pytest.raises(DecodeError) as ei:
        decode(bytes(bad))
    assert ei.value.field == "DT" and ei.value.offset == 1


def test_ei_rule():
    assert ei_update(0, False) == 0
    assert ei_update(0, True) == 1
    assert ei_update(1, False) == 2 and ei_update(1, True) == 3
    top = 1 << 63
    assert ei_update(top, False) == top and ei_update(top, True) == top | 1  # no shift once the MSbit is set
    assert ei_update_mw5(top, False) == 0  # MessageWay shifted always


def test_messageway_v5_dialect():
    p = Packet(dt=0x0123, sa=0x0040, pt=0x0300, te=7, data=b"abc", prefix=(L2RH(bytes([3, 0, 3, 0])),), free=0x1234)
    raw = p.encode("mw5")
    assert raw[:2] == b"\x00\x04"  # MW L2RH: 00 L
    assert raw[8:16].hex() == "0123000503000007"  # DA, priority, Version 5, PT, TE
    assert decode(raw, "mw5") == p
    assert mw_to_pw_addr(0xFFFE) == ADDR_HEY_YOU and pw_to_mw_addr(ADDR_HEY_YOU) == 0xFFFE
    assert mw_to_pw_addr(0x8005) == 0xE00005 and pw_to_mw_addr(0xE00005) == 0x8005
    with pytest.raises(ValueError):
        Packet(dt=0x123456, sa=0x40, pt=6).encode("mw5")  # does not fit 16 bits
    with pytest.raises(DecodeError):
        decode(Packet(dt=0x60, sa=0x40, pt=6).encode(), "mw5")  # version 0 is not MessageWay


@pytest.mark.parametrize("mutate,field", [
    (lambda b: b[:-1], "packet"),
    (lambda b: b[:16], "packet"),
    (lambda b: b"\x40" + b[1:], "V"),
    (lambda b: b[:8] + bytes([0x00, 0x00, 0x00, 0x40]) + b[12:], "DL"),  # 64 data words that are not there
    (lambda b: b[:8] + bytes([0x0E]) + b[9:], "PL"),  # pad 7 with no data
])
def test_malformed(mutate, field):
    raw = Packet(dt=0x60, sa=0x40, pt=6).encode()
    with pytest.raises(DecodeError) as ei:
        decode(mutate(raw))
    assert ei.value.field == field


@given(st.binary(max_size=120), st.sampled_from(["pw0", "mw5"]))
def test_garbage_only_decode_error(blob, dialect):
    try:
        decode(blob, dialect)
    except DecodeError:
        pass


@given(st.integers(1, 0x7FFFFD), st.integers(0, 0x7FFFFF), st.integers(0, 0xFFFF), st.integers(0, 0xFFFF),
       st.binary(max_size=100), st.lists(st.binary(min_size=1, max_size=63), max_size=3), st.integers(0, 2**64 - 1))
def test_roundtrip(dt, sa, pt, te, data, routes, tail):
    p = Packet(dt=dt, sa=sa, pt=pt, te=te, data=data, prefix=tuple(L2RH(r) for r in routes), tail=tail)
    assert decode(p.encode()) == p


def test_optional_field_words_follow_the_spec_formula():  # spec §1.8: floor((L+9)/8)
    assert [OptField(1, bytes(n)).words for n in (0, 6, 7, 14, 15, 255)] == [1, 1, 2, 2, 3, 33]
    assert [len(OptField(1, bytes(n)).encode(True)) // 8 for n in (0, 6, 7, 14, 15, 255)] == [1, 1, 2, 2, 3, 33]


@given(st.lists(st.binary(min_size=1, max_size=63), max_size=2), st.lists(st.binary(max_size=40), max_size=2),
       st.lists(st.tuples(st.integers(0, 63), st.binary(max_size=255), st.booleans()), max_size=3),
       st.binary(max_size=100), st.integers(0, 3))
def test_packet_words_is_its_encoded_length(routes, symbols, opts, data, trailer_words):
    p = Packet(dt=0x60, sa=0x40, pt=6, data=data,
               prefix=tuple(L2RH(r) for r in routes) + tuple(Symbol(1, s) for s in symbols),
               options=tuple(OptField(t, d, m) for t, d, m in opts), trailer=bytes(8 * trailer_words))
    assert p.words * 8 == len(p.encode())


# --- the L3 fast paths (decode's common case, encode without prefix or OH) equal the general code ----
@settings(max_examples=400, deadline=None)
@given(st.integers(0, (1 << 64) - 1), st.integers(0, (1 << 64) - 1), st.integers(0, 10), st.binary(max_size=64),
       st.integers(0, 3))
def test_fast_decode_equals_the_general_decoder(w0, w1, dl, rest, pad):
    from pktwayd.eep import _decode

    w1 = w1 & ~(0x1FFFFFF << 32) | dl << 32  # data lengths that often fit
    head = struct.pack(">QQ", w0 & ~(3 << 62) if w0 & 1 else w0, w1)
    data = head + rest + bytes(-(len(head) + len(rest)) % 8) + bytes(8 * pad)
    try:
        general = _decode(data, "pw0", len(data))
    except DecodeError as exc:
        general = exc.field
    try:
        fast = decode(data)
    except DecodeError as exc:
        fast = exc.field
    assert fast == general


@settings(max_examples=300, deadline=None)
@given(st.integers(0, (1 << 24) - 1), st.integers(0, (1 << 24) - 1), st.integers(0, 0xFFFF), st.integers(0, 0xFFFF),
       st.binary(max_size=40), st.sampled_from([b"", bytes(8)]), st.integers(0, (1 << 64) - 1))
def test_l3_encode_round_trips(dt, sa, pt, te, data, trailer, tail):
    pkt = Packet(dt=dt, sa=sa, pt=pt, te=te, data=data, trailer=trailer, tail=tail)
    if dt >> 20 in (0x8, 0x9, 0xA, 0xB, 0xC, 0xD, 0xF):  # not a header's DT: decodes as a prefix record
        return
    assert decode(pkt.encode()) == pkt


def test_header_fields_out_of_range_still_refused():
    for bad in (dict(dt=1 << 24), dict(sa=-1), dict(pt=1 << 16), dict(te=-5)):
        with pytest.raises(ValueError):
            Packet(**{"dt": 1, "sa": 2, "pt": 3} | bad).encode()
