"""Memory READ/WRITE bodies and embedded packets (pktwayd.special): round trips and
hostile bodies (never an exception out of the memory board or the unwrapper)."""

import pytest
from hypothesis import given, strategies as st

from daemons.wire.errors import DecodeError
from pktwayd.constants import PT
from pktwayd.eep import L2RH, Packet
from pktwayd.special import Memory, embed, parse_read, parse_write, read_body, unwrap, write_body


@given(st.integers(0, (1 << 64) - 1), st.binary(max_size=100))
def test_write_round_trip(addr, data):
    assert parse_write(write_body(addr, data)) == (addr, data)


@given(st.integers(0, (1 << 64) - 1), st.integers(0, (1 << 64) - 1))
def test_read_round_trip(addr, count):
    assert parse_read(read_body(addr, count)) == (addr, count)


@given(st.sampled_from([PT.MEMORY_READ, PT.MEMORY_WRITE]), st.integers(0, 0xFFFFFF), st.binary(max_size=64))
def test_memory_board_takes_any_body(pt, sa, data):
    m = Memory(256, 0x40)
    answer = m.handle(Packet(dt=0x40, sa=sa, pt=pt, data=data))
    assert len(m.mem) == 256 and sum(m.counters.values()) == 1
    assert answer is None or (answer.pt == PT.MEMORY_WRITE and answer.dt == sa)


def test_embedded_round_trip_and_malformed():
    inner = Packet(dt=0x60, sa=0x40, pt=PT.USER, data=b"deep", prefix=(L2RH(b"\x01\x03\x00"),))
    assert unwrap(embed(inner, 0x50, 0x40)) == inner
    with pytest.raises(DecodeError):
        unwrap(Packet(dt=0x50, sa=0x40, pt=PT.EMBEDDED, data=bytes(16)))


@given(st.binary(max_size=200))
def test_unwrap_raises_only_decode_errors(data):
    try:
        unwrap(Packet(dt=0x50, sa=0x40, pt=PT.EMBEDDED, data=data))
    except DecodeError:
        pass
