import pytest
from hypothesis import given, strategies as st

from daemons.constants import LLC_SNAP_PREFIX, MpType, VC_MAX_DATA_MPS
from daemons.link.reassembly import Delivered, Reassembler
from daemons.wire.errors import DecodeError
from daemons.wire.message import Message, MessageHeader, decode_stream, encode_stream, max_payload, mps_for
from daemons.wire.micropacket import from_records
from tests.unit.test_wire_micropacket import DATA, HDR

A, B = bytes.fromhex("00103bffffe0"), bytes.fromhex("020000000002")


def test_worked_example_stream_and_records():
    harp = bytes.fromhex("001c080000080406" "06c00002020000000002000000000200103bffffe0")
    msg = Message(1, A, B, 0x0806, harp)
    assert msg.stream() == HDR + DATA
    mps = from_records(msg.records())
    assert [m.type for m in mps] == [MpType.HEADER, MpType.DATA]
    assert [m.tail for m in mps] == [0, 1]
    assert [m.ecrc for m in mps] == [0xCF73, 0xDAB3]
    assert decode_stream(1, msg.stream()) == msg


def test_layout_facts():
    s = encode_stream(1, A, B, 0x0800, bytes(range(20)))
    assert s[12:16] == (8 + 20).to_bytes(4, "big")  # M_len = payload + LLC/SNAP
    assert s[16:22] == LLC_SNAP_PREFIX and s[22:24] == b"\x08\x00"
    assert s[24:32] == bytes(range(8))  # first 8 payload bytes in the HEADER
    assert len(s) % 32 == 0 and s[16 + 28:] == bytes(len(s) - 44)  # zero fill
    assert mps_for(8) == 1 and mps_for(16) == 1 and mps_for(17) == 2
    assert mps_for(65280 + 8) == 2041  # full-MTU IP datagram (spec §7)


@pytest.mark.parametrize("vc", range(4))
def test_vc_limits(vc):
    limit = max_payload(vc)
    if vc < 3:
        assert mps_for(limit + 8) - 1 == VC_MAX_DATA_MPS[vc]
        with pytest.raises(ValueError):
            encode_stream(vc, A, B, 0x0800, bytes(limit + 1))
    encode_stream(vc, A, B, 0x0800, bytes(min(limit, 300_000)))


@given(st.integers(0, 3), st.binary(max_size=5000), st.integers(0, 0xFFFF))
def test_records_reassemble_roundtrip(vc, payload, ethertype):
    payload = payload[: max_payload(vc)]
    msg = Message(vc, A, B, ethertype, payload)
    r = Reassembler()
    out = r.feed(vc, msg.records())
    assert out == [Delivered(msg, mps_for(len(payload) + 8))]


@given(st.binary(max_size=200))
def test_garbage_streams_raise_only_decode_error(blob):
    try:
        MessageHeader.decode(blob)
        decode_stream(1, blob)
    except DecodeError:
        pass


def test_header_errors_name_field():
    s = bytearray(encode_stream(1, A, B, 0x0800, b"x" * 40))
    s[16] = 0xAB
    with pytest.raises(DecodeError) as ei:
        MessageHeader.decode(bytes(s))
    assert ei.value.field == "LLC/SNAP" and ei.value.offset == 16
    s = bytearray(encode_stream(1, A, B, 0x0800, b"x" * 40))
    s[12:16] = (9999).to_bytes(4, "big")
    with pytest.raises(DecodeError) as ei:
        decode_stream(1, bytes(s))
    assert ei.value.field == "M_len"
