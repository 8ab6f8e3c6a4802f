"""The ServerNet router core: forwarding by DID (first 3 bytes only), longest prefix,
TPB tagging of a bad CRC, one fabric only, deadlock masks, every drop counted."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servernet.codec import Packet, envelope, open_envelope
from servernet.constants import TType
from servernet.router import RouterCore, parse_route

P = {0: ("10.0.0.1", 7510), 1: ("10.0.0.2", 7520), 2: ("10.0.0.3", 7500)}
N1, N2 = 0x04001, 0x08001


def core(**kw):
    return RouterCore(0, P, [parse_route("0x04001=0"), parse_route("0x08001=1"), parse_route("0x40000/6=2")], **kw)


def write(did, fabric=0):
    return envelope(Packet(did, N1, TType.WRITE, False, 1, path=fabric, address=0, data=b"x" * 8).encode(), fabric)


def test_forwards_by_did_and_longest_prefix():
    r = core()
    assert r.receive(P[0], write(N2)) == (P[1], write(N2))
    assert r.receive(P[1], write(0x40123)) == (P[2], write(0x40123))  # by the node prefix
    assert r.counters["port0_rx"] == 1 and r.counters["port1_tx"] == 1 and r.counters["port2_tx"] == 1


def test_port_is_chosen_from_the_first_three_bytes_only():
    r = core()
    d = bytearray(write(N2))
    d[4 + 3:] = bytes(len(d) - 7)  # everything after the DID's bytes is garbage ...
    dst, out = r.receive(P[0], bytes(d))
    assert dst == P[1] and open_envelope(out).tpb  # ... still routed, tagged bad


def test_bad_crc_is_forwarded_tagged_not_dropped():
    r = core()
    d = bytearray(write(N2))
    d[-1] ^= 1
    dst, out = r.receive(P[0], bytes(d))
    assert dst == P[1] and out[3] & 0x02 and out[4:] == bytes(d[4:])
    assert r.counters["tagged_bad_crc"] == 1
    r.counters.clear()
    assert r.receive(P[0], out) == (P[1], out)  # already tagged: forwarded as is, not counted again
    assert r.counters["tagged_bad_crc"] == 0


def test_drops_are_counted_by_reason():
    r = core(enables={0: frozenset({0, 2})})
    assert r.receive(("9.9.9.9", 1), write(N2)) is None
    assert r.receive(P[0], write(N2, fabric=1)) is None  # a Y packet on X
    assert r.receive(P[0], write(0x3FFFF)) is None
    assert r.receive(P[0], write(N2)) is None  # port 0 may not reach port 1
    assert r.receive(P[1], b"SN\x01\x00" + bytes(5)) is None
    assert r.receive(P[1], b"XX\x01\x00" + bytes(20)) is None
    assert r.receive(P[1], b"SN\x01\x00" + bytes(81)) is None
    assert {k: v for k, v in r.counters.items() if k.startswith("drop")} == {
        "drop_unknown_sender": 1, "drop_wrong_fabric": 1, "drop_no_route": 1, "drop_port_disabled": 1,
        "drop_runt": 1, "drop_bad_envelope": 1, "drop_oversize": 1}


def test_route_syntax():
    assert parse_route("0x40000/6=3").bits == 6
    for bad in ("1=", "x=1", "0x100000=1", "0x40001/6=1", "5/21=1", "5"):
        with pytest.raises(ValueError):
            parse_route(bad)
    with pytest.raises(ValueError):
        RouterCore(0, P, [parse_route("5=9")])


@given(st.binary(max_size=600), st.sampled_from(list(P.values())))
def test_garbage_from_a_port_never_raises(data, src):
    out = core().receive(src, data)
    assert out is None or out[0] in P.values()


def test_routers_of_one_fabric_cabled_together():
    """node A - r1 - r2 - node B: r1 sends B's packets to r2, which delivers them."""
    a, b, r1_addr, r2_addr = ("10.0.0.1", 7510), ("10.0.0.2", 7520), ("10.0.1.1", 7500), ("10.0.1.2", 7500)
    r1 = RouterCore(0, {0: a, 1: r2_addr}, [parse_route(f"{N1:#x}=0"), parse_route(f"{N2:#x}=1")])
    r2 = RouterCore(0, {0: b, 1: r1_addr}, [parse_route(f"{N2:#x}=0"), parse_route("0/0=1")])  # default route
    hop1 = r1.receive(a, write(N2))
    assert hop1 == (r2_addr, write(N2))
    assert r2.receive(r1_addr, hop1[1]) == (b, write(N2))
    back = envelope(Packet(N1, N2, TType.WRITE, True, 1, ack=True).encode(), 0)
    assert r2.receive(b, back) == (r1_addr, back) and r1.receive(r2_addr, back) == (a, back)
