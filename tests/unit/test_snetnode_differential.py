"""snetd's compiled per-packet path (servernet/_snetnode.c through servernet.fastnode)
against the Python node, its oracle: the same scenarios on virtual time through both
(two nodes, fabrics X and Y, packets held back to force timeouts, retries, failover and
NAKs), with the same results, memory, path states, packets and counters."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from servernet import _snetnode, constants as K
from servernet.avt import Avt, Window
from servernet.codec import decode, did_of, encode_datagram
from servernet.constants import Fabric
from servernet.endpoint import Endpoint
from servernet.fastnode import FastNode

A, B = 0x04001, 0x08001
BUF, RO, ONLY, BELL = 0x10 << 12, 0x200 << 12, 0x210 << 12, 0x300 << 12
X, Y = Fabric.X, Fabric.Y


def node(me, peer, ii=False):
    avt = Avt([Window("buf", 0x10, 256, "rw"), Window("ro", 0x200, 1, "r", paths=frozenset({X})),
               Window("only", 0x210, 1, "rw", sources=frozenset({0x0c001})),
               Window("bell", 0x300, 1, "w", interrupt=True),
               Window("ring", 0x400, 2, "rw", per_source=True)], frozenset([peer]))
    return Endpoint(me, [peer], avt, ii=ii)


class Net:
    """Two nodes on X and Y, Python only (compiled=False) or with the engine."""

    def __init__(self, compiled: bool, ii: bool = False):
        self.cores = {A: node(A, B, ii), B: node(B, A, ii)}
        self.fast = {k: FastNode(c) for k, c in self.cores.items()} if compiled else {}
        self.now = 0.0
        self.sent: list[tuple[int, bytes]] = []
        self.made: dict[int, list[tuple[int, bytes]]] = {A: [], B: []}

    def outputs(self, me):
        core = self.cores[me]
        out, self.made[me] = self.made[me] + core.out, []
        core.out[:] = []
        if self.fast:
            out += self.fast[me].engine.take_out()
        return out

    def deliver(self, me, fabric, dgram):
        """One datagram in; what it makes kept in the order made (the engine's answer at
        once, then what Python sends after hearing of it), as the driver sends them."""
        core = self.cores[me]
        if self.fast:
            self.fast[me].engine.receive(fabric, dgram, self.now)
            self.made[me] += self.fast[me].engine.take_out()
            self.fast[me].poll(self.now)
        else:
            core.receive(fabric, dgram, self.now)
        self.made[me] += core.out
        core.out[:] = []

    def run(self, until=None, hold=lambda fabric, raw: False, first=()):
        """Deliver ``first`` (datagrams taken in the order made), then every node's output
        until nothing moves (and, with ``until``, the deadlines up to then)."""
        stuck = 0  # rounds in a row in which a deadline came due and nothing moved
        first = list(first)
        while True:
            moved = False
            for me in (A, B):
                out, first = first + self.outputs(me), []
                for fabric, dgram in out:
                    moved = True
                    self.sent.append((fabric, dgram))
                    if hold(fabric, dgram):
                        continue
                    self.deliver(did_of(dgram[4:]), fabric, dgram)
            if moved:
                continue
            if until is None:
                return
            times = [c.next_deadline() for c in self.cores.values()]
            times += [f.engine.next_deadline() for f in self.fast.values()]
            nxt = min(times)
            if nxt > until:
                self.now = until
                return
            stuck = stuck + 1 if nxt <= self.now else 0
            assert stuck < 1000, f"a deadline at {nxt} stays due at {self.now}: a timer that tick() never clears"
            self.now = max(self.now, nxt)
            for me, core in self.cores.items():
                if self.fast:
                    self.fast[me].engine.tick(self.now)
                    self.fast[me].poll(self.now)
                core.tick(self.now)

    def counters(self, me):
        if self.fast:
            return {k: +v for k, v in self.fast[me].counters().items()}
        core = self.cores[me]
        return {"node": +core.counters, "avt": +core.avt.counters, "bte": +core.bte.counters}


def summary(net: Net, ops):
    return ([(o.done, o.error, o.result, dict(o.packets)) for o in ops],
            {me: net.counters(me) for me in (A, B)},
            {me: {k: p.state for k, p in c.bte.paths.items()} for me, c in net.cores.items()},
            [bytes(w.memory_of(A)) for w in net.cores[B].avt.windows],  # a per-source window: A's own
            sorted(net.sent), list(net.cores[B].blocks))


def test_constants_match():
    assert _snetnode.MAX_BLOCKS == K.NODE_BLOCKS and _snetnode.SLOW_QUEUE == K.NODE_SLOW_QUEUE
    assert _snetnode.BATCH == K.NODE_BATCH


def test_a_block_and_its_doorbell_run_in_the_engine():
    net = Net(True)
    data = bytes(range(256)) * 40
    op = net.cores[A].bte.block(B, BUF + 100, data, BELL, net.now)
    assert net.fast[A].blocks, "the block went to the engine"
    net.run()
    assert op.done and op.error is None
    assert net.cores[B].avt.windows[0].memory[100:100 + len(data)] == data
    assert net.cores[B].blocks[-1]["intact"] and net.cores[B].blocks[-1]["crc32"] == zlib.crc32(data)
    c = net.fast[A].engine.counters()
    writes, addr, end = 0, BUF + 100, BUF + 100 + len(data)
    while addr < end:  # <= 64 bytes, never across a 4 KiB page
        addr += min(64, end - addr, K.PAGE_BYTES - addr % K.PAGE_BYTES)
        writes += 1
    writes += 1  # the doorbell leaves from the engine too, after the last data WRITE's ACK
    assert c["bte"] == {"tx_X": writes // 2 + writes % 2, "tx_Y": writes // 2}  # X and Y in turn
    assert not net.cores[A].bte.counters, "no packet of the block went through the Python BTE"
    assert net.fast[B].engine.counters()["avt"]["writes"] >= 64  # answered in C
    assert net.fast[A].engine.status()["tids_high_water"] == 16
    assert net.cores[A].bte.lent == 0 and net.fast[A].engine.status()["tids_lent"] == 0


def scenario(compiled, script, hold_every, cut, ii=False):
    net = Net(compiled, ii)
    a = net.cores[A]
    ops = []
    count = [0]

    def hold(fabric, raw):
        count[0] += 1
        return fabric in cut or (hold_every and count[0] % hold_every == 0)

    for kind, off, n, seed in script:
        data = bytes((seed + i) & 0xFF for i in range(n))
        if ii:
            off, n, data = off & ~7, n & ~7 or 8, data[:n & ~7 or 8].ljust(n & ~7 or 8, b"\0")
        if kind == "block":
            ops.append(a.bte.block(B, BUF + off, data, BELL, net.now))
        elif kind == "write":
            ops.append(a.bte.write(B, [BUF, RO, ONLY, BELL, 0x7777 << 12, 0x400 << 12][seed % 6] + off % 64,
                                   data[:a.bte.chunk], net.now))
        else:
            ops.append(a.bte.read(B, [BUF, RO, ONLY, 0x400 << 12][seed % 4] + off, min(n, a.bte.chunk) or 1, net.now))
        net.run(until=net.now + 5.0, hold=hold)
    net.run(until=net.now + 10.0)
    return summary(net, ops)


OPS = st.tuples(st.sampled_from(["block", "block", "write", "read"]), st.integers(0, 5000), st.integers(1, 3000),
                st.integers(0, 255))


@settings(max_examples=40, deadline=None)
@given(st.lists(OPS, min_size=1, max_size=4), st.sampled_from([0, 0, 7, 23, 97]),
       st.sampled_from([(), (), (X,), (Y,)]), st.booleans())
# a block waiting while its TIDs were lent and one had rested: next_deadline named the
# rest's end, already past, forever (snetd's timer task would spin; here Net.run hung)
@example([("block", 0, 1729, 0)], 7, (Y,), False)
def test_compiled_node_matches_the_python_node(script, hold_every, cut, ii):
    """Blocks, writes and reads (NAKs included) with packets lost: both nodes end the same."""
    assert scenario(True, script, hold_every, cut, ii) == scenario(False, script, hold_every, cut, ii)


def test_a_waiting_write_gets_a_tid_back_before_the_block_ends():
    """The engine holds every TID for a long block; a single WRITE submitted meanwhile
    gets the next TID freed (want) instead of waiting for the whole block."""
    net = Net(True)
    a = net.cores[A]
    blk = a.bte.block(B, BUF, bytes(64 * 400), BELL, net.now)
    assert a.bte.lent == 0xFFFF
    w = a.bte.write(B, BUF + 100000, b"now", net.now)
    assert not w.done
    while not w.done:  # deliver one datagram at a time until the write is answered
        for me in (A, B):
            outs = net.outputs(me)
            for fabric, dgram in outs:
                net.deliver(did_of(dgram[4:]), fabric, dgram)
    assert not blk.done and w.error is None, "the write finished while the block was still running"
    net.run()
    assert blk.done and blk.error is None and net.cores[B].blocks[-1]["intact"]


def test_engine_per_source_window_needs_one_buffer_per_peer():
    e = _snetnode.Engine(B, [A, 0x0c001], False, 0.05)
    for bad in ([bytearray(4096)], [bytearray(4096), bytearray(100)], [bytearray(4096), b"read-only" * 500]):
        with pytest.raises((ValueError, TypeError, BufferError)):
            e.set_windows([(0x400, 1, 3, 3, False, None, bad)])
    e.set_windows([(0x400, 1, 3, 3, False, None, [bytearray(4096), bytearray(4096)])])


def test_single_write_and_read_run_in_the_engine_and_end_at_the_ack():
    """A lone WRITE or READ goes out of the engine on one lent TID and ends at the time its
    answer reached the engine (no Python decode, no trio pass in between); the TID comes back."""
    net = Net(True)
    a = net.cores[A]
    w = a.bte.write(B, BUF + 10, b"hello", net.now)
    assert a.bte.lent == 1 and net.fast[A].blocks, "the write went to the engine on TID 0 alone"
    out = net.outputs(A)
    assert len(out) == 1
    net.now = 0.25
    net.deliver(B, *out[0])
    (ack,) = net.outputs(B)
    net.now = 0.5
    net.fast[A].engine.receive(*ack, 0.375)  # the ACK came at 0.375; Python hears of it at 0.5
    net.fast[A].poll(net.now)
    assert w.done and w.error is None and w.finished == 0.375
    assert a.bte.lent == 0 and not net.fast[A].blocks
    assert net.cores[B].avt.windows[0].memory[10:15] == b"hello"
    r = a.bte.read(B, BUF + 8, 9, net.now)
    assert a.bte.lent == 1
    net.run()
    assert r.done and r.error is None and r.result == b"\0\0hello\0\0"
    c = net.fast[A].engine.counters()
    assert c["bte"] == {"tx_X": 1, "tx_Y": 1}  # X and Y in turn, as the Python BTE
    assert c["node"] == {"rx_X": 1, "rx_Y": 1} and not a.counters  # both answers handled in C


def test_a_read_nak_and_a_wrong_length_answer_in_the_engine():
    """A NAK hands the READ back (it ends "nak" as in Python); an ACK whose data is not the
    length asked is an unexpected response, counted, and the READ times out into Python."""
    net = Net(True)
    a = net.cores[A]
    r = a.bte.read(B, 0x7777 << 12, 8, net.now)  # no window there
    net.run()
    assert r.error == "nak" and net.fast[A].engine.counters()["bte"]["nak"] == 1
    r = a.bte.read(B, BUF, 8, net.now)
    (req,) = net.outputs(A)
    net.deliver(B, *req)
    (fabric, ack), = net.outputs(B)
    p = decode(ack[4:])
    short = encode_datagram(p.did, p.sid, p.ttype, True, p.tid, p.path, True, None, p.data[:4], 0, False)
    net.fast[A].engine.receive(fabric, short, net.now)
    net.fast[A].poll(net.now)
    assert not r.done and net.fast[A].engine.counters()["bte"]["drop_unexpected_response"] == 1
    net.run(until=net.now + 5.0)
    assert r.done and r.error is None and r.result == bytes(8)  # the retry, answered by B


def test_engine_refuses_a_read_longer_than_a_packet():
    e = _snetnode.Engine(A, [B], False, 0.5)
    with pytest.raises(ValueError):
        e.start_read(1, B, BUF, 65, -1, 0, 0.0)
    with pytest.raises(ValueError):
        e.start_read(1, B, BUF, 0, -1, 0, 0.0)
    assert e.start_read(1, B, BUF, 64, -1, 0, 0.0) is True


def burst(compiled, script, hold_every, cut):
    """Single WRITEs and READs submitted together (the first to the engine, the rest to the
    Python BTE while it holds a TID), packets lost: both nodes end the same."""
    net = Net(compiled)
    a = net.cores[A]
    count = [0]

    def hold(fabric, raw):
        count[0] += 1
        return fabric in cut or (hold_every and count[0] % hold_every == 0)

    ops, made = [], []
    for kind, off, n, seed in script:
        where = [BUF, RO, ONLY, BELL, 0x7777 << 12, 0x400 << 12][seed % 6] + off % 64
        if kind == "write":
            ops.append(a.bte.write(B, where, bytes((seed + i) & 0xFF for i in range(n % 65)), net.now))
        else:
            ops.append(a.bte.read(B, where, n % 64 + 1, net.now))
        made += net.outputs(A)  # in the order made: the engine sends at once, the BTE's wait in out
    net.run(until=net.now + 10.0, hold=hold, first=made)
    return summary(net, ops)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["write", "read"]), st.integers(0, 5000), st.integers(0, 200),
                          st.integers(0, 255)), min_size=1, max_size=12),
       st.sampled_from([0, 0, 3, 7, 23]), st.sampled_from([(), (), (X,), (Y,)]))
def test_single_ops_in_a_burst_match_the_python_node(script, hold_every, cut):
    assert burst(True, script, hold_every, cut) == burst(False, script, hold_every, cut)


def doorbell_lost(compiled, bell_to):
    """A block whose doorbell's first try is lost (it is handed back to the Python BTE,
    which sends it again), or whose doorbell the peer refuses."""
    net = Net(compiled)
    data = bytes(range(200))
    op = net.cores[A].bte.block(B, BUF, data, bell_to, net.now)
    lost = []

    def hold(fabric, raw):
        p = decode(raw[4:])
        if p.did == B and p.address == bell_to and not lost:
            lost.append(raw)
            return True
        return False

    net.run(until=10.0, hold=hold)
    return op, lost, summary(net, [op])


def test_a_lost_doorbell_is_sent_again_by_the_python_bte():
    op, lost, got = doorbell_lost(True, BELL)
    assert op.done and op.error is None and op.rang and lost
    assert got == doorbell_lost(False, BELL)[2]
    assert op.packets == {"X": 4, "Y": 2}  # 4 data WRITEs in turn, the doorbell on X, again on X (a retry)


def test_a_refused_doorbell_ends_the_block_nak():
    op, _, got = doorbell_lost(True, RO)  # a read-only window: NAK
    assert op.error == "nak" and got == doorbell_lost(False, RO)[2]


def test_high_water_counts_a_single_op_in_the_engine():
    """16 READs at once: the first in the engine, 15 in the Python BTE; 16 TIDs in use."""
    net = Net(True)
    a = net.cores[A]
    ops = [a.bte.read(B, BUF + 64 * i, 64, net.now) for i in range(20)]
    assert a.bte.high_water == 16 and a.bte.lent_busy == 1
    net.run()
    assert all(o.done and o.error is None for o in ops) and a.bte.lent_busy == 0 and a.bte.lent == 0
