"""Loss recovery on the cable (selective repeat), on virtual time, for both Link and
CLink: a lost datagram is resent alone about one round trip later; reordering
shorter than the duplicate threshold resends nothing; out-of-order datagrams are
delivered in sequence order exactly once; SACK NULLs are checked like any input."""

from __future__ import annotations

import random
import struct

from hypothesis import HealthCheck, given, settings, strategies as st

from daemons import constants as C
from daemons.link.link import Received, Timers, sack_ranges
from daemons.wire.message import Message
from daemons.wire.micropacket import Micropacket
from daemons.wire.shim import Shim
from tests.unit.linkpair import LINK_IMPLS, Pair, each_impl

A, B = b"\x02" * 6, b"\x04" * 6


def seq_of(d: bytes) -> int:
    return struct.unpack_from("!Q", d, 16)[0]


def sequenced(d: bytes) -> bool:
    return bool(d[3] & C.SHIM_FLAG_SEQUENCED)


def up_pair(impl, **kw) -> Pair:
    p = Pair(impl=impl, **kw)
    p.run(0.05)
    assert p.up()
    return p


@each_impl
def test_one_lost_datagram_is_resent_alone_within_about_one_round_trip(impl):
    lost: list[float] = []
    p = up_pair(impl, seed=4, max_mps=10)
    start = p.links[0].next_seq

    def lose(i, d):  # the fourth datagram of the Message, once
        if i == 0 and sequenced(d) and not lost and seq_of(d) == start + 30:
            lost.append(p.now)
            return True
        return False

    p.lose = lose
    m = Message(1, A, B, 0x88B5, bytes(4000))  # 126 micropackets: 13 datagrams of 10
    p.links[0].enqueue(1, m.records())
    p.step()
    assert lost, "the wire lost nothing"
    while not p.got[1]:
        p.step()
        assert p.now - lost[0] < 0.01
    took = p.now - lost[0]
    sender = p.links[0].counters
    assert p.got[1] == [m]
    assert sender["rtx_mps"] == sender["fast_rtx_mps"] == 10  # only the hole, found by SACK
    assert sender["timeout_rtx_mps"] == 0
    assert took <= 0.003 < C.RTX_TIMEOUT_S  # ~1 round trip of this wire (1 ms steps), not the 20 ms RTO
    assert p.links[1].counters["ooo_delivered_mps"] >= 30  # what came after the hole waited, was not resent


@each_impl
def test_reordering_below_the_duplicate_threshold_resends_nothing(impl):
    p = up_pair(impl, seed=5, max_mps=10)
    a, b = p.links
    m = Message(1, A, B, 0x88B5, bytes(4000))
    a.enqueue(1, m.records())
    p.now += 0.001
    out = [d for d in a.handle_timer(p.now) + a.datagrams(p.now) if sequenced(d)]
    assert len(out) >= 6
    # the first datagram overtaken by two others (< SACK_DUPTHRESH), the rest in order
    order = out[1:3] + out[:1] + out[3:]
    for d in order:
        b.receive(d, p.now)
        for d2 in b.datagrams(p.now):
            a.receive(d2, p.now)
    assert a.counters["rtx_mps"] == 0 and b.counters["out_of_order"] == 2
    recs = b"".join(e.recs.tobytes() for e in b.events() if isinstance(e, Received))
    assert recs == b"".join(d[C.SHIM_BYTES:] for d in out)  # in sequence order, once
    p.run(0.1)
    assert a.counters["rtx_mps"] == 0 and a.status()["inflight_mps"] == 0


@each_impl
def test_a_datagram_held_in_the_buffer_is_counted_duplicate_when_it_comes_again(impl):
    p = up_pair(impl, seed=6, max_mps=10)
    a, b = p.links
    a.enqueue(1, Message(1, A, B, 0x88B5, bytes(1000)).records())
    p.now += 0.001
    out = [d for d in a.datagrams(p.now) if sequenced(d)]
    before = b.counters["rx_mps"]
    b.receive(out[2], p.now)
    b.receive(out[2], p.now)
    assert b.counters["out_of_order"] == 1 and b.counters["duplicate"] == 1
    sack = [d for d in b.datagrams(p.now) if not sequenced(d)]
    assert len(sack) == 1  # a SACK NULL: the range of out[2] from the ack
    lo, hi = struct.unpack_from("!II", sack[0], C.SHIM_BYTES)
    assert (lo, hi) == (seq_of(out[2]) - b.expected, seq_of(out[2]) + 10 - b.expected)
    for d in out:
        b.receive(d, p.now)
    assert b.counters["duplicate"] == 2
    assert b.counters["rx_mps"] - before == sum((len(d) - C.SHIM_BYTES) // C.MP_BYTES for d in out)


def test_sack_ranges_merge_and_keep_the_lowest():
    buf = {10: [0] * 5, 15: [0] * 5, 30: [0] * 2, 31: [0] * 4, 50: [0], 60: [0], 70: [0]}
    assert sack_ranges(buf, 8) == [(2, 12), (22, 27), (42, 43), (52, 53)]
    assert sack_ranges({}, 0) == []


def _null(link_from, link_to, data: bytes) -> bytes:
    """A NULL from ``link_from`` to ``link_to`` carrying ``data``, shim and LCRC right."""
    mp = Micropacket(data=data, type=C.MpType.NULL, rseq=(link_from.expected - 1) & 0xFF,
                     tseq=(link_from.next_seq - 1) & 0xFF)
    shim = Shim(0, link_from.cable_id, link_from.my_nonce, link_to.my_nonce, link_from.next_seq,
                link_from.expected)
    return shim.encode() + mp.encode()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=True)
@given(words=st.lists(st.integers(0, 2**32 - 1) | st.integers(0, 400), min_size=8, max_size=8),
       lose=st.sets(st.integers(0, 12), max_size=4))
def test_hostile_sack_nulls_are_checked_and_both_links_agree(words, lose):
    """Any SACK (ranges past what was sent, reversed, empty, overlapping) is taken or
    refused (bad_sack) the same by both; the Message still arrives exactly once."""
    results = []
    for impl in LINK_IMPLS:
        p = up_pair(impl, seed=7, max_mps=10)
        a, b = p.links
        m = Message(1, A, B, 0x88B5, bytes(4000))
        a.enqueue(1, m.records())
        p.now += 0.001
        out = [d for d in a.datagrams(p.now) if sequenced(d)]
        for k, d in enumerate(out):
            if k not in lose:
                b.receive(d, p.now)
        a.receive(_null(b, a, struct.pack("!8I", *words)), p.now)
        first = [bytes(d) for d in a.handle_timer(p.now) + a.datagrams(p.now)]
        p.run(0.2)
        assert p.got[1] == [m]
        assert a.ledger.balanced() and b.ledger.balanced()
        results.append((first, dict(+a.counters), dict(+b.counters)))
    assert results[0] == results[1]


@st.composite
def impairments(draw):
    return dict(seed=draw(st.integers(0, 10**6)), drop=draw(st.floats(0, 0.3)), dup=draw(st.floats(0, 0.2)),
                reorder=draw(st.floats(0, 0.5)), max_mps=draw(st.integers(1, 200)),
                sizes=draw(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 6000)), min_size=1, max_size=10)))


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=True)
@given(imp=impairments())
def test_heavy_loss_duplication_and_reordering_deliver_every_message_once_in_order(imp):
    """Both implementations, the same impaired wire: every Message exactly once and in
    order per VC, credits exact once the wire is clean, and the same bytes sent."""
    traces = []
    for impl in LINK_IMPLS:
        sent, tx = [], []
        p = Pair(impl=impl, seed=imp["seed"], drop=imp["drop"], dup=imp["dup"], reorder=imp["reorder"],
                 max_mps=imp["max_mps"], tap=lambda i, d: tx.append((i, bytes(d))), timers=Timers(rtx_limit=1000))
        p.run(0.05)
        rng = random.Random(imp["seed"])
        for vc, n in imp["sizes"]:
            m = Message(vc, A, B, 0x88B5, rng.randbytes(min(n, 1900) if vc == 0 else n))
            sent.append(m)
            p.links[0].enqueue(vc, m.records())
            p.step()
        p.run(0.5)
        p.drop = p.dup = p.reorder = 0.0
        for _ in range(3000):
            if len(p.got[1]) >= len(sent) and not any(link.status()["inflight_mps"] for link in p.links):
                break
            p.step()
        assert p.up()
        by_vc = lambda ms: {vc: [m for m in ms if m.vc == vc] for vc in range(4)}  # noqa: E731
        assert by_vc(p.got[1]) == by_vc(sent)
        p.run(0.05)
        for link in p.links:
            assert link.ledger.balanced()
            assert link.credits == list(C.VC_BUFFER_MPS)
        traces.append((tx, p.links[0].counters["rtx_mps"]))
    assert traces[0] == traces[1]


@each_impl
def test_a_datagram_overtaken_by_a_later_ack_is_still_taken(impl):
    """Reordered on the wire, a datagram carries an older ack than one already seen:
    the ack is old news (stale_ack), the micropackets are good and delivered."""
    p = up_pair(impl, seed=8)
    a, b = p.links

    def exchange(sender, receiver, m):
        sender.enqueue(m.vc, m.records())
        p.now += 0.001
        out = [d for d in sender.datagrams(p.now) if sequenced(d)]
        assert out
        return out

    for d in exchange(a, b, Message(1, A, B, 0x88B5, bytes(100))):
        b.receive(d, p.now)
    x = exchange(b, a, Message(1, B, A, 0x88B5, bytes(200)))
    for d in exchange(a, b, Message(1, A, B, 0x88B5, bytes(100))):
        b.receive(d, p.now)
    y = exchange(b, a, Message(1, B, A, 0x88B5, bytes(300)))
    assert struct.unpack_from("!Q", y[0], 24) > struct.unpack_from("!Q", x[0], 24)
    for d in y + x:
        a.receive(d, p.now)
    assert a.counters["stale_ack"] == len(x) and a.counters["bad_ack"] == 0
    got = b"".join(e.recs.tobytes() for e in a.events() if isinstance(e, Received))
    assert got == b"".join(d[C.SHIM_BYTES:] for d in x + y)


def test_the_compiled_link_uses_the_recovery_constants():
    from daemons import _link
    assert (_link.OOO_MAX_MPS, _link.OOO_MAX_DATAGRAMS, _link.SACK_RANGES, _link.SACK_DUPTHRESH) == (
        C.OOO_MAX_MPS, C.OOO_MAX_DATAGRAMS, C.SACK_RANGES, C.SACK_DUPTHRESH)


@each_impl
def test_a_peer_with_a_larger_window_is_buffered_not_refused(impl):
    """Each end sizes its window to its own path's MTU: what a peer with a larger window
    sends ahead of a hole is kept (up to OOO_MAX_MPS), not dropped as out of window."""
    recv = impl(9, 0.0, rng=random.Random(10), window=100)
    send = impl(9, 0.0, rng=random.Random(11), window=5000, max_mps=100)
    now = 0.0
    for _ in range(5):
        now += 0.001
        for x, y in ((send, recv), (recv, send)):
            for d in x.handle_timer(now) + x.datagrams(now):
                y.receive(d, now)
    assert send.up and recv.up
    send.enqueue(1, Message(1, A, B, 0x88B5, bytes(20000)).records())
    now += 0.001
    out = [d for d in send.datagrams(now) if sequenced(d)]
    assert len(out) > 3
    for d in out[1:]:
        recv.receive(d, now)
    assert recv.counters["out_of_window"] == 0 and recv.counters["out_of_order"] == len(out) - 1
    recv.receive(out[0], now)
    assert recv.counters["rx_mps"] >= sum((len(d) - C.SHIM_BYTES) // C.MP_BYTES for d in out)


@each_impl
def test_the_out_of_order_buffer_holds_at_most_ooo_max_datagrams(impl):
    recv = impl(9, 0.0, rng=random.Random(10))
    send = impl(9, 0.0, rng=random.Random(11), window=10000, max_mps=1)
    now = 0.0
    for _ in range(5):
        now += 0.001
        for x, y in ((send, recv), (recv, send)):
            for d in x.handle_timer(now) + x.datagrams(now):
                y.receive(d, now)
    extra = 50
    for _ in range(2):
        send.enqueue(1, Message(1, A, B, 0x88B5, bytes(16 * (C.OOO_MAX_DATAGRAMS + extra))).records())
    now += 0.001
    out = [d for d in send.datagrams(now) if sequenced(d)]
    assert len(out) > C.OOO_MAX_DATAGRAMS + extra
    before = recv.counters["rx_mps"]
    for d in out[1:]:
        recv.receive(d, now)
    assert recv.counters["out_of_order"] == len(out) - 1
    assert recv.counters["ooo_buffer_full"] == len(out) - 1 - C.OOO_MAX_DATAGRAMS
    recv.receive(out[0], now)
    assert recv.counters["rx_mps"] - before == 1 + C.OOO_MAX_DATAGRAMS
    assert recv.counters["ooo_delivered_mps"] == C.OOO_MAX_DATAGRAMS
