"""ib/_ibfast.c's pumps on real descriptors: UDP sockets on loopback for the cables and a
datagram socket pair standing for a TAP (one frame per read and write, as a TAP gives).
Batches go out in order, the pump stops at the first frame or datagram the core must
see (after sending what it batched), foreign sources and socket errors are counted."""

from __future__ import annotations

import select
import socket
import struct
import time

import pytest

from ib import _ibfast, addr, packet
from ib.fastpath import SwitchFast
from ib.switchcore import SwitchCore

MAC = b"\x00\x02\xc9\x00\x00\x01"
LID, QPN, PKEY, QKEY = 2, 0x48, 0xFFFF, 0xB1B


def udp() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.setblocking(False)
    return s


def recv_all(s: socket.socket) -> list[bytes]:
    out = []
    while True:
        try:
            out.append(s.recv(65535))
        except BlockingIOError:
            return out


@pytest.fixture
def port():
    cable, peer = udp(), udp()
    tap, kernel = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    tap.setblocking(False)
    kernel.setblocking(False)
    p = _ibfast.Port(cable.fileno(), *peer.getsockname())
    p.configure(LID, True, MAC, [(tap.fileno(), True, QPN, PKEY, QKEY, 2044)])
    p.set_neighbours([(0, addr.remac(QPN, 3), 3, QPN, 0)])
    yield p, cable, peer, kernel
    for s in (cable, peer, tap, kernel):
        s.close()


def ip(to: bytes, data: bytes) -> bytes:
    return to + MAC + b"\x08\x00" + b"\x45" + bytes(19) + data


def test_tap_pump_batches_and_stops_at_the_first_frame_for_the_core(port):
    p, cable, peer, kernel = port
    remac = addr.remac(QPN, 3)
    arp = b"\xff" * 6 + MAC + b"\x08\x06" + bytes(28)
    frames = [ip(remac, b"a"), ip(remac, b"b"), arp, ip(remac, b"c")]
    for f in frames:
        kernel.send(f)
    assert p.tap_pump(0, 5.0, 64) == arp
    got = recv_all(peer)
    assert got == [p.tx(0, f, 5.0) for f in frames[:2]]  # (tx() here only re-encodes: no I/O)
    assert [packet.decode(g).payload[4:][-1:] for g in got] == [b"a", b"b"]
    assert p.tap_pump(0, 6.0, 64) is None
    assert [packet.decode(g).payload[-1:] for g in recv_all(peer)] == [b"c"]
    assert p.counters()[("iface0", "tx_frames")] == 3 + 2  # three pumped, two re-encoded above
    used = p.take_used()
    assert used == [(0, remac, 6.0)] and p.take_used() == []  # the last use


def test_cable_pump_delivers_counts_foreign_sources_and_hands_back_the_rest(port):
    p, cable, peer, kernel = port
    good = packet.UdPacket(slid=3, dlid=LID, pkey=PKEY, dqpn=QPN, sqpn=QPN, qkey=QKEY,
                           payload=b"\x08\x00\x00\x00" + b"\x45" + bytes(19)).encode()
    wrong_qkey = packet.UdPacket(slid=3, dlid=LID, pkey=PKEY, dqpn=QPN, sqpn=QPN, qkey=1, payload=b"\x08\x00\0\0x").encode()
    stranger = udp()
    stranger.sendto(good, cable.getsockname())
    for d in (good, wrong_qkey, good):
        peer.sendto(d, cable.getsockname())
    assert p.cable_pump(64) == wrong_qkey
    assert recv_all(kernel) == [MAC + addr.remac(QPN, 3) + b"\x08\x00" + b"\x45" + bytes(19)]
    assert p.cable_pump(64) is None
    assert len(recv_all(kernel)) == 1
    c = p.counters()
    assert c[("cable", "drop_foreign_source")] == 1 and c[("iface0", "rx_frames")] == 2
    stranger.close()


def test_socket_and_tap_errors_are_counted_not_raised(port):
    p, cable, peer, kernel = port
    broken = _ibfast.Port(-1, "127.0.0.1", 9)  # no socket: every send fails (EBADF)
    broken.configure(LID, True, MAC, [(kernel.fileno(), True, QPN, PKEY, QKEY, 2044)])
    broken.set_neighbours([(0, addr.remac(QPN, 3), 3, QPN, 0)])
    tap, other_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    tap.setblocking(False)
    broken.configure(LID, True, MAC, [(tap.fileno(), True, QPN, PKEY, QKEY, 2044)])
    other_end.send(ip(addr.remac(QPN, 3), b"lost"))
    assert broken.tap_pump(0, 1.0, 8) is None
    assert broken.counters()[("send", 9)] == 1
    assert broken.cable_pump(8) is None and broken.counters()[("recv", 9)] == 1
    p.configure(LID, True, MAC, [(-1, True, QPN, PKEY, QKEY, 2044)])  # TAP reads fail too
    assert p.tap_pump(0, 1.0, 8) is None
    assert p.counters()[("tap_read0", 9)] == 1
    tap.close()
    other_end.close()


def test_switch_pump_forwards_by_lft_and_hands_back_the_rest():
    s1, s2, h1, h2 = udp(), udp(), udp(), udp()
    sw = _ibfast.Switch([(1, s1.fileno(), *h1.getsockname()), (2, s2.fileno(), *h2.getsockname())])
    core = SwitchCore(0x1001, [1, 2])
    core.lft = {5: 2, 6: 1}
    fast = SwitchFast(core, sw)
    fast.sync()
    to5 = packet.UdPacket(slid=6, dlid=5, pkey=PKEY, dqpn=QPN, sqpn=QPN, qkey=QKEY, payload=b"x").encode()
    to6 = packet.UdPacket(slid=5, dlid=6, pkey=PKEY, dqpn=QPN, sqpn=QPN, qkey=QKEY, payload=b"y").encode()
    unrouted = packet.UdPacket(slid=5, dlid=9, pkey=PKEY, dqpn=QPN, sqpn=QPN, qkey=QKEY, payload=b"z").encode()
    for d in (to5, to5, to6, unrouted, to5):
        h1.sendto(d, s1.getsockname())
    assert sw.pump(1, 64) == to6  # a hairpin (6 is behind port 1): the core counts it
    assert sw.pump(2, 64) is None  # each port has its own ring: port 1's rest waits
    assert recv_all(h2) == [to5, to5]
    assert sw.pump(1, 64) == unrouted
    assert sw.pump(1, 64) is None
    assert recv_all(h2) == [to5]
    core_c, socks = fast.counters()
    assert core_c["ucast_forwarded"] == 3
    assert fast.on_cable(1, to5, 0.0) == [(2, to5)] and fast.on_cable(1, to6, 0.0) == []
    assert core.counters["drop_hairpin"] == 1
    for s in (s1, s2, h1, h2):
        s.close()


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError):
        _ibfast.Port(-1, "not-an-address", 9)
    p = _ibfast.Port(-1, "::1", 9)
    with pytest.raises(ValueError):
        p.configure(1, True, b"short", [])
    with pytest.raises(IndexError):
        p.tx(0, b"", 0.0)
    with pytest.raises(ValueError):
        _ibfast.Switch([(64, -1, "127.0.0.1", 9)])


def wait_slow(fd: int, take, n: int) -> list:
    got = []
    for _ in range(200):
        select.select([fd], [], [], 0.05)
        got += take()
        if len(got) >= n:
            return got
    raise AssertionError(f"only {got} handed back")


def test_the_port_thread_carries_frames_and_pauses_a_source_until_resumed(port):
    p, cable, peer, kernel = port
    remac = addr.remac(QPN, 3)
    arp = b"\xff" * 6 + MAC + b"\x08\x06" + bytes(28)
    fd = p.start(0.0, 64)
    try:
        for f in (ip(remac, b"a"), arp, ip(remac, b"b")):
            kernel.send(f)
        assert wait_slow(fd, p.take_slow, 1) == [(0, arp)]
        select.select([peer], [], [], 2)
        time.sleep(0.05)
        assert [packet.decode(g).payload[-1:] for g in recv_all(peer)] == [b"a"]  # b waits behind the ARP
        p.resume(0)
        select.select([peer], [], [], 2)
        assert [packet.decode(g).payload[-1:] for g in recv_all(peer)] == [b"b"]
        with pytest.raises(RuntimeError):
            p.tap_pump(0, 0.0, 1)  # the thread owns the descriptors
        junk = b"\x00" * 40
        peer.sendto(junk, cable.getsockname())
        assert wait_slow(fd, p.take_slow, 1) == [(-1, junk)]
        p.resume(-1)
    finally:
        p.stop()
    assert p.counters()[("iface0", "tx_frames")] == 2


def test_the_switch_thread_forwards_and_hands_back_the_rest():
    s1, s2, h1, h2 = udp(), udp(), udp(), udp()
    sw = _ibfast.Switch([(1, s1.fileno(), *h1.getsockname()), (2, s2.fileno(), *h2.getsockname())])
    sw.set_lft({5: 2})
    to5 = packet.UdPacket(slid=6, dlid=5, pkey=PKEY, dqpn=QPN, sqpn=QPN, qkey=QKEY, payload=b"x").encode()
    hello = b"\x00\x00\xff\xff" + bytes(30)
    fd = sw.start()
    try:
        for d in (to5, hello, to5):
            h1.sendto(d, s1.getsockname())
        assert wait_slow(fd, sw.take_slow, 1) == [(1, hello)]
        sw.resume(1)
        got = []
        for _ in range(100):
            select.select([h2], [], [], 0.05)
            got += recv_all(h2)
            if len(got) == 2:
                break
        assert got == [to5, to5]
    finally:
        sw.stop()
    for s in (s1, s2, h1, h2):
        s.close()


def gso_send(s: socket.socket, dgrams: list[bytes], to) -> None:
    """One sendmsg of equal-size datagrams with UDP_SEGMENT (the kernel may hand them to the
    receiver coalesced, with UDP_GRO on)."""
    s.sendmsg([b"".join(dgrams)], [(socket.SOL_UDP, 103, struct.pack("H", len(dgrams[0])))], 0, to)


def test_runs_of_equal_datagrams_go_out_and_come_in_whole(port):
    p, cable, peer, kernel = port
    remac = addr.remac(QPN, 3)
    frames = [ip(remac, bytes([k]) * 1000) for k in range(40)] + [ip(remac, b"short")]
    for f in frames:
        kernel.send(f)
    assert p.tap_pump(0, 1.0, 64) is None
    time.sleep(0.05)
    assert recv_all(peer) == [p.tx(0, f, 1.0) for f in frames]  # each its own datagram, in order
    src = udp()
    pkts = [packet.UdPacket(slid=3, dlid=LID, pkey=PKEY, dqpn=QPN, sqpn=QPN, qkey=QKEY,
                            payload=b"\x08\x00\x00\x00" + b"\x45" + bytes([k]) * 99).encode() for k in range(5)]
    gso_send(peer, pkts, cable.getsockname())
    gso_send(src, pkts, cable.getsockname())  # foreign: all five counted
    time.sleep(0.05)
    assert p.cable_pump(64) is None
    got = recv_all(kernel)
    assert got == [MAC + addr.remac(QPN, 3) + b"\x08\x00" + b"\x45" + bytes([k]) * 99 for k in range(5)]
    assert p.counters()[("cable", "drop_foreign_source")] == 5
    src.close()


def test_the_switch_forwards_a_coalesced_run_datagram_by_datagram():
    s1, s2, h1, h2 = udp(), udp(), udp(), udp()
    sw = _ibfast.Switch([(1, s1.fileno(), *h1.getsockname()), (2, s2.fileno(), *h2.getsockname())])
    sw.set_lft({5: 2})
    pkts = [packet.UdPacket(slid=6, dlid=5, pkey=PKEY, dqpn=QPN, sqpn=QPN, qkey=QKEY, payload=bytes([k]) * 64).encode()
            for k in range(6)]
    pkts[3] = packet.UdPacket(slid=6, dlid=9, pkey=PKEY, dqpn=QPN, sqpn=QPN, qkey=QKEY, payload=b"\x03" * 64).encode()
    gso_send(h1, pkts, s1.getsockname())
    time.sleep(0.05)
    assert sw.pump(1, 64) == pkts[3]  # unrouted, in the middle of the run: handed back there
    assert recv_all(h2) == pkts[:3]
    assert sw.pump(1, 64) is None
    assert recv_all(h2) == pkts[4:]
    for s in (s1, s2, h1, h2):
        s.close()
