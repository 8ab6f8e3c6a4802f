"""Sans-IO delivery to ULP clients: held in order while a client's socket is full,
bounded in time, drops counted and turned into notices; and the endpoint's
credit hold that makes the hold back-pressure the sender."""

from __future__ import annotations

import random
from collections import deque

from daemons import constants as C
from daemons.endpoint.core import Endpoint, MessageIn
from daemons.gsnd.delivery import Delivery, is_notice, notice_in, settle
from daemons.wire.message import Message
from daemons.wire.ulp import DropNotice, DropReason, Frame, Op

A, B = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")


class Sock:
    """A client socket that holds ``room`` frames until the client reads them."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.frames: deque[bytes] = deque()
        self.closed = False

    def send(self, key, frame: bytes) -> str:
        if self.closed:
            return "gone"
        if len(self.frames) >= self.room:
            return "full"
        self.frames.append(frame)
        return "ok"

    def read(self, n=1) -> list[Frame]:
        return [Frame.decode(self.frames.popleft()) for _ in range(min(n, len(self.frames)))]


def msg(k: int, vc=1, et=0x88B5) -> Message:
    return Message(vc, B, A, et, k.to_bytes(4, "big"))


def test_a_full_socket_holds_messages_in_order_and_the_vc():
    d, sock = Delivery(hold_s=1.0), Sock(2)
    d.add("c")
    for k in range(5):
        d.deliver(msg(k), ["c"], 0.0, sock.send)
    assert d.backlog("c") == 3 and d.held() == [False, True, False, False]
    got = sock.read(2)
    assert not d.pump("c", 0.5, sock.send)  # two more fit
    got += sock.read(5)
    assert d.pump("c", 0.6, sock.send)
    got += sock.read(5)
    assert [int.from_bytes(f.payload, "big") for f in got] == list(range(5))
    assert d.held() == [False] * 4 and not d.counters["rx_dropped_not_reading"]


def test_the_hold_is_bounded_then_drops_are_counted_noticed_and_not_held_again():
    d, sock = Delivery(hold_s=1.0, notice_interval=0.05), Sock(1)
    d.add("c")
    for k in range(4):
        d.deliver(msg(k), ["c"], 0.0, sock.send)
    d.deliver(msg(9, vc=3), ["c"], 0.2, sock.send)
    assert d.timer() == 1.0  # no progress since the backlog began at 0.0
    d.handle_timer(0.99)
    assert d.backlog("c") == 4
    d.handle_timer(1.0)
    assert d.backlog("c") == 0 and d.held() == [False] * 4
    assert d.counters["rx_dropped_not_reading"] == 4
    notices = d.take_notices(1.0)
    assert sorted(((n.ula, n.notice) for n in notices), key=lambda x: x[1].vc) == [
        (A, DropNotice(DropReason.NOT_READING, 1, 0x88B5, 3)), (A, DropNotice(DropReason.NOT_READING, 3, 0x88B5, 1))]
    # stalled: what it cannot take at once is dropped, not held
    d.deliver(msg(5), ["c"], 1.02, sock.send)
    assert d.backlog("c") == 0 and d.counters["rx_dropped_not_reading"] == 5
    assert d.take_notices(1.02) == []  # aggregated until the interval has passed
    assert d.timer() == 1.05
    assert [n.notice.count for n in d.take_notices(1.2)] == [1]
    sock.read(1)  # it reads again: held again
    d.deliver(msg(6), ["c"], 1.3, sock.send)
    d.deliver(msg(7), ["c"], 1.3, sock.send)
    assert d.backlog("c") == 1 and d.held()[1]


def test_a_client_that_leaves_loses_its_backlog_counted():
    d, sock = Delivery(), Sock(0)
    d.add("c")
    d.deliver(msg(1), ["c"], 0.0, sock.send)
    d.remove("c")
    assert d.counters["rx_dropped_client_gone"] == 1 and d.held() == [False] * 4
    assert d.take_notices(0.0)[0].notice.reason is DropReason.CLIENT_GONE


def test_the_notice_table_is_bounded():
    d, sock = Delivery(notice_keys=2), Sock(0)
    d.add("c")
    for k in range(3):
        d.deliver(Message(1, B, bytes([2, 0, 0, 0, 0, k]), 0x88B5, b"x"), ["c"], 0.0, sock.send)
    d.handle_timer(10.0)
    assert d.counters["notice_table_full"] == 1 and len(d.take_notices(10.0)) == 2


def test_notice_codec_rejects_garbage_and_round_trips():
    n = DropNotice(DropReason.NOT_READING, 2, 0x88B5, 7)
    assert DropNotice.decode(n.encode()) == n
    d = Delivery()
    for bad in (b"", n.encode()[:-1], b"\0" * len(n.encode())):
        assert notice_in(d, Message(0, A, B, C.ETHERTYPE_OUI_EXTENDED, bad)) is None
    assert sum(v for k, v in d.counters.items() if k.startswith("notice_bad_")) == 3


# --- the endpoint's credit hold -------------------------------------------------------

def _pair():
    now = [0.0]
    eps = [Endpoint(5, 0.0, ula=A, rng=random.Random(1)), Endpoint(5, 0.0, ula=B, rng=random.Random(2))]
    got = [[], []]

    def step(on_message=None):
        now[0] += 0.001  # as gsnd's runner: timers, input and its events, then output
        for i, ep in enumerate(eps):
            for dgram in ep.handle_timer(now[0]):
                eps[1 - i].link.receive(dgram, now[0])
        for i, ep in enumerate(eps):
            ep.process(now[0])
            for ev in ep.events():
                if isinstance(ev, MessageIn):
                    got[i].append(ev.message)
                    if on_message:
                        on_message(i, ev.message)
        for i, ep in enumerate(eps):
            for dgram in ep.link.datagrams(now[0]):
                eps[1 - i].link.receive(dgram, now[0])

    for _ in range(100):
        step()
    assert all(ep.ula for ep in eps)
    return eps, got, step, now


def test_held_credits_stop_the_sender_and_come_back_on_release():
    eps, got, step, _ = _pair()
    eps[1].hold(1, True)
    buf = C.VC_BUFFER_MPS[1]
    for _k in range(3 * buf // 2):  # one-micropacket Messages: 1.5 buffers' worth
        assert eps[0].send(1, B, 0x88B5, b"")
    for _ in range(50):
        step()
    assert len(got[1]) == buf  # exactly the credits the peer held, then it stopped
    assert eps[0].link.credits[1] == 0 and eps[0].link.queued(1) == buf // 2
    assert eps[1].withheld[1] == buf
    eps[1].hold(1, False)
    for _ in range(50):
        step()
    assert len(got[1]) == 3 * buf // 2 and eps[0].link.queued(1) == 0
    for _ in range(50):
        step()
    assert eps[0].link.credits == list(C.VC_BUFFER_MPS)
    assert all(ep.link.ledger.balanced() for ep in eps)


def test_settle_sends_a_notice_the_sender_turns_into_an_error_frame():
    eps, got, step, now = _pair()
    d, sock = Delivery(hold_s=0.05), Sock(0)
    d.add("c")
    errors = []

    def on_message(i, m):
        if i == 1:
            d.deliver(m, ["c"], now[0], sock.send)
            settle(d, eps[1], now[0])
        elif is_notice(m):
            errors.append(notice_in(Delivery(), m))

    for _k in range(3):
        eps[0].send(2, B, 0x88B5, b"hello")
    for _ in range(30):
        step(on_message)
    assert eps[1].holding[2] and eps[0].link.credits[2] < C.VC_BUFFER_MPS[2]
    d.handle_timer(now[0] + 1)
    settle(d, eps[1], now[0])
    for _ in range(30):
        step(on_message)
    assert not eps[1].holding[2]
    assert [(e.op, e.vc, e.ethertype, e.ula) for e in errors] == [(Op.ERROR, 2, 0x88B5, B)]
    assert errors[0].payload.startswith(b"3 Message(s) on VC2 dropped at 02:00:00:00:00:02")
    for _ in range(50):
        step(on_message)
    assert eps[0].link.credits == list(C.VC_BUFFER_MPS)


class ByteSock:
    """A Unix socket as the kernel charges it: sent records count against ``room``
    bytes until the client reads them (``unread`` is SIOCOUTQ)."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.frames: deque[bytes] = deque()

    def unread(self, key) -> int:
        return sum(map(len, self.frames))

    def send(self, key, frame: bytes) -> str:
        if self.unread(key) + len(frame) > self.room:
            return "full"
        self.frames.append(frame)
        return "ok"

    def read(self) -> Frame:
        return Frame.decode(self.frames.popleft())


def big(k: int, size: int) -> Message:
    return Message(3, B, A, 0x8181, (k.to_bytes(4, "big") * (size // 4 + 1))[:size])


def test_a_client_that_reads_slowly_keeps_its_backlog_past_the_bound():
    """Regression (1 GiB stp send under load): a busy client that reads, but never
    frees room for the next (large) frame within hold_s, is slow, not stalled."""
    sock = ByteSock(room=100_000)
    d = Delivery(hold_s=1.0, unread=sock.unread)
    d.add("c")
    for k in range(12):
        d.deliver(big(k, 7_990), ["c"], 0.0, sock.send)  # 12 frames of 8,000 bytes
    for k in range(12, 14):
        d.deliver(big(k, 39_990), ["c"], 0.0, sock.send)  # 40,000 bytes: wait
    assert d.backlog("c") == 2 and sock.unread("c") == 96_000
    got = []
    for t in (1.0, 2.0, 3.0, 4.0):  # one small frame a second: never room for a large one
        got.append(sock.read())
        assert not d.pump("c", t, sock.send)
        assert d.timer() <= t
        d.handle_timer(t)
        assert d.backlog("c") == 2 and not d.counters["rx_dropped_not_reading"]
    while d.backlog("c") or sock.frames:
        if sock.frames:
            got.append(sock.read())
        d.pump("c", 4.5, sock.send)
    assert [int.from_bytes(f.payload[:4], "big") for f in got] == list(range(14))
    assert d.counters["client_slow"] == 4 and not d.counters["client_stalled"]
    d.handle_timer(10.0)
    assert not d.counters["client_stalled"]


def test_a_gsnd_that_was_not_scheduled_does_not_blame_a_client_that_read():
    """gsnd's timer task may run before its writer after gsnd itself was off the CPU
    for longer than hold_s: the client read meanwhile, so nothing is dropped."""
    sock = ByteSock(room=2 * 40_010)
    d = Delivery(hold_s=1.0, unread=sock.unread)
    d.add("c")
    for k in range(5):
        d.deliver(big(k, 40_000), ["c"], 0.0, sock.send)
    sock.read()
    sock.read()  # the client emptied its socket while gsnd was not running
    d.handle_timer(2.5)  # gsnd wakes 2.5 s later: the timer first, the writer after
    assert d.backlog("c") == 3 and not d.counters["rx_dropped_not_reading"]
    assert d.pump("c", 2.5, sock.send) is False  # two fit, one waits
    assert d.backlog("c") == 1


def test_a_client_that_reads_nothing_still_loses_its_backlog_with_the_probe():
    sock = ByteSock(room=2 * 40_010)
    d = Delivery(hold_s=1.0, unread=sock.unread)
    d.add("c")
    for k in range(5):
        d.deliver(big(k, 40_000), ["c"], 0.0, sock.send)
    d.handle_timer(0.99)
    assert d.backlog("c") == 3
    d.handle_timer(1.0)
    assert d.backlog("c") == 0 and d.counters["rx_dropped_not_reading"] == 3
