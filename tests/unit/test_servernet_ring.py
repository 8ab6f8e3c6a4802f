"""PacketWay's ServerNet binding on virtual time: messages go into a slot of the peer's
receive ring in <= 64-byte WRITEs and the 16-byte descriptor rings the doorbell after
them; routes (the 8 L2RH bytes), a full ring, and hostile descriptors."""

import struct
import zlib

import pytest

from servernet.avt import Avt, Window
from servernet.codec import Packet, decode, did_of, envelope, open_envelope
from servernet.constants import RING_BASE, RING_SLOTS, TType
from servernet.endpoint import Endpoint
from servernet.ring import RingLink, parse_route, ring_windows, route

A, B, C = 0x04001, 0x08001, 0x0c001
BELL = RING_BASE + RING_SLOTS * 4096


def ring_node(me, peer, got):
    peers = peer if isinstance(peer, list) else [peer]
    avt = Avt([Window("pktway-ring", RING_BASE >> 12, RING_SLOTS, "w", per_source=True),
               Window("pktway-bell", (RING_BASE >> 12) + RING_SLOTS, 1, "w", interrupt=True)], frozenset(peers))
    ep = Endpoint(me, peers, avt)
    return ep, RingLink(ep, lambda src, msg, back: got.append((src, msg, back)))


def pump(eps, log, now=0.0):
    moved = True
    while moved:
        moved = False
        for ep in eps.values():
            out, ep.out[:] = list(ep.out), []
            for fabric, d in out:
                moved = True
                log.append(decode(open_envelope(d).packet))
                eps[did_of(open_envelope(d).packet)].receive(fabric, d, now)


def test_message_goes_into_a_slot_then_the_doorbell():
    got_a, got_b, log = [], [], []
    (ea, la), (eb, lb) = ring_node(A, B, got_a), ring_node(B, A, got_b)
    msg = bytes(range(200))
    assert la.send(route(B), msg, 0.0)
    pump({A: ea, B: eb}, log)
    assert got_b == [(A, msg, route(A))]
    writes = [p for p in log if p.ttype == TType.WRITE and not p.rsp]
    assert [len(p.data) for p in writes] == [64, 64, 64, 8, 16] and writes[-1].address == BELL
    slot, length, seq, crc = struct.unpack(">IIII", writes[-1].data)
    assert (slot, length, crc) == (0, 200, zlib.crc32(msg)) and writes[0].address == RING_BASE
    assert la.counters["tx_messages"] == 1 and lb.counters["rx_messages"] == 1
    assert not eb.avt.queue  # the ring took its interrupt off the queue


def test_busy_slots_and_a_full_ring():
    got, log = [], []
    (ea, la), (eb, _lb) = ring_node(A, B, []), ring_node(B, A, got)
    for i in range(RING_SLOTS):
        assert la.send(route(B), bytes([i]) * 8, 0.0)
    assert not la.send(route(B), b"x" * 8, 0.0) and la.counters["tx_drop_ring_full"] == 1
    pump({A: ea, B: eb}, log)
    assert [m for _, m, _ in got] == [bytes([i]) * 8 for i in range(RING_SLOTS)]
    assert la.send(route(B), b"again!!!", 0.0)  # slots free once their doorbells were ACKed


def test_two_senders_never_share_a_slot():
    got, log = [], []
    eb, lb = ring_node(B, [A, C], got)
    ea, la = ring_node(A, B, [])
    ec, lc = ring_node(C, B, [])
    assert la.send(route(B), b"from A!!" * 4, 0.0) and lc.send(route(B), b"from C!!" * 4, 0.0)  # both slot 0
    pump({A: ea, B: eb, C: ec}, log)
    assert sorted(got) == sorted([(A, b"from A!!" * 4, route(A)), (C, b"from C!!" * 4, route(C))])


def test_route_bytes():
    r = route(0x08001, 1, 0x00500000)
    assert r == bytes.fromhex("0080010100500000") and parse_route(r) == (0x08001, 1, 0x00500000)
    for bad in (b"", bytes(7), bytes.fromhex("f000000200400000"), bytes.fromhex("0080010300400000"),
                bytes.fromhex("0080010200400010")):
        with pytest.raises(ValueError):
            parse_route(bad)
    ea, la = ring_node(A, B, [])
    assert not la.send(b"\x01", b"x", 0.0) and not la.send(route(0x3), b"x", 0.0)
    assert not la.send(route(B), bytes(4097), 0.0)
    assert {k for k in la.counters} == {"tx_drop_bad_route", "tx_drop_unknown_peer", "tx_drop_size"}


@pytest.mark.parametrize("desc,reason", [
    (b"short", "rx_drop_bad_descriptor"),
    (struct.pack(">IIII", RING_SLOTS, 8, 1, 0), "rx_drop_bad_descriptor"),
    (struct.pack(">IIII", 0, 4097, 1, 0), "rx_drop_bad_descriptor"),
    (struct.pack(">IIII", 0, 8, 1, 12345), "rx_drop_bad_crc"),
])
def test_hostile_doorbells_are_counted_not_delivered(desc, reason):
    got = []
    eb, lb = ring_node(B, A, got)
    eb.receive(0, envelope(Packet(B, A, TType.WRITE, False, 1, 0, False, BELL, desc).encode(), 0), 0.0)
    assert not got and lb.counters[reason] == 1 and not eb.avt.queue


def test_ring_windows_are_checked():
    with pytest.raises(ValueError):
        ring_windows([Window("pktway-ring", 0x400, 8, "w"), Window("pktway-bell", 0x408, 1, "w", interrupt=True)])
    with pytest.raises(ValueError):
        ring_windows([Window("pktway-ring", 0x400, 16, "w"), Window("pktway-bell", 0x500, 1, "w", interrupt=True)])
    with pytest.raises(ValueError):
        ring_windows([Window("pktway-ring", 0x400, 16, "w")])
    with pytest.raises(ValueError):  # a ring shared by every sender
        ring_windows([Window("pktway-ring", 0x400, 16, "w"), Window("pktway-bell", 0x410, 1, "w", interrupt=True)])
