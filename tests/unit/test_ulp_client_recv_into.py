"""UlpClient.recv_into: a frame read into the caller's buffer, decoded as Frame.decode
decodes it (same fields, same errors), the payload left in place."""

from __future__ import annotations

import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemons.ulpclient import UlpClient, UlpError
from daemons.wire.errors import DecodeError
from daemons.wire.ulp import HEADER, Frame, Op


@pytest.fixture
def pair(tmp_path):
    """A UlpClient and the server end of its connection."""
    path = str(tmp_path / "u.sock")
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    lsock.bind(path)
    lsock.listen(1)
    with lsock, UlpClient(path) as c:
        peer, _ = lsock.accept()
        with peer:
            yield c, peer


def test_a_recv_lands_in_the_callers_buffer(pair):
    c, peer = pair
    buf = bytearray(100)
    frame = Frame(Op.RECV, 3, 0x88B5, bytes(range(1, 7)), b"payload")
    peer.send(frame.encode())
    assert c.recv_into(buf, timeout=1.0) == (Op.RECV, 3, 0x88B5, HEADER.size + 7)
    assert bytes(buf[4:10]) == frame.ula and bytes(buf[HEADER.size : HEADER.size + 7]) == b"payload"
    peer.send(Frame(Op.STATUS, 1, 0, bytes(6)).encode())  # the next frame takes the same buffer
    assert c.recv_into(memoryview(buf)[:20], timeout=1.0) == (Op.STATUS, 1, 0, HEADER.size)


def test_a_frame_larger_than_the_buffer_is_an_error_not_a_short_payload(pair):
    c, peer = pair
    peer.send(Frame(Op.RECV, 1, 0x88B5, bytes(6), bytes(100)).encode())
    with pytest.raises(UlpError, match="did not fit the 50-byte buffer"):
        c.recv_into(bytearray(50), timeout=1.0)


def test_the_end_of_the_connection_and_a_timeout(pair):
    c, peer = pair
    with pytest.raises(TimeoutError):
        c.recv_into(bytearray(64), timeout=0.01)
    peer.close()
    with pytest.raises(UlpError, match="closed"):
        c.recv_into(bytearray(64), timeout=1.0)


@settings(max_examples=300, deadline=None)
@given(data=st.one_of(
    st.binary(min_size=1, max_size=40),
    st.builds(lambda op, vc, et, ula, pl: HEADER.pack(op, vc, et, ula) + pl, st.integers(0, 255), st.integers(0, 255),
              st.integers(0, 0xFFFF), st.binary(min_size=6, max_size=6), st.binary(max_size=64)),
))
def test_recv_into_decodes_as_frame_decode_does(data):
    """Any frame, malformed ones too: the same fields as Frame.decode, or the same error."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with a, b:
        c = UlpClient.__new__(UlpClient)  # the library's own socket end, without a listener
        c.sock = b
        a.send(data)
        buf = bytearray(128)
        try:
            want = Frame.decode(data)
        except DecodeError as e:
            with pytest.raises(DecodeError) as got:
                c.recv_into(buf, timeout=1.0)
            assert (got.value.args, str(got.value)) == (e.args, str(e))
            return
        op, vc, ethertype, n = c.recv_into(buf, timeout=1.0)
        assert (op, vc, ethertype, n) == (want.op, want.vc, want.ethertype, len(data))
        assert bytes(buf[4:10]) == want.ula and bytes(buf[HEADER.size : n]) == want.payload
