"""ServerNet packet and envelope codec (spec servernet-ipoib.md §1.3, §1.8): the four
packet types at their exact sizes, the header bit layout, a CRC computed independently
with zlib.crc32, and malformed input of every kind."""

import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemons.wire.errors import DecodeError
from servernet.codec import Packet, crc_ok, decode, did_of, encode_datagram, envelope, open_envelope
from servernet.constants import MAX_DATAGRAM, MAX_DATAGRAM_II, TType

A, B = 0xABCDE, 0x12345


def test_four_packet_types_have_their_exact_sizes():
    assert len(Packet(B, A, TType.READ, False, 3, address=0x1000, length=64).encode()) == 16
    assert len(Packet(A, B, TType.READ, True, 3, ack=True, data=bytes(64)).encode()) == 76
    assert len(Packet(A, B, TType.READ, True, 3, ack=True, data=bytes(5)).encode()) == 17
    assert len(Packet(B, A, TType.WRITE, False, 3, address=0x1000, data=bytes(64)).encode()) == 80
    assert len(Packet(B, A, TType.WRITE, False, 3, address=0x1000, data=b"").encode()) == 16
    assert len(Packet(A, B, TType.WRITE, True, 3, ack=True).encode()) == 12
    assert MAX_DATAGRAM == 84 and MAX_DATAGRAM_II == 532


def test_vector_header_layout_and_independent_crc():
    p = Packet(did=0xABCDE, sid=0x12345, ttype=TType.WRITE, rsp=False, tid=0xA, path=1, address=0xDEADBEEF,
               data=b"ServerNet")
    raw = p.encode()
    # DID in the upper 20 bits of bytes 0..2, then SID, LEN=9, TTYPE=1, RSP=0, TID=0xA, PATH=1, ACK=0
    word = (0xABCDE << 44) | (0x12345 << 24) | (9 << 16) | (1 << 12) | (0xA << 7) | (1 << 6)
    body = word.to_bytes(8, "big") + bytes.fromhex("DEADBEEF") + b"ServerNet"
    assert raw[:3] == bytes.fromhex("abcde1")
    assert raw == body + zlib.crc32(body).to_bytes(4, "big")
    assert raw.hex() == "abcde12345091540deadbeef5365727665724e6574" + f"{zlib.crc32(body):08x}"
    assert did_of(raw) == 0xABCDE and crc_ok(raw)
    assert decode(raw) == p


def test_response_vector():
    raw = Packet(0x00041, 0x00042, TType.WRITE, True, 15, path=0, ack=True).encode()
    word = (0x41 << 44) | (0x42 << 24) | (1 << 12) | (1 << 11) | (15 << 7) | (1 << 5)
    assert raw[:8] == word.to_bytes(8, "big")
    assert raw[8:] == struct.pack(">I", zlib.crc32(raw[:8]))


def test_reserved_bits_ignored_on_receive():
    raw = bytearray(Packet(A, B, TType.WRITE, True, 1, ack=True).encode()[:8])
    raw[7] |= 0x1F
    raw += zlib.crc32(raw).to_bytes(4, "big")
    assert decode(bytes(raw)).ack


def test_serverNet_II_mode_counts_8_byte_units():
    p = Packet(B, A, TType.WRITE, False, 0, address=0, data=bytes(512), ii=True)
    raw = p.encode()
    assert len(raw) == 528 and raw[5] == 64
    assert decode(raw, ii=True) == p
    with pytest.raises(DecodeError) as e:
        decode(raw)  # LEN 64 read as bytes: the size disagrees
    assert e.value.field == "len"
    with pytest.raises(ValueError):
        Packet(B, A, TType.WRITE, False, 0, address=0, data=bytes(65)).encode()
    with pytest.raises(ValueError):
        Packet(B, A, TType.WRITE, False, 0, address=0, data=bytes(9), ii=True).encode()


def _reseal(body: bytes) -> bytes:
    return body + zlib.crc32(body).to_bytes(4, "big")


@pytest.mark.parametrize("raw,field", [
    (b"", "short"),
    (bytes(11), "short"),
    (_reseal(((A << 44) | (3 << 12)).to_bytes(8, "big")), "ttype"),  # reserved type 3
    (_reseal(((A << 44) | (0xE << 12) | (1 << 11)).to_bytes(8, "big")), "ttype"),  # DIAG response
    (_reseal(((A << 44) | (1 << 5)).to_bytes(8, "big") + bytes(4)), "ack"),  # ACK in a request
    (_reseal(((A << 44) | (65 << 16) | (1 << 12)).to_bytes(8, "big") + bytes(4 + 65)), "len"),  # over 64
    (_reseal(((A << 44) | (4 << 16) | (1 << 12)).to_bytes(8, "big") + bytes(4 + 3)), "len"),  # short data
    (_reseal(((A << 44) | (1 << 16) | (2 << 12)).to_bytes(8, "big") + bytes(4)), "len"),  # barrier LEN 1
    (_reseal(((A << 44) | (1 << 16) | (1 << 12) | (1 << 11)).to_bytes(8, "big")), "len"),  # write rsp with LEN
    (Packet(A, B, TType.READ, False, 0, address=0, length=8).encode()[:-1] + b"\x00", "crc"),
])
def test_malformed_packets_raise_decode_errors(raw, field):
    with pytest.raises(DecodeError) as e:
        decode(raw)
    assert e.value.field == field


def test_envelope_round_trip_and_malformed():
    pkt = Packet(A, B, TType.READ, False, 0, address=4, length=4).encode()
    env = open_envelope(envelope(pkt, 1, tpb=True))
    assert (env.fabric, env.tpb, env.ii, env.packet) == (1, True, False, pkt)
    assert envelope(pkt, 0)[:4] == bytes.fromhex("534e0100")
    for bad in (b"SN\x01", b"XX\x01\x00" + pkt, b"SN\x02\x00" + pkt, b"SN\x01\x08" + pkt, b"SN\x01\x00" + bytes(81)):
        with pytest.raises(DecodeError):
            open_envelope(bad)
    assert open_envelope(b"SN\x01\x04" + bytes(528)).ii


ids = st.integers(0, 0xFFFFF)


@st.composite
def packets(draw):
    ii = draw(st.booleans())
    ttype = draw(st.sampled_from(list(TType)))
    rsp = draw(st.booleans()) if ttype != TType.DIAG else False
    unit = 8 if ii else 1
    n = draw(st.integers(0, (512 if ii else 64) // unit)) * unit
    data, length, address = b"", 0, None
    if not rsp:
        address = draw(st.integers(0, 0xFFFFFFFF))
    if ttype == TType.READ and not rsp:
        length = n
    elif (ttype == TType.READ and rsp) or (ttype in (TType.WRITE, TType.DIAG) and not rsp):
        data = draw(st.binary(min_size=n, max_size=n))
    return Packet(draw(ids), draw(ids), ttype, rsp, draw(st.integers(0, 15)), draw(st.integers(0, 1)),
                  rsp and draw(st.booleans()), address, data, length, ii)


@given(packets())
def test_round_trip(p):
    raw = p.encode()
    assert len(raw) == p.size and crc_ok(raw) and did_of(raw) == p.did
    assert decode(raw, p.ii) == p
    assert open_envelope(envelope(raw, p.path, ii=p.ii)).packet == raw


@given(packets())
def test_the_nodes_unchecked_encoder_builds_the_same_datagram(p):
    """encode_datagram (the BTE's and AVT's per-packet path) == envelope(Packet.encode())."""
    assert encode_datagram(p.did, p.sid, p.ttype, p.rsp, p.tid, p.path, p.ack, p.address, p.data, p.length,
                           p.ii) == envelope(p.encode(), p.path, ii=p.ii)


@given(packets(), st.data())
def test_any_flipped_bit_is_caught_by_the_crc(p, data):
    raw = bytearray(p.encode())
    bit = data.draw(st.integers(0, len(raw) * 8 - 1))
    raw[bit // 8] ^= 1 << (bit % 8)
    assert not crc_ok(bytes(raw))
    with pytest.raises(DecodeError):
        decode(bytes(raw), p.ii)


@given(st.binary(max_size=600), st.booleans())
def test_garbage_never_escapes_as_anything_but_decode_error(raw, ii):
    for fn in (lambda: decode(raw, ii), lambda: open_envelope(raw)):
        try:
            fn()
        except DecodeError:
            pass


@given(st.binary(min_size=8, max_size=600), st.booleans())
def test_garbage_with_a_valid_crc_decodes_or_raises_decode_error(body, ii):
    try:
        p = decode(_reseal(body), ii)
    except DecodeError:
        return
    assert p.encode() == _reseal(body) or body[7] & 0x1F  # only reserved bits are lost
