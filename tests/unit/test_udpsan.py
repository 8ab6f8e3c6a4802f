"""The emulated datagram SAN (spec pktway.md §3.8): native header codec and the
switch core, including garbage from anywhere."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemons.wire.errors import DecodeError
from pktwayd.udpsan import SanSwitch, native, split

PORTS = {1: ("127.0.0.1", 7401), 2: ("127.0.0.1", 7402), 7: ("127.0.0.1", 7407)}


def test_native_route_is_port_then_myrinet_type():
    assert native(5) == bytes.fromhex("050300")
    assert split(native(5) + b"pkt") == (native(5), b"pkt")
    with pytest.raises(ValueError):
        native(256)
    with pytest.raises(DecodeError):
        split(b"\x05\x03")
    with pytest.raises(DecodeError):
        split(b"\x05\x08\x00pkt")  # not the 0x0300 type


def test_switch_delivers_with_the_route_back():
    sw = SanSwitch(PORTS)
    assert sw.receive(PORTS[1], native(7) + b"data") == [(PORTS[7], native(1) + b"data")]
    assert sw.counters["port1_rx"] == 1 and sw.counters["port7_tx"] == 1


def test_switch_drops_and_counts():
    sw = SanSwitch(PORTS, mtu=8)
    assert sw.receive(("127.0.0.1", 9999), native(2) + b"x") == []
    assert sw.receive(PORTS[1], native(3) + b"x") == []
    assert sw.receive(PORTS[1], b"\x02\x00\x00x") == []
    assert sw.receive(PORTS[1], native(2) + bytes(9)) == []
    assert sw.receive(PORTS[1], native(2) + bytes(8)) != []
    assert {k: v for k, v in sw.counters.items() if k.startswith("drop")} == {
        "drop_unknown_sender": 1, "drop_no_such_port": 1, "drop_bad_header": 1, "drop_over_mtu": 1}


@given(st.sampled_from(sorted(PORTS) + [3]), st.binary(max_size=64))
def test_garbage_never_crashes_and_is_delivered_only_when_well_formed(port, data):
    sw = SanSwitch(PORTS)
    src = PORTS.get(port, ("127.0.0.1", 1))
    out = sw.receive(src, data)
    ok = port in PORTS and len(data) >= 3 and data[1:3] == b"\x03\x00" and data[0] in PORTS
    assert bool(out) == ok
    if ok:
        assert out == [(PORTS[data[0]], native(port) + data[3:])]
    assert sum(v for k, v in sw.counters.items() if k.startswith("drop")) == (0 if ok else 1)


def test_switch_mtu_counts_optional_fields():
    """The switch measures the packet itself: a 1059-word packet carrying two 33-word
    optional header fields does not cross a 1024-word SAN (issue item 11)."""
    from pktwayd.eep import OptField, Packet

    opts = (OptField(1, bytes(255)), OptField(2, bytes(255)))
    sw = SanSwitch(PORTS, mtu=8 * 1024)
    for words, delivered in ((1059, False), (1025, False), (1024, True)):
        pkt = Packet(dt=0x60, sa=0x40, pt=6, data=bytes(8 * (words - 69)), options=opts).encode()
        assert len(pkt) == 8 * words
        assert bool(sw.receive(PORTS[1], native(2) + pkt)) == delivered
    assert sw.counters["drop_over_mtu"] == 2
