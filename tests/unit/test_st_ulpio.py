"""stpd's ULP data path (stpd/ulpio.py) on real SEQPACKET sockets, and the core's
deferred file reads it relies on: bytes arrive whole and in order, a full socket
queues references (bounded, counted), a file's STU is read when it leaves, a file
that shrinks fails its transfer, not stpd."""

import os
import socket

import pytest
import trio
from hypothesis import given, settings, strategies as st

from daemons.ulpclient import AsyncUlpClient
from daemons.wire.ulp import HEADER, Frame, Op as UlpOp
from stpd import constants as K
from stpd.constants import ETHERTYPE_ST, Op
from stpd.core import StCore, TransferDone
from stpd.membuf import BufferGone, FdHandle, FileBuffer, FileSlice
from stpd.ulpio import UlpReceiver, UlpSender
from stpd.wire import decode
from tests.unit.test_st_core import A, B, Pair

ULA = bytes([2, 0, 0, 0, 0, 9])


def memfile(data: bytes) -> FileBuffer:
    fd = os.memfd_create("st")
    os.write(fd, data)
    return FileBuffer(FdHandle(fd), len(data))


def seqpacket(sndbuf: int | None = None) -> tuple[socket.socket, socket.socket]:
    ours, gsnd = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.setblocking(False)
    gsnd.setblocking(False)
    if sndbuf:
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    return ours, gsnd


def take(sock: socket.socket) -> list[bytes]:
    out = []
    while True:
        try:
            out.append(sock.recv(8 << 20))
        except BlockingIOError:
            return out


@given(st.binary(min_size=0, max_size=3000), st.integers(0, 3100), st.integers(0, 3100), st.integers(0, 3100))
@settings(max_examples=200, deadline=None)
def test_read_into_matches_slicing_and_fails_alike(data, length, start, n):
    """read_into (the sender's read) is the oracle's buf[a:b] into a caller's buffer:
    the same bytes, or BufferGone for the same truncated files; out of range is refused."""
    fb = memfile(data)
    try:
        fb.length = length  # the transfer's length; the file may be shorter (truncated)
        out = bytearray(n)
        if start + n > length:
            with pytest.raises(ValueError):
                fb.read_into(start, memoryview(out))
            return
        try:
            expect = fb[start : start + n]
        except BufferGone:
            with pytest.raises(BufferGone):
                fb.read_into(start, memoryview(out))
            return
        fb.read_into(start, memoryview(out))
        assert bytes(out) == expect == bytes(FileSlice(fb, start, start + n))
    finally:
        fb.handle.close()


def test_read_into_a_released_buffer_fails():
    fb = memfile(b"abc")
    fb.handle.close()
    with pytest.raises(BufferGone, match="released"):
        fb.read_into(0, memoryview(bytearray(1)))


def deferred_pair() -> Pair:
    p = Pair()
    p.a = StCore(0.0, params=p.a.p, timers=p.a.t, defer_file_reads=True)
    return p


def rts_cts(p: Pair) -> None:
    """The RTS to B, B's CTSs back to A: A's DATA are emitted, not yet read."""
    for _u, _vc, hdr, payload in p.a.outgoing():
        p.b.receive(A, hdr + bytes(payload), p.now)
    for _u, _vc, hdr, payload in p.b.outgoing():
        p.a.receive(B, hdr + bytes(payload), p.now)


def test_deferred_reads_carry_file_slices_and_deliver_the_same_bytes():
    p = deferred_pair()
    a_vc, b_vc = p.connect()
    data = os.urandom((5 << 20) + 999)
    src = memfile(data)
    sink = bytearray(len(data))
    p.b.post_receive(b_vc, sink, p.now)
    xid = p.a.send(a_vc, src, p.now)
    slices = 0
    for _ in range(10000):
        out = p.a.outgoing()
        for _u, _vc, hdr, payload in out:
            if decode(hdr)[0].op is Op.DATA:
                assert isinstance(payload, FileSlice) and p.a.sending(payload)
                slices += 1
            p.b.receive(A, hdr + bytes(payload), p.now)
        back = p.b.outgoing()
        for _u, _vc, hdr, payload in back:
            p.a.receive(B, hdr + bytes(payload), p.now)
        p.ev[A] += p.a.events()
        if not out and not back:
            break
    assert sink == data and slices >= len(data) // K.VC_CREDIT_STU[3]
    assert TransferDone(a_vc, xid, True, len(data)) in p.ev[A]
    src.handle.close()


def test_a_deferred_read_that_fails_ends_its_transfer_only():
    p = deferred_pair()
    a_vc, b_vc = p.connect()
    src = memfile(os.urandom(1 << 20))
    p.b.post_receive(b_vc, bytearray(1 << 20), p.now)
    xid = p.a.send(a_vc, src, p.now)
    rts_cts(p)
    datas = [(hdr, pl) for _u, _vc, hdr, pl in p.a.outgoing() if isinstance(pl, FileSlice)]
    assert datas
    os.ftruncate(src.handle.fd, 10)
    with pytest.raises(BufferGone) as exc:
        bytes(datas[0][1])
    p.a.source_failed(datas[0][1], str(exc.value), p.now)
    p.a.source_failed(datas[1][1], "again", p.now)  # a later STU of the same (ended) transfer: nothing more
    assert not p.a.sending(datas[-1][1])
    p.pump()
    done = [e for e in p.ev[A] if isinstance(e, TransferDone) and e.xid == xid]
    assert len(done) == 1 and not done[0].ok and done[0].reason.startswith("source file truncated")
    assert p.a.counters["tx_buffer_gone"] == 1 and p.b.counters["rx_END"] == 1
    assert a_vc in p.a.vcs  # the connection carries on
    src.handle.close()


def test_timers_changed_only_for_an_earlier_deadline():
    p = Pair()
    a_vc, b_vc = p.connect()
    p.a.timers_changed = False  # what the runner does before it sleeps
    assert not p.a.timers_changed
    p.b.post_receive(b_vc, bytearray(100), p.now)
    p.now += 1.0
    p.a.receive(B, b"", p.now)  # junk moves no deadline
    assert not p.a.timers_changed
    p.a.send(a_vc, bytes(100), p.now)  # a new transfer: a new, earlier deadline
    assert p.a.timers_changed
    p.a.timers_changed = True
    assert p.a.timers_changed


async def test_sender_sends_each_op_whole_and_queues_references_while_full():
    ours, gsnd = seqpacket(sndbuf=64 << 10)
    core = StCore(0.0)
    failures = []
    sender = UlpSender(core, on_failure=lambda: failures.append(1))
    sender.attach(ours)
    payload = os.urandom(40000)
    sent = []
    for i in range(40):  # far more than the socket holds
        hdr = bytes([i]) * 40
        sender.send((ULA, 3, hdr, payload))
        sent.append(hdr)
    assert sender.queue and all(e[2] is payload for e in sender.queue)  # references, not copies
    got = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender.run)
        with trio.fail_after(10):
            while len(got) < 40:
                got += take(gsnd)
                await trio.sleep(0.001)
        nursery.cancel_scope.cancel()
    for hdr, frame in zip(sent, got, strict=True):
        op, vc, et, ula = HEADER.unpack_from(frame)
        assert (op, vc, et, ula) == (UlpOp.SEND, 3, ETHERTYPE_ST, ULA)
        assert frame[HEADER.size : HEADER.size + 40] == hdr and frame[HEADER.size + 40 :] == payload
    assert not failures and not sender.queue


async def test_sender_reads_a_file_stu_when_it_leaves_and_reports_a_failed_read():
    ours, gsnd = seqpacket(sndbuf=300 << 10)  # room for two 256 KiB STUs
    p = deferred_pair()
    a_vc, b_vc = p.connect()
    data = os.urandom(4 << 20)  # one Block: 16 STUs
    src = memfile(data)
    p.b.post_receive(b_vc, bytearray(len(data)), p.now)
    xid = p.a.send(a_vc, src, p.now)
    rts_cts(p)
    failures = []
    sender = UlpSender(p.a, on_failure=lambda: failures.append(1))
    sender.attach(ours)
    items = [it for it in p.a.outgoing() if isinstance(it[3], FileSlice)]
    assert len(items) == 16
    for it in items:
        sender.send(it)
    frames = take(gsnd)
    stu = len(items[0][3])
    assert frames and all(f[HEADER.size + 40 :] == data[i * stu : (i + 1) * stu] for i, f in enumerate(frames))
    assert len(sender.queue) == 16 - len(frames)
    os.ftruncate(src.handle.fd, 0)  # the owner empties the file while STUs still wait
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender.run)
        with trio.fail_after(10):
            while not failures:
                frames += take(gsnd)
                await trio.sleep(0.001)
        nursery.cancel_scope.cancel()
    frames += take(gsnd)
    # at most the one STU read before the socket filled still left; the first read after
    # the truncation failed; every later STU of the ended transfer was skipped unread
    assert p.a.counters["tx_buffer_gone"] == 1 and not sender.queue
    assert len(frames) + 1 + p.a.counters["tx_skipped_transfer_ended"] == 16
    assert [e for e in p.a.events() if isinstance(e, TransferDone) and e.xid == xid and not e.ok]
    assert any(decode(hdr)[0].op is Op.END for _u, _vc, hdr, _p in p.a.outgoing())
    src.handle.close()


def test_sender_bounds_its_queue_and_drops_it_with_the_socket():
    ours, gsnd = seqpacket(sndbuf=16 << 10)
    core = StCore(0.0)
    sender = UlpSender(core, on_failure=lambda: None)
    sender.send((ULA, 1, bytes(40), b""))
    assert core.counters["tx_dropped_no_gsnd"] == 1
    sender.attach(ours)
    mutable = bytearray(b"x" * 100)
    n = K.ULP_TX_QUEUE_MAX + 100000
    for _ in range(n):
        sender.send((ULA, 1, bytes(40), memoryview(mutable)))
    queued, dropped = len(sender.queue), core.counters["tx_dropped_ulp_queue_full"]
    assert queued == K.ULP_TX_QUEUE_MAX and dropped > 0 and len(take(gsnd)) + queued + dropped == n
    mutable[:] = b"y" * 100  # a queued view of memory its owner may change was copied
    assert bytes(sender.queue[-1][2]) == b"x" * 100
    sender.attach(None)
    assert not sender.queue and core.counters["tx_dropped_ulp_lost"] == queued
    ours.close()
    gsnd.close()


async def test_receiver_hands_st_messages_over_in_place_and_returns_the_rest():
    ours, gsnd = seqpacket()
    gsnd.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, K.ULP_DRAIN_MAX_BYTES * 2)
    got = []
    rx = UlpReceiver(lambda ula, packet, now: got.append((ula, bytes(packet), isinstance(packet, memoryview))))
    client = AsyncUlpClient(ours)
    st1 = Frame(UlpOp.RECV, 3, ETHERTYPE_ST, ULA, b"\x01" * 300000).encode()
    st2 = Frame(UlpOp.RECV, 1, ETHERTYPE_ST, ULA, b"hdr").encode()
    status = Frame(UlpOp.STATUS, 1, ula=ULA).encode()
    other = Frame(UlpOp.RECV, 1, 0x88B5, ULA, b"not ST").encode()
    for f in (st1, status, st2, other):
        gsnd.send(f)
    out = rx.drain(client)
    assert got == [(ULA, b"\x01" * 300000, True), (ULA, b"hdr", True)]
    assert [f.op for f in out] == [UlpOp.STATUS, UlpOp.RECV] and out[1].payload == b"not ST"
    for _ in range(20):  # 20 STUs of 300,000 bytes: a burst stops after ULP_DRAIN_MAX_BYTES
        gsnd.send(st1)
    got.clear()
    rx.drain(client)
    assert len(got) == -(-K.ULP_DRAIN_MAX_BYTES // len(st1))
    rx.drain(client)
    assert len(got) == 20
    gsnd.close()
    with pytest.raises(Exception, match="closed"):
        rx.drain(client)
    ours.close()


@given(st.lists(st.one_of(
    st.binary(max_size=200),
    st.builds(lambda vc, body: Frame(UlpOp.RECV, vc, ETHERTYPE_ST, ULA, body).encode(),
              st.integers(0, 255), st.binary(max_size=200)),
    st.builds(lambda body: HEADER.pack(UlpOp.RECV, 3, ETHERTYPE_ST, ULA) + bytes([Op.DATA << 3]) + body,
              st.binary(max_size=200))), min_size=1, max_size=12))
@settings(max_examples=150, deadline=None)
def test_hostile_frames_never_reach_past_the_drain_and_the_core(frames):
    """Whatever gsnd's socket carries: ST Messages go to the core (which counts what it
    cannot use), other frames decode or raise DecodeError (the session reconnects);
    nothing else escapes and the core keeps working."""
    from daemons.wire.errors import DecodeError

    core = StCore(0.0)
    rx = UlpReceiver(core.receive)
    ours, gsnd = seqpacket()
    client = AsyncUlpClient(ours)
    try:
        for f in frames:
            if f:  # an empty SEQPACKET datagram reads as a hang-up, tested above
                gsnd.send(f)

        async def drain_all() -> None:
            while True:
                try:
                    if not rx.drain(client):
                        return
                except DecodeError:
                    continue

        trio.run(drain_all)
        assert core.vcs == {} and core.timer() > 0
    finally:
        ours.close()
        gsnd.close()
