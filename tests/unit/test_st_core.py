"""The ST endpoint stepped by hand: two cores exchanging operations directly."""

import struct

import pytest
from hypothesis import given, strategies as st

from daemons.wire.errors import DecodeError
from stpd.constants import NO_ID, Flag, Function, Op
from stpd.core import (Accepted, Closed, Connected, OpDone, RegionReady, StatusReply, StCore, Timers,
                       TransferDone, Params)
from stpd.wire import Header, checksum, decode, decode_options, encode_options

A, B = b"\x02\x00\x00\x00\x00\x0a", b"\x02\x00\x00\x00\x00\x0b"


class Pair:
    def __init__(self, params=Params(), timers=Timers()):
        self.a, self.b = StCore(0.0, params=params, timers=timers), StCore(0.0, params=params, timers=timers)
        self.now = 0.0
        self.ev = {A: [], B: []}
        self.cut = False
        self.wire = []  # every op that crossed

    def pump(self, rounds=50):
        for _ in range(rounds):
            moved = False
            for me, core, other, _peer in ((A, self.a, self.b, B), (B, self.b, self.a, A)):
                for _ula, _vc, hdr, payload in core.outgoing():
                    moved = True
                    self.wire.append((me, decode(hdr)[0].op))
                    if not self.cut:
                        other.receive(me, hdr + bytes(payload), self.now)
                self.ev[me] += core.events()
            if not moved:
                return

    def tick(self, dt):
        self.now += dt
        self.a.handle_timer(self.now)
        self.b.handle_timer(self.now)
        self.pump()

    def connect(self, uport=7):
        self.b.listen(uport)
        vid = self.a.connect(B, uport, self.now)
        self.pump()
        acc = [e for e in self.ev[B] if isinstance(e, Accepted)][-1]
        assert Connected(vid) in self.ev[A]
        return vid, acc.vc


def test_header_vectors_and_validation():
    h = Header(Op.RTS, Flag.INTERRUPT | Flag.SEND_STATE, dc=3, param=8, d_port=5, s_port=7, d_key=0x1234, mx=22,
               d_id=NO_ID, s_id=42).with_t_len(1 << 30)
    raw = h.encode()
    assert raw.hex() == "b063000800050007000012340000001600000000000000000000000040000000ffffffff0000002a"
    assert decode(raw) == (h, b"")
    fo = Header(Op.GET, Flag.INTERRUPT, function=Function.INCREMENT).encode()
    assert fo[:2] == b"\xa9\x40"
    for bad, field in [(b"\x00" * 39, "header"), (b"\x30\x00" + bytes(38), "Op"),
                       (b"\xac\x00" + bytes(38), "Function"), (b"\xb1\x00" + bytes(38), "Function")]:
        with pytest.raises(DecodeError) as ei:
            decode(bad)
        assert ei.value.field == field
    body = bytearray(Header(Op.NOP).encode())
    body[12:14] = struct.pack(">H", checksum(bytes(body)))
    assert decode(bytes(body))[0].op is Op.NOP
    body[20] ^= 1
    with pytest.raises(DecodeError):
        decode(bytes(body))
    assert decode_options(encode_options([(5, b"\x00\x01"), (4, b"oops")])) == [(5, b"\x00\x01"), (4, b"oops")]


@given(st.binary(max_size=120))
def test_fuzz_codec_and_core_never_raise(blob):
    try:
        decode(blob)
    except DecodeError:
        pass
    core = StCore(0.0)
    core.receive(A, blob, 0.0)


def test_connect_refuse_and_three_way_teardown():
    p = Pair()
    p.a.connect(B, 99, 0.0)
    p.pump()
    assert any(isinstance(e, Closed) and "NO_LISTENER" in e.reason for e in p.ev[A])
    a_vc, b_vc = p.connect()
    p.a.close(a_vc, p.now)
    p.pump()
    assert [op for _, op in p.wire[-3:]] == [Op.RD, Op.DA, Op.DC]
    assert Closed(a_vc, "closed") in p.ev[A] and Closed(b_vc, "closed") in p.ev[B]
    assert not p.a.vcs and not p.b.vcs


def test_rc_retries_then_times_out():
    p = Pair()
    p.cut = True
    vid = p.a.connect(B, 7, 0.0)
    for _ in range(10):
        p.tick(1.0)
    assert sum(1 for _, op in p.wire if op is Op.RC) == 5
    assert Closed(vid, "connect timed out") in p.ev[A]


@pytest.mark.parametrize("size", [0, 1, 1000, (1 << 20) + 7, 9 << 20])
def test_write_pause_then_accept(size):
    p = Pair(Params(bufsize=16, max_stu=16, max_block=18, cts_req=2))
    a_vc, b_vc = p.connect()
    data = bytes((i * 7) & 0xFF for i in range(size))
    xid = p.a.send(a_vc, data, p.now)
    p.pump()
    assert any(op is Op.RA for _, op in p.wire)  # no receive posted yet: paused
    sink = bytearray(size + 10)
    p.b.post_receive(b_vc, sink, p.now)
    p.pump(5000)
    assert sink[:size] == data
    assert TransferDone(a_vc, xid, True, size) in p.ev[A]
    assert [e for e in p.ev[B] if isinstance(e, TransferDone)][0].ok
    assert not p.a.vcs[a_vc].tx and not p.b.vcs[b_vc].rx


def test_slots_never_exceeded_and_credit_returned():
    p = Pair(Params(slots=8, bufsize=12, max_stu=12, max_block=12, cts_req=8))
    a_vc, b_vc = p.connect()
    data = bytes(200_000)
    sink = bytearray(200_000)
    p.b.post_receive(b_vc, sink, p.now)
    p.a.send(a_vc, data, p.now)
    p.pump(20000)
    assert sink == data
    assert p.b.counters["rx_drop_slot_overrun"] == 0 == p.a.counters["rx_drop_slot_overrun"]
    assert p.a.counters["tx_RS"] > 0 and p.b.counters["tx_RSR"] > 0


def test_too_long_refused_and_wrong_key_dropped():
    p = Pair()
    a_vc, b_vc = p.connect()
    p.b.post_receive(b_vc, bytearray(10), p.now)
    p.a.send(a_vc, bytes(100), p.now)
    p.pump()
    done = [e for e in p.ev[A] if isinstance(e, TransferDone)][0]
    assert not done.ok and done.reason == "too_long"
    vc = p.b.vcs[b_vc]
    forged = Header(Op.NOP, d_port=vc.local_port, s_port=vc.peer_port, d_key=vc.local_key ^ 1).encode()
    p.b.receive(A, forged, p.now)
    assert p.b.counters["rx_drop_bad_tuple"] == 1


def test_read_via_rtr():
    p = Pair()
    a_vc, b_vc = p.connect()
    sink = bytearray(5000)
    xid = p.a.read(a_vc, sink, 5000, p.now)
    p.pump()
    req = [e for e in p.ev[B] if e.__class__.__name__ == "ReadRequested"][0]
    p.b.send(b_vc, b"r" * 5000, p.now, reply_to=req.rid)
    p.pump(1000)
    assert sink == b"r" * 5000 and TransferDone(a_vc, xid, True, 5000, incoming=True) in p.ev[A]


def test_region_put_get_fetchop_and_end():
    p = Pair()
    a_vc, b_vc = p.connect()
    region = bytearray(4096)
    p.b.expose(b_vc, region)
    p.a.request_region(a_vc, 4096, p.now)
    p.pump()
    ready = [e for e in p.ev[A] if isinstance(e, RegionReady)][0]
    assert ready.ok and ready.size == 4096
    rid = ready.rid
    put = p.a.put(a_vc, rid, 100, b"hello", p.now)
    p.pump()
    assert region[100:105] == b"hello" and OpDone(a_vc, put, True) in p.ev[A]
    assert p.a.put(a_vc, rid, 4095, b"xx", p.now) is None  # out of bounds, refused locally
    g = p.a.get(a_vc, rid, 100, 5, p.now)
    p.pump()
    assert OpDone(a_vc, g, True, data=b"hello") in p.ev[A]
    for _ in range(3):
        p.a.fetchop(a_vc, rid, 0, Function.INCREMENT, p.now)
    p.pump()
    vals = [e.value for e in p.ev[A] if isinstance(e, OpDone) and e.value is not None]
    assert vals == [0, 1, 2] and struct.unpack(">Q", region[:8])[0] == 3
    p.a.fetchop(a_vc, rid, 0, Function.CLEAR, p.now)
    p.pump()
    assert region[:8] == bytes(8)
    p.a.end(a_vc, rid, p.now)
    p.pump()
    assert not p.b.vcs[b_vc].regions and Op.END_ACK in [op for _, op in p.wire]


def test_fetchop_data_resent_until_foc():
    p = Pair()
    a_vc, b_vc = p.connect()
    region = bytearray(64)
    p.b.expose(b_vc, region)
    p.a.request_region(a_vc, 64, p.now)
    p.pump()
    rid = [e for e in p.ev[A] if isinstance(e, RegionReady)][0].rid
    p.a.fetchop(a_vc, rid, 8, Function.INCREMENT, p.now)
    # lose the first DATA: deliver the GET, drop what B answers
    for _ula, _vc, hdr, payload in p.a.outgoing():
        p.b.receive(A, hdr + bytes(payload), p.now)
    p.b.outgoing()
    p.tick(0.6)  # FOC timeout: B resends the DATA, A answers with FOC
    assert p.b.counters["fetchop_data_resent"] == 1
    assert struct.unpack(">Q", region[8:16])[0] == 1


def test_peer_vanishes_mid_transfer_then_memory_flat():
    """1,000 transfers whose peer vanishes: each ends in an error to the application,
    the VC is torn down, and memory does not grow."""
    import gc
    import tracemalloc

    a = StCore(0.0, params=Params(bufsize=12, max_stu=12, max_block=12))
    now, fails, sizes = 0.0, 0, []
    tracemalloc.start()
    for k in range(1000):
        b = StCore(now)  # a fresh peer each time; it dies mid-transfer
        b.listen(7)
        vid = a.connect(B, 7, now)
        for _ in range(4):
            for _u, _vc, hdr, payload in a.outgoing():
                b.receive(A, hdr + bytes(payload), now)
            for _u, _vc, hdr, payload in b.outgoing():
                a.receive(B, hdr + bytes(payload), now)
        a.send(vid, bytes(1 << 14), now)
        a.outgoing()  # the RTS is lost with the peer
        now += 11.0
        a.handle_timer(now)
        a.close(vid, now)
        for _ in range(4):
            now += 6.0
            a.handle_timer(now)
        a.outgoing()
        fails += sum(1 for e in a.events() if isinstance(e, TransferDone) and not e.ok and "timed out" in e.reason)
        if k in (99, 999):
            gc.collect()
            sizes.append(tracemalloc.get_traced_memory()[0])
    tracemalloc.stop()
    assert fails == 1000
    assert not a.vcs and not a.by_port and not a.rc_seen
    assert sizes[1] - sizes[0] < 64 * 1024, sizes  # flat: no per-transfer leak


def test_status_rs_rsr():
    p = Pair()
    a_vc, b_vc = p.connect()
    p.a.status(a_vc, p.now)
    p.pump()
    assert any(isinstance(e, StatusReply) for e in p.ev[A])


def test_refused_write_tells_the_receiver_whose_buffer_it_was():
    p = Pair()
    a_vc, b_vc = p.connect()
    small = bytearray(10)
    p.b.post_receive(b_vc, small, p.now)
    p.a.send(a_vc, bytes(100), p.now)
    p.pump()
    done = [e for e in p.ev[B] if isinstance(e, TransferDone)]
    assert len(done) == 1 and not done[0].ok and done[0].incoming and done[0].reason == "too_long"
    assert done[0].buf.obj is small


def test_unpost_withdraws_an_unused_receive():
    p = Pair()
    a_vc, b_vc = p.connect()
    buf = bytearray(100)
    p.b.post_receive(b_vc, buf, p.now)
    assert p.b.unpost(b_vc, buf) and not p.b.unpost(b_vc, buf)
    p.a.send(a_vc, bytes(50), p.now)
    p.pump()
    assert buf == bytearray(100) and p.b.vcs[b_vc].paused  # the write waits for a new receive


def test_file_buffers_truncated_fail_the_transfer_not_the_core(tmp_path):
    import os

    from stpd.membuf import FdHandle, FileBuffer

    p = Pair(Params(bufsize=12, max_stu=12, max_block=14))
    a_vc, b_vc = p.connect()
    fd = os.memfd_create("src")
    os.write(fd, os.urandom(1 << 16))
    src = FileBuffer(FdHandle(fd), 1 << 16)
    p.b.post_receive(b_vc, bytearray(1 << 16), p.now)
    xid = p.a.send(a_vc, src, p.now)
    os.ftruncate(fd, 100)
    p.pump(1000)
    done = [e for e in p.ev[A] if isinstance(e, TransferDone) and e.xid == xid][0]
    assert not done.ok and done.reason.startswith("source file truncated")
    assert p.a.counters["tx_buffer_gone"] == 1 and p.b.counters["rx_END"] == 1
    src.handle.close()
    with pytest.raises(Exception, match="released"):
        src[0:1]


@pytest.mark.parametrize("dc", [1, 2, 3])
def test_stus_fit_half_the_data_vcs_credit_buffer(dc):
    """Default parameters (1 MiB buffers and STUs, 4 MiB Blocks): every DATA on the
    data VC is at most half the receiving gsnd's buffer on that VC, every STU but a
    Block's last is exactly that size or ends a 1 MiB buffer, and the bytes arrive whole."""
    from daemons.constants import MP_DATA_BYTES, VC_BUFFER_MPS
    from stpd.constants import VC_CREDIT_STU, VC_MAX_ST_PAYLOAD

    p = Pair(Params(data_vc=dc))
    a_vc, b_vc = p.connect()
    size = (5 << 20) + 12345
    data = bytes((i * 13) & 0xFF for i in range(size))
    sink = bytearray(size)
    p.b.post_receive(b_vc, sink, p.now)
    xid = p.a.send(a_vc, data, p.now)
    stus = []
    for _ in range(5000):
        out = p.a.outgoing()
        for _ula, vc, hdr, payload in out:
            h = decode(hdr)[0]
            if h.op is Op.DATA:
                assert vc == dc
                stus.append(((h.bufx << 20) + h.offset + len(payload), len(payload), bool(h.flags & Flag.LAST)))
            p.b.receive(A, hdr + bytes(payload), p.now)
        back = p.b.outgoing()
        for _ula, _vc, hdr, payload in back:
            p.a.receive(B, hdr + bytes(payload), p.now)
        p.ev[A] += p.a.events()
        if not out and not back:
            break
    cap = min(VC_CREDIT_STU[dc], VC_MAX_ST_PAYLOAD[dc])
    assert VC_CREDIT_STU[dc] <= VC_BUFFER_MPS[dc] * MP_DATA_BYTES // 2
    assert max(n for _, n, _ in stus) == cap
    assert all(n == cap or end % (1 << 20) == 0 for end, n, last in stus if not last)  # or a buffer ends
    assert sink == data
    assert TransferDone(a_vc, xid, True, size) in p.ev[A]


def test_data_stu_is_a_view_of_the_message_not_a_copy():
    hdr = Header(Op.DATA, param=0, d_port=1, s_port=2, d_key=3).encode()
    packet = hdr + b"\x01\x02\x03"
    h, rest = decode(packet)
    assert h.op is Op.DATA and isinstance(rest, memoryview) and rest.obj is packet and rest == b"\x01\x02\x03"
    h, rest = decode(Header(Op.NOP).encode() + encode_options([(1, b"")]))
    assert isinstance(rest, bytes)


def test_file_receive_allocates_each_block_before_its_cts_and_never_grows_the_file(tmp_path):
    import os

    from stpd.membuf import FdHandle, FileBuffer

    p = Pair(Params(bufsize=16, max_stu=16, max_block=16, cts_req=2))
    a_vc, b_vc = p.connect()
    size = 5 << 16
    fd = os.open(tmp_path / "dst", os.O_RDWR | os.O_CREAT)
    os.ftruncate(fd, size)
    assert os.fstat(fd).st_blocks == 0  # a hole
    p.b.post_receive(b_vc, FileBuffer(FdHandle(fd), size), p.now)
    data = os.urandom(size)
    p.a.send(a_vc, data, p.now)
    (_, _, rts, _), = p.a.outgoing()
    p.b.receive(A, rts, p.now)
    answers = p.b.outgoing()
    assert [decode(hdr)[0].op for _, _, hdr, _ in answers].count(Op.CTS) == 2
    assert os.fstat(fd).st_blocks * 512 >= 2 << 16  # the two granted Blocks, before any DATA
    os.ftruncate(fd, 3 << 16)  # the owner shrinks the file: later grants must not grow it
    for _, _, hdr, payload in answers:
        p.a.receive(B, hdr + bytes(payload), p.now)
    p.pump(1000)
    assert os.fstat(fd).st_size == 3 << 16
    done = [e for e in p.ev[B] if isinstance(e, TransferDone)][0]
    assert not done.ok and "truncated" in done.reason
    assert os.pread(fd, 2 << 16, 0) == data[: 2 << 16]
    os.close(fd)
