"""PacketWay's ServerNet binding on virtual time: messages go into a slot of the peer's
receive ring in <= 64-byte WRITEs and the 16-byte descriptor rings the doorbell after
them; slots come back by the receiver's credit WRITE (spec §1.8), a sender out of credit
stalls and resumes on it; routes (the 8 L2RH bytes) and hostile descriptors."""

import struct
import zlib

import pytest

from servernet.avt import Avt, Window
from servernet.codec import Packet, decode, envelope, open_envelope
from servernet.constants import CREDIT_OFFSET, PW_BACKLOG, RING_BASE, RING_SLOTS, TType
from servernet.endpoint import Endpoint
from servernet.ring import RingLink, parse_route, ring_windows, route

A, B, C = 0x04001, 0x08001, 0x0c001
BELL = RING_BASE + RING_SLOTS * 4096
CREDIT = BELL + CREDIT_OFFSET


def ring_node(me, peer, got):
    peers = peer if isinstance(peer, list) else [peer]
    avt = Avt([Window("pktway-ring", RING_BASE >> 12, RING_SLOTS, "w", per_source=True),
               Window("pktway-bell", (RING_BASE >> 12) + RING_SLOTS, 1, "w", interrupt=True)], frozenset(peers))
    ep = Endpoint(me, peers, avt)
    return ep, RingLink(ep, lambda src, msg, back: got.append((src, msg, back)))


def pump(eps, log, now=0.0, lose=lambda p: False):
    """Deliver every datagram until none is left; ``lose`` picks requests that vanish."""
    moved = True
    while moved:
        moved = False
        for ep in eps.values():
            out, ep.out[:] = list(ep.out), []
            for fabric, d in out:
                moved = True
                pkt = decode(open_envelope(d).packet)
                if lose(pkt):
                    continue
                log.append(pkt)
                eps[pkt.did].receive(fabric, d, now)


def test_message_goes_into_a_slot_then_the_doorbell():
    got_a, got_b, log = [], [], []
    (ea, la), (eb, lb) = ring_node(A, B, got_a), ring_node(B, A, got_b)
    msg = bytes(range(200))
    assert la.send(route(B), msg, 0.0)
    pump({A: ea, B: eb}, log)
    assert got_b == [(A, msg, route(A))]
    writes = [p for p in log if p.ttype == TType.WRITE and not p.rsp and p.sid == A]
    assert [len(p.data) for p in writes] == [64, 64, 64, 8, 16] and writes[-1].address == BELL
    slot, length, seq, crc = struct.unpack(">IIII", writes[-1].data)
    assert (slot, length, crc) == (0, 200, zlib.crc32(msg)) and writes[0].address == RING_BASE
    assert la.counters["tx_messages"] == 1 and lb.counters["rx_messages"] == 1
    assert not eb.avt.queue  # the ring took its interrupt off the queue


def credit_writes(log):
    return [p for p in log if p.ttype == TType.WRITE and not p.rsp and p.address == CREDIT]


def test_slots_come_back_by_the_receivers_credit_write():
    got, log = [], []
    (ea, la), (eb, lb) = ring_node(A, B, []), ring_node(B, A, got)
    assert la.send(route(B), b"one.....", 0.0)
    pump({A: ea, B: eb}, log)
    (credit,) = credit_writes(log)
    assert credit.sid == B and credit.did == A and len(credit.data) == 64  # one ServerNet I data field
    taken = struct.unpack(">16I", credit.data)
    assert taken[0] == struct.unpack(">IIII", [p for p in log if p.address == BELL][0].data)[2]  # slot 0's seq
    assert la.counters["credit_rx"] == 1 and la.counters["slots_returned"] == 1 and lb.counters["credit_tx"] == 1
    assert not la.busy[B] and not ea.avt.queue  # the credit was taken off the sender's interrupt queue


def test_out_of_credit_the_sender_stalls_and_resumes_on_the_credit_write():
    got, log = [], []
    (ea, la), (eb, _lb) = ring_node(A, B, []), ring_node(B, A, got)
    msgs = [bytes([i]) * 8 for i in range(RING_SLOTS + 3)]
    assert all(la.send(route(B), m, 0.0) for m in msgs)  # 16 go, 3 wait for credit
    assert la.counters["tx_stalled_no_credit"] == 3 and len(la.backlog[B]) == 3
    pump({A: ea, B: eb}, log, lose=lambda p: p.address == CREDIT)  # every doorbell ACKed, no credit arrives
    assert [m for _, m, _ in got] == msgs[:RING_SLOTS]
    assert len(la.busy[B]) == RING_SLOTS and len(la.backlog[B]) == 3  # an ACK is not a credit: still stalled
    assert la.counters["tx_messages"] == RING_SLOTS and not la.counters["slots_returned"]
    eb.tick(0.06)  # the lost credit WRITE times out and goes again; the one after it carries the whole table
    pump({A: ea, B: eb}, log, 0.06)
    assert [m for _, m, _ in got] == msgs and la.counters["tx_resumed"] == 3
    assert not la.busy[B] and not la.backlog[B] and la.counters["slots_returned"] == len(msgs)
    for _ in range(RING_SLOTS + PW_BACKLOG):
        assert la.send(route(B), b"x" * 8, 0.0)
    assert not la.send(route(B), b"x" * 8, 0.0) and la.counters["tx_drop_backlog_full"] == 1


def test_a_stale_or_hostile_credit_frees_nothing_newer():
    (ea, la), (_eb, _lb) = ring_node(A, B, []), ring_node(B, A, [])
    la.send(route(B), b"message!", 0.0)
    (seq,) = la.busy[B].values()
    for data in (struct.pack(">16I", *([seq - 1] + [0] * 15)), b"short"):
        ea.receive(0, envelope(Packet(A, B, TType.WRITE, False, 2, 0, False, CREDIT, data).encode(), 0), 0.0)
    assert la.busy[B] == {0: seq} and la.counters["credit_drop_bad_length"] == 1 and not ea.avt.queue


def test_one_credit_write_in_flight_per_sender():
    got, log = [], []
    (ea, la), (eb, _lb) = ring_node(A, B, []), ring_node(B, A, got)
    for i in range(8):
        la.send(route(B), bytes([i]) * 8, 0.0)
    pump({A: ea, B: eb}, log)
    assert len(got) == 8 and 1 <= len(credit_writes(log)) < 8 and not la.busy[B]


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


def test_a_slot_no_credit_returns_is_taken_back():
    """A receiver that restarted forgets what it took: CREDIT_WAIT_S after the doorbell's
    ACK the sender takes the slot back (counted) and a stalled message goes."""
    (ea, la), (eb, _lb) = ring_node(A, B, []), ring_node(B, A, [])
    for i in range(RING_SLOTS + 1):
        la.send(route(B), bytes([i]) * 8, 0.0)
    pump({A: ea, B: eb}, [], lose=lambda p: p.address == CREDIT)
    ea.tick(1.0)
    assert len(la.busy[B]) == RING_SLOTS and not la.counters["slots_reclaimed_no_credit"]
    ea.tick(2.0)
    assert la.counters["slots_reclaimed_no_credit"] == RING_SLOTS and la.counters["tx_resumed"] == 1
    assert len(la.busy[B]) == 1 and not la.backlog[B]


def test_a_credit_owed_to_an_unreachable_sender_goes_when_it_is_back():
    from servernet.paths import State

    got, log = [], []
    (ea, la), (eb, lb) = ring_node(A, B, []), ring_node(B, A, got)
    la.send(route(B), b"message!", 0.0)
    for f in (0, 1):
        eb.bte.paths[A, f].state = State.HARD_DOWN  # B cannot reach A: its credit fails at once
    pump({A: ea, B: eb}, log)
    assert got and lb.counters["credit_failed_no_path"] == 1 and la.busy[B] and lb.credit_owed[A]
    for f in (0, 1):
        eb.bte.paths[A, f].state = State.UP
    eb.tick(0.01)
    pump({A: ea, B: eb}, log, 0.01)
    assert not la.busy[B] and lb.counters["credit_tx"] == 1 and not lb.credit_owed[A]
