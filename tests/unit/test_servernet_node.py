"""The ServerNet end node's sans-IO core on virtual time: AVT checks and NAKs, the
16-entry TID window, blocks with the doorbell last, retry on the same fabric then the
other, the path state machine (UP, SUSPECT, HARD_DOWN, PROBING), failover and
fail-back, and hostile input."""

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servernet.avt import Avt, Window
from servernet.bte import parse_doorbell
from servernet.codec import Packet, decode, did_of, envelope, open_envelope
from servernet.constants import HARD_DOWN_TIMEOUTS, PAGE_BYTES, RESPONSE_TIMEOUT_S, Fabric, TType
from servernet.endpoint import Endpoint
from servernet.paths import Path, State

A, B, C = 0x04001, 0x08001, 0x0c001
BUF, RO, BELL = 0x10 << 12, 0x200 << 12, 0x300 << 12
X, Y = Fabric.X, Fabric.Y


def node(me, peers):
    avt = Avt([Window("buf", 0x10, 256, "rw"), Window("ro", 0x200, 1, "r", paths=frozenset({X})),
               Window("only-a", 0x210, 1, "rw", sources=frozenset({A})),
               Window("bell", 0x300, 1, "w", interrupt=True)], frozenset(peers))
    return Endpoint(me, peers, avt)


class Net:
    """Two nodes joined by two fabrics; a fabric can be cut."""

    def __init__(self):
        self.nodes = {A: node(A, [B]), B: node(B, [A])}
        self.down = set()
        self.now = 0.0
        self.log = []  # (fabric, Packet) of every datagram sent

    def run(self, until=None, hold=None):
        """Deliver until quiet (timers fire only when advancing to ``until``)."""
        while True:
            moved = False
            for ep in self.nodes.values():
                out, ep.out[:] = list(ep.out), []
                for fabric, dgram in out:
                    moved = True
                    env = open_envelope(dgram)
                    self.log.append((fabric, decode(env.packet)))
                    if fabric in self.down or (hold and hold(decode(env.packet))):
                        continue
                    self.nodes[did_of(env.packet)].receive(fabric, dgram, self.now)
            if moved:
                continue
            if until is None:
                return
            nxt = min(ep.next_deadline() for ep in self.nodes.values())
            if nxt > until:
                self.now = until
                return
            self.now = max(self.now, nxt)
            for ep in self.nodes.values():
                ep.tick(self.now)

    def state(self, fabric, me=A, peer=B):
        return self.nodes[me].bte.paths[peer, fabric].state


def test_write_then_read_back_with_ack():
    net = Net()
    a = net.nodes[A]
    w = a.bte.write(B, BUF + 100, b"hello", net.now)
    net.run()
    assert w.done and w.error is None
    r = a.bte.read(B, BUF + 98, 9, net.now)
    net.run()
    assert r.result == b"\0\0hello\0\0"
    assert net.nodes[B].avt.windows[0].memory[100:105] == b"hello"


@pytest.mark.parametrize("op,reason", [
    (lambda a, n: a.bte.write(B, 0x999 << 12, b"x", n), "nak_bad_address"),
    (lambda a, n: a.bte.write(B, RO, b"x", n), "nak_permission"),
    (lambda a, n: a.bte.read(B, RO + PAGE_BYTES - 4, 8, n), "nak_bounds"),
    (lambda a, n: a.bte.read(B, BUF + 256 * PAGE_BYTES - 4, 8, n), "nak_bounds"),
])
def test_invalid_access_is_nakked_and_counted(op, reason):
    net = Net()
    o = op(net.nodes[A], net.now)
    net.run()
    assert o.error == "nak"
    assert net.nodes[B].avt.counters[reason] == 1
    assert net.log[-1][1].rsp and not net.log[-1][1].ack


def test_avt_checks_source_and_path():
    net = Net()
    net.nodes[C] = node(C, [B])
    net.nodes[B] = node(B, [A, C])
    net.nodes[A] = node(A, [B])
    ok = net.nodes[A].bte.write(B, (0x210 << 12), b"a", net.now)
    no = net.nodes[C].bte.write(B, (0x210 << 12), b"c", net.now)
    net.run()
    assert ok.error is None and no.error == "nak"
    assert net.nodes[B].avt.counters["nak_source"] == 1
    # the read-only window is allowed on X only: the read on Y is NAKed
    net.nodes[A].bte.toggle[B] = Y
    r = net.nodes[A].bte.read(B, RO, 4, net.now)
    net.run()
    assert r.error == "nak" and net.nodes[B].avt.counters["nak_path"] == 1


def test_a_per_source_window_gives_each_source_its_own_memory():
    avt = Avt([Window("mine", 0x20, 1, "rw", per_source=True)], frozenset({A, C}))
    assert avt.write(A, X, 0x20000, b"from A") is True and avt.write(C, X, 0x20000, b"from C") is True
    assert avt.read(A, X, 0x20000, 6) == b"from A" and avt.read(C, X, 0x20000, 6) == b"from C"
    assert avt.read(B, X, 0x20000, 6) is None and avt.counters["nak_source"] == 1  # not a peer: no memory made
    assert set(avt.windows[0].by_source) == {A, C}


def test_interrupt_queue_is_bounded_and_nakks_when_full():
    net = Net()
    b = net.nodes[B]
    b.avt.queue_limit = 3
    ops = [net.nodes[A].bte.write(B, BELL, bytes([i]), net.now) for i in range(5)]
    net.run()
    assert [o.error for o in ops] == [None, None, None, "nak", "nak"]
    assert [i.data for i in b.avt.pop_interrupts(10)] == [b"\0", b"\1", b"\2"]
    assert b.avt.counters["nak_interrupt_queue_full"] == 2


def test_sixteen_transactions_outstanding_then_the_rest():
    net = Net()
    a = net.nodes[A]
    ops = [a.bte.write(B, BUF + 8 * i, bytes([i]) * 8, net.now) for i in range(20)]
    assert len(a.out) == 16 and all(s is not None for s in a.bte.slots) and a.bte.in_use == 16
    assert sorted(decode(open_envelope(d).packet).tid for _, d in a.out) == list(range(16))
    net.run()
    assert all(o.done and o.error is None for o in ops) and a.bte.in_use == 0 and a.bte.high_water == 16
    assert net.nodes[B].avt.windows[0].memory[:160] == b"".join(bytes([i]) * 8 for i in range(20))
    both = {f for f, p in net.log if not p.rsp}
    assert both == {X, Y}  # both fabrics carry traffic


def test_block_doorbell_only_after_every_data_write_is_acked():
    net = Net()
    data = bytes(range(256)) * 40 + b"tail"  # 10244 bytes: crosses pages, odd end
    held = []

    def hold(p):  # withhold the first write response: the doorbell must wait for it
        if p.rsp and p.ttype == TType.WRITE and not held:
            held.append(p)
            return True
        return False

    blk = net.nodes[A].bte.block(B, BUF + 4000, data, BELL, net.now)
    net.run(hold=hold)
    requests = [p for _, p in net.log if not p.rsp]
    assert all(p.address != BELL for p in requests) and not blk.done
    assert all(len(p.data) <= 64 and (p.address // PAGE_BYTES) == ((p.address + len(p.data) - 1) // PAGE_BYTES)
               for p in requests)
    net.run(until=net.now + 1.0)  # the held write is retried; its ACK lets the doorbell go
    assert blk.done and blk.error is None
    bell = [p for _, p in net.log if not p.rsp and p.address == BELL]
    assert len(bell) == 1 and parse_doorbell(bell[0].data) == (BUF + 4000, len(data), blk.seq, zlib.crc32(data))
    b = net.nodes[B]
    assert bytes(b.avt.windows[0].memory[4000:4000 + len(data)]) == data
    assert list(b.blocks)[-1]["intact"] and b.counters["blocks_intact"] == 1


def test_block_aborted_by_a_nak_sends_no_doorbell():
    net = Net()
    blk = net.nodes[A].bte.block(B, BUF + 256 * PAGE_BYTES - 128, bytes(256), BELL, net.now)  # runs off the window
    net.run(until=1.0)
    assert blk.error == "nak"
    assert not [p for _, p in net.log if not p.rsp and p.address == BELL]


def test_timeout_retries_once_on_the_same_fabric_then_the_other():
    net = Net()
    net.down.add(X)
    net.nodes[A].bte.toggle[B] = X
    w = net.nodes[A].bte.write(B, BUF, b"x", net.now)
    net.run(until=0.5)
    assert [f for f, p in net.log if not p.rsp and p.ttype == TType.WRITE] == [X, X, Y]
    assert w.done and w.error is None and w.finished == pytest.approx(2 * RESPONSE_TIMEOUT_S)
    assert net.nodes[A].bte.counters["failovers"] == 1


def test_write_times_out_on_both_fabrics():
    net = Net()
    net.down |= {X, Y}
    w = net.nodes[A].bte.write(B, BUF, b"x", net.now)
    net.run(until=0.5)
    assert w.error == "timeout"
    assert [f for f, p in net.log if not p.rsp and p.ttype == TType.WRITE] == [X, X, Y, Y]


def test_fabric_failure_failover_hard_down_and_fail_back():
    net = Net()
    a = net.nodes[A]
    net.run(until=0.01)
    net.down.add(X)
    data = bytes(i * 7 & 0xFF for i in range(64 * 1024))
    blk = a.bte.block(B, BUF, data, BELL, net.now)
    net.run(until=2.0)
    assert blk.done and blk.error is None and net.nodes[B].counters["blocks_intact"] == 1
    assert net.state(X) in (State.HARD_DOWN, State.PROBING) and net.state(Y) is State.UP
    assert a.bte.paths[B, X].counters["to_hard_down"] >= 1
    # while X is down everything goes on Y
    later = a.bte.write(B, BUF, b"y", net.now)
    n = len(net.log)
    net.run(until=net.now + 0.01)
    assert later.error is None and all(f == Y for f, p in net.log[n:] if p.ttype == TType.WRITE)
    # the router comes back: probed every second, UP after 3 barrier ACKs in a row
    net.down.clear()
    net.run(until=net.now + 1.2)
    assert net.state(X) is State.UP
    assert a.bte.paths[B, X].counters["barrier_acked"] >= 3
    n = len(net.log)
    for i in range(8):
        a.bte.write(B, BUF + i, b"z", net.now)
    net.run()
    assert {f for f, p in net.log[n:] if not p.rsp} == {X, Y}  # both fabrics again


def test_path_machine_goes_hard_down_after_more_than_40_timeouts():
    p = Path(B, X)
    p.on_timeout(0.0)
    assert p.state is State.SUSPECT and p.barrier_due == 0.0
    p.barrier_sent(0.0)  # the barrier is out: only timeouts count now
    for _i in range(HARD_DOWN_TIMEOUTS - 1):
        p.on_timeout(0.0)
    assert p.state is State.SUSPECT
    p.on_timeout(0.0)
    assert p.state is State.HARD_DOWN and p.barrier_due == 1.0


def test_path_machine_suspect_recovers_on_any_ack_and_probing_fails_back_down():
    p = Path(B, Y)
    p.on_timeout(0.0)
    p.on_ack(0.01)
    assert p.state is State.UP and p.timeouts == 0
    p.on_timeout(0.0)
    p.barrier_sent(0.0)
    p.on_barrier(False, 0.05)
    assert p.state is State.HARD_DOWN
    p.barrier_sent(1.05)
    assert p.state is State.PROBING
    p.on_barrier(True, 1.06)
    p.on_barrier(False, 1.1)
    assert p.state is State.HARD_DOWN and p.probe_acks == 0


def test_a_request_from_the_peer_brings_the_probe_of_a_hard_down_path_forward():
    net = Net()
    net.down.add(X)
    net.nodes[A].bte.toggle[B] = X
    net.nodes[A].bte.write(B, BUF, b"x", net.now)
    net.run(until=0.3)
    assert net.state(X) is State.HARD_DOWN
    net.down.clear()
    net.nodes[B].bte.toggle[A] = X
    net.nodes[B].bte.write(A, BUF, b"from b on X", net.now)  # A hears B on X: probes at once
    net.run(until=net.now + 0.01)
    assert net.state(X) is State.UP and net.nodes[A].bte.paths[B, X].counters["probe_early"] == 1


def test_servernet_ii_mode_moves_512_byte_packets():
    net = Net()
    for me, peer in ((A, B), (B, A)):
        ep = node(me, [peer])
        net.nodes[me] = Endpoint(me, [peer], ep.avt, ii=True)
    data = bytes(i & 0xFF for i in range(10_000))
    blk = net.nodes[A].bte.block(B, BUF, data, BELL, net.now)
    net.log.clear()
    while net.nodes[A].out or net.nodes[B].out:
        for ep in net.nodes.values():
            out, ep.out[:] = list(ep.out), []
            for fabric, d in out:
                env = open_envelope(d)
                net.log.append(decode(env.packet, ii=True))
                net.nodes[did_of(env.packet)].receive(fabric, d, 0.0)
    assert blk.done and blk.error is None
    sizes = [len(p.data) for p in net.log if not p.rsp and p.address != BELL]
    assert max(sizes) == 512 and sum(sizes) == len(data)
    assert bytes(net.nodes[B].avt.windows[0].memory[:len(data)]) == data
    # a node in ServerNet I mode drops a ServerNet II packet (counted), never NAKs it
    plain = node(B, [A])
    plain.receive(X, envelope(Packet(B, A, TType.WRITE, False, 0, X, False, BUF, bytes(512), ii=True).encode(), X,
                              ii=True), 0.0)
    assert plain.counters["drop_mode"] == 1 and not plain.out


def test_requests_the_format_cannot_carry_are_refused_at_submit():
    a = Net().nodes[A]
    assert a.bte.write(B, BUF, bytes(65), 0.0).error == "length"
    assert a.bte.read(B, BUF, 0, 0.0).error == "length"
    assert a.bte.block(B, 0xFFFFFFF0, bytes(32), BELL, 0.0).error == "length"
    ii = Endpoint(A, [B], node(A, [B]).avt, ii=True)
    assert ii.bte.write(B, BUF, bytes(12), 0.0).error == "length"  # not whole 8-byte units
    assert ii.bte.block(B, BUF + 4, bytes(64), BELL, 0.0).error == "length"
    assert ii.bte.write(B, BUF, bytes(512), 0.0).error is None
    assert not a.out and a.bte.in_use == 0


def test_a_full_queue_refuses_requests_but_never_probes():
    from servernet.constants import PENDING_OPS

    a = Net().nodes[A]
    ops = [a.bte.write(B, BUF, b"x", 0.0) for _ in range(16 + PENDING_OPS + 5)]  # nothing answers
    assert [o.error for o in ops[-5:]] == ["queue_full"] * 5 and len(a.bte.ready) == PENDING_OPS
    a.tick(RESPONSE_TIMEOUT_S)  # the first timeouts: SUSPECT paths ask for BARRIERs
    barriers = [o for o in a.bte.ready if o.kind == "barrier"]
    assert {o.fabric for o in barriers} == {X, Y} and all(not o.done for o in barriers)
    assert a.bte.paths[B, X].barrier_out and a.bte.paths[B, Y].barrier_out


def test_diag_gets_no_response():
    b = Net().nodes[B]
    b.receive(X, envelope(Packet(B, A, TType.DIAG, False, 0, X, False, 0, b"status").encode(), X), 0.0)
    assert b.counters["diag_rx"] == 1 and not b.out


def test_receive_drops_are_counted_by_reason():
    b = Net().nodes[B]
    good = Packet(B, A, TType.WRITE, False, 0, X, False, BUF, b"x").encode()
    b.receive(X, envelope(good, X, tpb=True), 0.0)
    b.receive(Y, envelope(good, X), 0.0)
    b.receive(X, envelope(good[:-1] + b"\0", X), 0.0)
    b.receive(X, envelope(Packet(C, A, TType.WRITE, False, 0, X, False, BUF, b"x").encode(), X), 0.0)
    b.receive(X, envelope(Packet(B, C, TType.WRITE, False, 0, X, False, BUF, b"x").encode(), X), 0.0)
    b.receive(X, envelope(Packet(B, A, TType.WRITE, True, 3, X, True).encode(), X), 0.0)
    b.receive(X, b"junk", 0.0)
    assert {k: v for k, v in b.counters.items() if k.startswith("drop")} == {
        "drop_tpb": 1, "drop_wrong_fabric": 1, "drop_crc": 1, "drop_bad_did": 1, "drop_bad_sid": 1,
        "drop_bad_envelope": 1}
    assert b.bte.counters["drop_unexpected_response"] == 1
    assert not b.out


@settings(max_examples=300)
@given(st.lists(st.tuples(st.sampled_from([X, Y]), st.binary(max_size=100)), max_size=20))
def test_hostile_datagrams_never_raise(datagrams):
    b = Net().nodes[B]
    for fabric, d in datagrams:
        b.receive(fabric, d, 0.0)
        b.receive(fabric, envelope(d, fabric), 0.0)
    b.tick(1.0)


@st.composite
def node_datagrams(draw):
    """(fabric socket, datagram) a node may get: built requests and responses to it (any
    fabric, mode, TPB; mostly on their own fabric's socket), the same with a byte changed,
    one too long, and noise."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.integers(0, 1)), draw(st.binary(max_size=120))
    ttype = draw(st.sampled_from([TType.READ, TType.WRITE, TType.BARRIER]))
    rsp, ii, fabric = draw(st.booleans()), draw(st.integers(0, 3)) == 0, draw(st.integers(0, 1))
    n = draw(st.sampled_from([0, 8, 64, 64]))
    data = draw(st.binary(min_size=n, max_size=n)) if (ttype == TType.WRITE and not rsp) or (
        ttype == TType.READ and rsp) else b""
    pkt = Packet(B, draw(st.sampled_from([A, C])), ttype, rsp, draw(st.integers(0, 15)), draw(st.integers(0, 1)),
                 rsp and draw(st.booleans()), None if rsp else draw(st.sampled_from([BUF, RO, BELL, 0x900000])),
                 data, n if ttype == TType.READ and not rsp else 0, ii)
    raw = bytearray(envelope(pkt.encode(), fabric, tpb=draw(st.integers(0, 5)) == 0, ii=ii))
    if draw(st.integers(0, 2)) == 0:
        raw[draw(st.integers(0, len(raw) - 1))] ^= draw(st.integers(1, 255))
    if draw(st.integers(0, 3)) == 0:
        raw += draw(st.binary(min_size=1, max_size=40))
    return (fabric if draw(st.integers(0, 4)) else 1 - fabric), bytes(raw)


@settings(max_examples=300, deadline=None)
@given(st.lists(node_datagrams(), max_size=6))
def test_the_usual_envelope_shortcut_decides_as_the_full_check(inputs):
    """receive() skips opening an envelope that is exactly the usual one; a node without
    the shortcut must count, answer and queue the same."""
    fast, full = node(B, [A]), node(B, [A])
    full.heads = (None, None)
    fast.bte.write(A, BUF, b"x" * 8, 0.0)
    full.bte.write(A, BUF, b"x" * 8, 0.0)
    for fabric, d in inputs:
        fast.receive(fabric, d, 0.0)
        full.receive(fabric, d, 0.0)
    assert fast.counters == full.counters and fast.out == full.out and fast.avt.counters == full.avt.counters
    assert fast.bte.counters == full.bte.counters


def test_the_driver_hears_of_every_earlier_deadline():
    """timer_moved: a new transaction, a re-sent one's quarantine and a BARRIER brought
    forward each tell the driver that its timer must wake sooner."""
    a = node(A, [B])
    assert not a.timer_moved(float("inf"))
    a.bte.write(B, BUF, b"x", 0.0)
    assert a.timer_moved(1.0) and not a.timer_moved(1.0)  # asked once, then forgotten
    a.bte.write(B, BUF, b"y", 0.0)
    assert not a.timer_moved(RESPONSE_TIMEOUT_S / 2)  # the new deadline is not before the timer's wake-up
    path = a.bte.paths[B, X]
    path.state, path.barrier_due = State.HARD_DOWN, 5.0
    a.timer_moved(0.0)
    path.heard(1.0)  # the peer's request on that fabric: probe now
    assert a.timer_moved(2.0) and a.next_deadline() <= 1.0
