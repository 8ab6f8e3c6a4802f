"""RRP records: the worked RTBL of the spec (§2.6) byte for byte, every record
type, impossible lengths."""

import pytest
from hypothesis import given, strategies as st

from daemons.wire.errors import DecodeError
from pktwayd.constants import PT, RrpTE
from pktwayd.eep import L2RH, Packet, decode
from pktwayd.rrp import Addr, Capa, Ladr, Mtur, Name, Rcvf, Rthd, Srqr, decode_records, encode_records

RTBL = bytes.fromhex(
    "0000005600090002" "0000000800000055"
    "0800000800000100" "5f00000000000000"
    "0502000200000000" "0601000100000800"
    "0701000100000055" "0101000100000040"
    "0502000200000001" "0083010300000000"
    "0000000000000000")


def test_worked_rtbl_byte_for_byte():
    rt = Rthd(0x000100, 0x5F000000, (
        Srqr(0, (), Mtur(2048)), Rcvf((0x55,)), Addr(0x40), Srqr(1, (L2RH(bytes([1, 3, 0])),))))
    pkt = Packet(dt=0x56, sa=0x55, pt=PT.RRP, te=RrpTE.RTBL, data=encode_records([rt]))
    assert pkt.encode() == RTBL
    assert decode_records(decode(RTBL).data) == [rt]


def test_records_roundtrip():
    recs = [Addr(0x5F), Name(b"Super"), Capa(7, bytes([4, 8])), Capa(2, bytes.fromhex("000100000200")),
            Ladr((0xE00001, 0xE00002, 0xE00003)), Rcvf((0x56, 0x55, 0x40)), Mtur(0),
            Srqr(0xFFFF, (L2RH(bytes([3, 0, 3, 0])),), Mtur(1024))]
    raw = encode_records(recs)
    assert decode_records(raw) == recs
    assert raw[:8].hex() == "010100010000005f"  # ADDR as in the GVL2 example
    assert encode_records([Name(b"Super")]).hex() == "0207000253757065" + "7200000000000000"  # PAD: 7 pad after


@pytest.mark.parametrize("raw,field", [
    ("0101000000000040", "RL"),
    ("0101000200000040", "RL"),
    ("0109000100000040", "PL"),
    ("6301000100000040", "RTyp"),
    ("0102000100000040", "ADDR"),
    ("0401000200000001" "0000000000000000", "LADR"),
    ("0502000200000000" "0101000100000040", "SRQR"),
])
def test_impossible_records(raw, field):
    with pytest.raises(DecodeError) as ei:
        decode_records(bytes.fromhex(raw))
    assert ei.value.field == field


@given(st.binary(max_size=96).filter(lambda b: len(b) % 8 == 0))
def test_garbage_only_decode_error(blob):
    try:
        decode_records(blob)
    except DecodeError:
        pass


def _nested_rthd(depth: int) -> bytes:
    raw = b""
    for _ in range(depth):  # each level: a 16-byte RTHD fixed part around the level below
        head = bytes.fromhex("0800") + (2 + len(raw) // 8).to_bytes(2, "big") + bytes.fromhex("00000100")
        raw = head + bytes(8) + raw
    return raw


def _nested_srqr(depth: int) -> bytes:
    raw = b""
    for _ in range(depth):
        raw = bytes.fromhex("0502") + (1 + len(raw) // 8).to_bytes(2, "big") + bytes(4) + raw
    return raw


@pytest.mark.parametrize("make,field", [(_nested_rthd, "RTHD"), (_nested_srqr, "SRQR")])
def test_deeply_nested_records_are_a_decode_error_not_a_recursion_error(make, field):
    """Hostile input: an RTHD inside an RTHD (or an SRQR inside an SRQR) a thousand levels
    deep fits a 16 KB message and used to raise RecursionError out of the decoder."""
    with pytest.raises(DecodeError) as ei:
        decode_records(make(1000))
    assert ei.value.field == field
    with pytest.raises(DecodeError):
        decode_records(make(2))  # an RT holds no RTHD, an SRQR nests only an MTUR


def test_records_longer_than_rl_can_say_are_refused_by_the_encoder():
    """RL is 16 bits: an RT that grew past 65535 words on its way (a CSR hop and an RCVF
    address added) cannot be re-encoded: ValueError, not struct.error."""
    big = Rthd(0x100, 1, (Srqr(0, ()), Rcvf((0x55,))) + tuple(Name(bytes(8 * 4094)) for _ in range(17)))
    with pytest.raises(ValueError) as ei:
        encode_records([big])
    assert "65535" in str(ei.value)
    with pytest.raises(ValueError):
        encode_records([Name(bytes(8 * 65536))])
