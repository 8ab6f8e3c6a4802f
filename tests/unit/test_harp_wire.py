from ipaddress import IPv4Address as A, IPv6Address as A6

import pytest
from hypothesis import given, strategies as st

from daemons.wire.errors import DecodeError
from harpd.constants import Op
from harpd.wire import Harp, decode, nak

Y, SRV = bytes.fromhex("020000000002"), bytes.fromhex("00103bffffe0")


def test_spec_worked_example_inharp_request():
    h = Harp(Op.INHARP_REQUEST, A("192.0.2.2"), A("0.0.0.0"), Y, SRV)
    raw = h.encode()
    assert raw == bytes.fromhex("001c0800000804060" "6c0000202000000000200000000020010" "3bffffe0")
    assert len(raw) == 29 and decode(raw) == h


def test_reply_swaps_and_keeps_format():
    req = Harp(Op.HARP_REQUEST, A("192.0.2.2"), A("192.0.2.9"), Y, bytes(6), hrd=1)
    rep = req.reply(A("192.0.2.9"), b"\x02\x09" * 3, Op.HARP_REPLY)
    assert (rep.rpa, rep.tpa, rep.tha, rep.hrd) == (A("192.0.2.9"), A("192.0.2.2"), Y, 1)
    assert len(rep.encode()) == 28 and decode(rep.encode()) == rep


@pytest.mark.parametrize("hrd", [28, 1])
def test_nak_is_request_byte_for_byte_with_op_10(hrd):
    req = Harp(Op.HARP_REQUEST, A("192.0.2.2"), A("192.0.2.77"), Y, bytes(6), hrd=hrd).encode()
    n = nak(req)
    assert len(n) == len(req) and sum(a != b for a, b in zip(n, req)) == 1
    d = decode(n)
    assert d.op is Op.HARP_NAK and d.rpa == A("192.0.2.2") and d.tpa == A("192.0.2.77") and d.rha == Y
    if hrd == 28:  # byte-exact vector
        assert n == bytes.fromhex("001c0800000a040606c0000202c000024d0200000000020000000000" "00")


@pytest.mark.parametrize("raw,field", [
    (bytes.fromhex("0002"), "harp"),
    (bytes.fromhex("0007080000080406") + bytes(21), "ar$hrd"),
    (bytes.fromhex("001c080600080406") + bytes(21), "ar$pro"),
    (bytes.fromhex("001c86dd00080406") + bytes(21), "ar$pln"),  # IPv6 with a 4-byte address
    (bytes.fromhex("001c080000081006") + bytes(45), "ar$pln"),  # IPv4 with a 16-byte address
    (bytes.fromhex("001c86dd0008100606") + bytes(43), "harp"),  # IPv6, a byte short
    (bytes.fromhex("000186dd06040008") + bytes(44), "ar$pln"),
    (bytes.fromhex("000186dd06100008") + bytes(43), "harp"),
    (bytes.fromhex("001c080000080606") + bytes(21), "ar$pln"),
    (bytes.fromhex("001c080000080407") + bytes(21), "ar$rhl"),
    (bytes.fromhex("001c08000003040606") + bytes(20), "ar$op"),
    (bytes.fromhex("001c08000008040606") + bytes(5), "harp"),
])
def test_strict_validation(raw, field):
    with pytest.raises(DecodeError) as ei:
        decode(raw)
    assert ei.value.field == field


@given(st.binary(max_size=64))
def test_garbage_only_decode_error(blob):
    try:
        decode(blob)
    except DecodeError:
        pass


@given(st.sampled_from(list(Op)), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1),
       st.binary(min_size=6, max_size=6), st.binary(min_size=6, max_size=6), st.sampled_from([28, 1, 6]))
def test_roundtrip(op, rpa, tpa, rha, tha, hrd):
    h = Harp(op, A(rpa), A(tpa), rha, tha, hrd)
    assert decode(h.encode()) == h


def test_ipv6_hiparp_layout():
    """IPv6: HIPARP with ar$pro 0x86DD, ar$pln 16: 9 + 16 + 16 + 6 + 6 = 53 bytes."""
    h = Harp(Op.INHARP_REQUEST, A6("2001:db8::2"), A6("::"), Y, SRV)
    raw = h.encode()
    assert raw[:9] == bytes.fromhex("001c86dd0008100606") and len(raw) == 53
    assert raw[9:25] == A6("2001:db8::2").packed and raw[25:41] == bytes(16) and raw[41:47] == Y
    assert decode(raw) == h
    gen = Harp(Op.HARP_REQUEST, A6("fe80::2"), A6("fe80::3"), Y, bytes(6), hrd=1).encode()
    assert gen[:8] == bytes.fromhex("000186dd06100001") and len(gen) == 52
    n = nak(raw.replace(b"\x00\x08", b"\x00\x01", 1))
    assert decode(n).op is Op.HARP_NAK and decode(n).rpa == A6("2001:db8::2")


def test_mixed_families_refused_on_encode():
    with pytest.raises(ValueError):
        Harp(Op.HARP_REQUEST, A6("2001:db8::2"), A("192.0.2.1"), Y, bytes(6)).encode()


@given(st.sampled_from(list(Op)), st.integers(0, 2**128 - 1), st.integers(0, 2**128 - 1),
       st.binary(min_size=6, max_size=6), st.binary(min_size=6, max_size=6), st.sampled_from([28, 1, 6]))
def test_roundtrip_ipv6(op, rpa, tpa, rha, tha, hrd):
    h = Harp(op, A6(rpa), A6(tpa), rha, tha, hrd)
    assert decode(h.encode()) == h


_V6 = [Harp(Op.HARP_REQUEST, A6("2001:db8::2"), A6("2001:db8::3"), Y, bytes(6), hrd).encode() for hrd in (28, 1)]


@given(st.sampled_from(_V6), st.integers(0, 60), st.binary(min_size=1, max_size=4), st.integers(0, 60))
def test_malformed_ipv6_only_decode_error(raw, at, patch, cut):
    """Corrupted or truncated IPv6 messages: a DecodeError or a well-formed message, never another error."""
    blob = (raw[:at] + patch + raw[at + len(patch):])[:cut]
    try:
        h = decode(blob)
    except DecodeError:
        return
    assert h.rpa.version == h.tpa.version and decode(h.encode()) == h
