import pytest
from hypothesis import given, strategies as st

from daemons.constants import AdminCmd, MAX_DATAGRAM_MPS
from daemons.wire.admin import Admin
from daemons.wire.errors import DecodeError
from daemons.wire.shim import Shim, decode_datagram
from daemons.wire.ulp import Frame, Op


@pytest.mark.parametrize("cmd", list(AdminCmd))
def test_admin_every_command_roundtrips(cmd):
    adm = Admin(cmd, xid=0xDEADBEEF, hop_count=0, init_hops=2, route_idx=1, route=(3, 4, 255, 255, 255, 255, 255),
                args=bytes(range(16)))
    raw = adm.encode()
    assert len(raw) == 32 and raw[0] == cmd
    assert Admin.decode(raw) == adm


def test_admin_response_and_invalid():
    req = Admin(AdminCmd.WHAT_ARE_YOU, xid=7, hop_count=0, init_hops=1)
    resp = req.response(AdminCmd.I_AM, b"\x02\x08")
    assert resp.xid == 7 and resp.hop_count == 1 and resp.is_response
    bad = Admin(0x42, xid=9).invalid()
    assert bad.command == AdminCmd.INVALID_ADMIN and bad.args[0] == 0x42


@given(st.binary(max_size=40))
def test_admin_garbage(blob):
    try:
        Admin.decode(blob)
    except DecodeError as exc:
        assert exc.field


def test_shim_roundtrip_and_errors():
    s = Shim(1, 5, 0x11, 0x22, 1 << 40, 77)
    raw = s.encode() + bytes(40 * 3)
    assert decode_datagram(raw) == (s, 3)
    for mutate, field in [(lambda b: b[:20], "shim"), (lambda b: b"XX" + b[2:], "magic"),
                          (lambda b: b[:2] + b"\x09" + b[3:], "version"), (lambda b: b[:-1], "micropackets"),
                          (lambda b: b[:32], "micropackets"),
                          (lambda b: b[:32] + bytes(40 * (MAX_DATAGRAM_MPS + 1)), "micropackets")]:
        with pytest.raises(DecodeError) as ei:
            decode_datagram(mutate(raw))
        assert ei.value.field == field


@given(st.binary(max_size=200))
def test_shim_garbage(blob):
    try:
        decode_datagram(blob)
    except DecodeError:
        pass


@given(st.sampled_from(list(Op)), st.integers(0, 3), st.integers(0, 0xFFFF), st.binary(min_size=6, max_size=6),
       st.binary(max_size=100))
def test_ulp_frames(op, vc, et, ula, payload):
    f = Frame(op, vc, et, ula, payload)
    assert Frame.decode(f.encode()) == f


@given(st.binary(max_size=30))
def test_ulp_garbage(blob):
    try:
        Frame.decode(blob)
    except DecodeError:
        pass
