import numpy as np
from hypothesis import given, settings, strategies as st

from daemons import constants as C
from daemons.link.link import LinkDown, Timers
from daemons.wire.message import Message
from daemons.wire.micropacket import MP_DTYPE
from daemons.wire.shim import Shim
from tests.unit.linkpair import Pair, each_impl

A, B = b"\x02" * 6, b"\x04" * 6


def msgs(rng, n, vcs=(0, 1, 2, 3), maxlen=3000):
    return [Message(vc, A, B, 0x88B5, rng.randbytes(rng.randrange(maxlen if vc else 2000)))
            for vc in vcs for _ in range(n)]


def per_vc(ms):
    return {vc: [m for m in ms if m.vc == vc] for vc in range(4)}


@each_impl
def test_bring_up_grants_initial_credits(impl):
    p = Pair(impl=impl)
    p.run(0.05)
    assert p.up()
    for link in p.links:
        assert link.credits == list(C.VC_BUFFER_MPS)
        assert link.ledger.balanced()


@each_impl
def test_credits_ride_free_on_the_data_micropackets_of_a_reply(impl):
    """A request and its reply (a ping): the reply's data micropackets carry the credits the
    request used, before the 1 ms credit delay; no datagram or micropacket of their own."""
    sent: list = [[], []]
    p = Pair(impl=impl, tap=lambda i, d: sent[i].append(d))
    p.run(0.05)
    request, reply = Message(1, A, B, 0x88B5, bytes(84)), Message(1, B, A, 0x88B5, bytes(84))
    p.links[0].enqueue(1, request.records())
    p.step(0.0001)  # the request crosses; B's reassembly releases its micropackets
    assert p.links[1].status()["credits_pending_return"][1] == len(request.records())
    sent[1].clear()
    p.links[1].enqueue(1, reply.records())
    p.step(0.0001)
    assert len(sent[1]) == 1 and len(sent[1][0]) == C.SHIM_BYTES + C.MP_BYTES * len(reply.records())
    assert p.links[1].status()["credits_pending_return"] == [0, 0, 0, 0]
    assert p.links[0].status()["credits_tx"][1] == C.VC_BUFFER_MPS[1]  # every credit the request used is home


@each_impl
def test_lossy_duplicating_reordering_path_delivers_exactly_once_in_order(impl):
    p = Pair(impl=impl, seed=3, drop=0.15, dup=0.1, reorder=0.2)
    p.run(0.1)
    sent = msgs(p.rng, 40)
    back = msgs(p.rng, 10)
    for k, m in enumerate(sent):  # one Message per step: many datagrams on the wire
        p.links[0].enqueue(m.vc, m.records())
        if k < len(back):
            p.links[1].enqueue(back[k].vc, back[k].records())
        p.step()
    p.run(5.0)
    assert per_vc(p.got[1]) == per_vc(sent)
    assert per_vc(p.got[0]) == per_vc(back)
    c = [link.counters for link in p.links]
    assert sum(x["rtx_mps"] for x in c) > 0  # the path really lost datagrams ...
    assert sum(x["duplicate"] + x["out_of_order"] for x in c) > 0  # ... and duplicated/reordered them
    for link in p.links:  # idle: every credit is home, nothing negative
        assert link.credits == list(C.VC_BUFFER_MPS) and link.ledger.balanced()


@each_impl
def test_sequence_wraps_far_beyond_8_bits(impl):
    p = Pair(impl=impl, seed=4)
    p.run(0.05)
    sent = msgs(p.rng, 60, vcs=(1,), maxlen=8000)
    for m in sent:
        p.links[0].enqueue(1, m.records())
    p.run(2.0)
    assert p.got[1] == sent
    assert p.links[1].expected > 10 * C.SEQ_MOD


@each_impl
def test_vc0_not_starved_by_bulk_vc3(impl):
    p = Pair(impl=impl, seed=5)
    p.run(0.05)
    bulk = Message(3, A, B, 0x8181, bytes(2_000_000))
    p.links[0].enqueue(3, bulk.records())
    ctl = Message(0, A, B, 0x8181, b"RTS")
    p.links[0].enqueue(0, ctl.records())
    p.step()
    p.step()
    assert p.got[1] and p.got[1][0] == ctl  # control overtook ~62,500 queued bulk micropackets
    p.run(3.0)
    assert p.got[1][-1] == bulk


@each_impl
def test_silence_brings_link_down_and_it_recovers_when_peer_returns(impl):
    t = Timers(dead_interval=0.3)
    p = Pair(impl=impl, timers=t)
    p.run(0.05)
    assert p.up()
    p.cut = True
    p.run(0.5)
    assert any(isinstance(e, LinkDown) and e.reason == "silent" for e in p.events[0])
    assert not p.links[0].up
    p.cut = False
    p.run(0.1)
    assert p.up()
    sent = msgs(p.rng, 3)
    for m in sent:
        p.links[0].enqueue(m.vc, m.records())
    p.run(1.0)
    assert per_vc(p.got[1]) == per_vc(sent)


@each_impl
def test_peer_restart_resets_link_and_traffic_resumes(impl):
    p = Pair(impl=impl, seed=6)
    p.run(0.05)
    p.links[1] = impl(9, p.now)  # the peer process was killed and restarted
    p.run(0.1)
    assert p.up()
    assert any(isinstance(e, LinkDown) and e.reason == "peer_reset" for e in p.events[0])
    sent = msgs(p.rng, 3)
    for m in sent:
        p.links[0].enqueue(m.vc, m.records())
    p.run(1.0)
    assert per_vc(p.got[1]) == per_vc(sent)


@each_impl
def test_credit_violation_by_peer_is_dropped_and_counted(impl):
    p = Pair(impl=impl, buffers=(4, 4, 4, 4))
    p.run(0.05)
    tx = p.links[0]
    tx.ledger.tx[1] += 100  # a misbehaving peer that ignores its credits
    m = Message(1, A, B, 0x88B5, bytes(1000))
    tx.enqueue(1, m.records())
    p.run(0.5)
    assert p.links[1].counters["credit_violation_vc1_mps"] > 0
    assert p.got[1] == []
    assert p.links[1].ledger.balanced()


@each_impl
def test_garbage_datagrams_are_counted_never_raise(impl):
    link = impl(9, 0.0)
    for blob in [b"", b"hello", bytes(72), Shim(1, 8, 0, 0, 0, 0).encode() + bytes(40),
                 Shim(1, 9, 0, 0, 0, 0).encode() + bytes(40)]:
        link.receive(blob, 0.0)
    c = link.counters
    assert c["bad_shim_shim"] and c["bad_shim_magic"] and c["wrong_cable"] and c["lcrc_error"]


@each_impl
@settings(max_examples=60, deadline=None)
@given(st.binary(min_size=32, max_size=400), st.integers(0, 2**32))
def test_fuzzed_datagrams_never_raise(impl, blob, seed):
    p = Pair(impl=impl, seed=seed % 1000)
    p.run(0.02)
    good = Shim(1, 9, p.links[0].my_nonce, p.links[1].my_nonce, 0, 0).encode()
    p.links[1].receive(good + blob, p.now)
    p.links[1].receive(blob, p.now)


@each_impl
def test_unknown_vc_records_survive_counters(impl):
    recs = np.zeros(0, MP_DTYPE)
    link = impl(1, 0.0)
    link.enqueue(2, recs)
    assert link.queued(2) == 0


@each_impl
def test_simultaneous_resets_converge(impl):
    a, b = impl(9, 0.0), impl(9, 0.0)
    ra, rb = a.datagrams(0.0), b.datagrams(0.0)  # both RESETs are on the wire before either arrives
    for d in ra:
        b.receive(d, 0.001)
    for d in rb:
        a.receive(d, 0.001)
    for _ in range(3):
        for x, y in ((a, b), (b, a)):
            for d in x.datagrams(0.002):
                y.receive(d, 0.002)
    assert a.up and b.up
    assert a.peer_nonce == b.my_nonce and b.peer_nonce == a.my_nonce
    assert a.counters["stale_nonce"] == b.counters["stale_nonce"] == 0



@each_impl
def test_datagrams_hold_at_most_max_mps_micropackets(impl):
    """A link told the underlay carries 36 micropackets per datagram never builds a
    bigger one, and a lossy path still delivers everything in order."""

    sizes = []

    def tap(i, d):
        if d[3] & C.SHIM_FLAG_SEQUENCED:
            sizes.append((len(d) - C.SHIM_BYTES) // C.MP_BYTES)

    p = Pair(impl=impl, seed=5, drop=0.05, max_mps=36, tap=tap)
    p.run(0.05)
    sent = msgs(p.rng, 5)
    for m in sent:
        p.links[0].enqueue(m.vc, m.records())
    p.run(3.0)
    assert sizes and max(sizes) == 36
    assert per_vc(p.got[1]) == per_vc(sent)
    for bad in (0, C.MAX_DATAGRAM_MPS + 1):
        try:
            impl(3, 0.0, max_mps=bad)
        except ValueError:
            continue
        raise AssertionError(f"max_mps={bad} accepted")


@each_impl
def test_enqueue_takes_a_strided_view(impl):
    """A non-contiguous view of records (every other micropacket) is queued as is."""
    p = Pair(impl=impl, seed=8)
    p.run(0.05)
    m = Message(1, A, B, 0x88B5, bytes(range(200)))
    recs = m.records()
    both = np.empty(2 * len(recs), MP_DTYPE)
    both[0::2] = recs
    p.links[0].enqueue(1, both[0::2])
    p.run(0.2)
    assert p.got[1] == [m]


@each_impl
def test_max_mps_can_change_on_a_live_link(impl):
    """The underlay's MTU may be learnt later: a smaller max_mps applies to the next datagrams."""
    sizes = []
    p = Pair(impl=impl, seed=2, tap=lambda i, d: d[3] & C.SHIM_FLAG_SEQUENCED and sizes.append(
        (len(d) - C.SHIM_BYTES) // C.MP_BYTES))
    p.run(0.05)
    for link in p.links:
        link.max_mps = 10
    sizes.clear()  # the initial credit grants went out before
    m = Message(1, A, B, 0x88B5, bytes(3000))
    p.links[0].enqueue(1, m.records())
    p.run(0.5)
    assert p.got[1] == [m] and sizes and max(sizes) <= 10


def _stall_peer(p: Pair, seconds: float, dt: float = 0.001) -> list:
    """Link 1 is off the CPU for ``seconds``: it reads and sends nothing, while what
    link 0 sends waits for it (its UDP socket buffer); returns link 0's events."""
    queued, events = [], []
    for _ in range(int(seconds / dt)):
        p.now += dt
        queued += p.links[0].handle_timer(p.now) + p.links[0].datagrams(p.now)
        events += p.links[0].events()
    for d in queued:
        p.links[1].receive(d, p.now)
    return events


def test_a_peer_late_to_acknowledge_backs_off_the_retransmissions_and_keeps_the_link():
    """Regression (1 GiB stp send under load, switch port link_down_rtx_limit): a
    peer process that is not scheduled for 0.8 s (under the 1 s dead interval) used
    to be reset after 9 x 20 ms with the whole window resent every 20 ms."""
    p = Pair(seed=6)
    p.run(0.05)
    m = Message(3, A, B, 0x8181, bytes(200_000))
    p.links[0].enqueue(3, m.records())
    events = _stall_peer(p, 0.8)
    assert not any(isinstance(e, LinkDown) for e in events) and p.links[0].up
    # five timeouts in 0.8 s, not forty (the RTO, then 40, 80, 160, 320 ms): the first
    # resends the oldest datagram only, the others all four
    assert p.links[0].counters["rtx_mps"] == C.MAX_DATAGRAM_MPS + 4 * len(m.records())
    p.run(1.0)
    assert p.got[1] == [m] and p.up()
    assert p.links[0].rtx_deadline is None and p.links[0].rtx_count == 0


def test_a_peer_that_never_acknowledges_still_resets_the_link_after_the_limit():
    """The bound stays: 8 timeouts without progress still reset the link (here with
    a long dead interval, so that the silent-peer rule does not act first)."""
    p2 = Pair(seed=8, timers=Timers(dead_interval=60.0, keepalive=0.1))
    p2.run(0.05)
    p2.links[0].enqueue(3, Message(3, A, B, 0x8181, bytes(1000)).records())
    p2.cut = True
    p2.run(4.2)
    assert p2.links[0].up  # 20+40+...+640 ms + 2 x 1 s
    p2.run(0.2)
    assert p2.links[0].counters["link_down_rtx_limit"] == 1
