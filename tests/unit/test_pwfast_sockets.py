"""pktwayd._pwfast at its sockets' edges, through the glue pktwayd runs (fastpath.RouterFast,
fastpath.IpFast): every packet a burst takes is counted either sent (or queued) or dropped
with a reason, whatever the socket does; a frame longer than the loop takes is dropped and
counted, never handled cut short; a gsnd gone is an error, never SIGPIPE; a full socket is
waited for (without the GIL), and what still has no room is held, nothing more read, until
it went (back-pressure to gsnd, no copy, no Python path)."""

from __future__ import annotations

import errno
import socket
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import trio

from daemons.ulpclient import AsyncUlpClient
from pktwayd import fastpath
from pktwayd._pwfast import Router
from pktwayd.eep import Packet
from tests.unit.test_pw_ip import v4
from tests.unit.test_pwfast_differential import (BURST, ET, FRAME_MAX, H_A, H_B, ME, PEER, ROUTER_ULA, ULA, ip_loop,
                                                 ip_node, pair, recv_frame, router)


def plain(i: int, size: int = 800) -> bytes:
    """A RECV frame off SAN A the router forwards itself (to H_B on SAN B)."""
    return recv_frame(ULA[H_A], Packet(dt=H_B, sa=H_A, pt=1, data=bytes([i]) * size).encode())


def router_fast(mtu: int = 8192):
    """RouterFast over two socket pairs: (fast, half A, half B, gsnd A's end, gsnd B's end)."""
    a, b = pair(mtu_a=mtu, mtu_b=mtu)
    socks = [*socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET),
             *socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)]
    for s in (socks[1], socks[3]):
        s.setblocking(False)
    ha = SimpleNamespace(engine=a, client=AsyncUlpClient(socks[1]))
    hb = SimpleNamespace(engine=b, client=AsyncUlpClient(socks[3]))
    fast = fastpath.RouterFast([ha, hb])  # type: ignore[list-item]
    fast.attach()
    return fast, ha, hb, socks[0], socks[2]


def drain(fast, half) -> list:
    async def run():
        return fast.drain(0)(half.client)
    return trio.run(run)


def test_a_refused_send_is_counted_and_the_rest_of_the_burst_still_goes():
    fast, ha, hb, gsnd_a, gsnd_b = router_fast()
    hb.client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # doubled: 8192; a larger frame is refused
    frames = [plain(0), plain(1, 16000), plain(2), plain(3)]
    for f in frames:
        gsnd_a.send(f)
    assert drain(fast, ha) == []
    gsnd_b.setblocking(False)
    got = [gsnd_b.recv(FRAME_MAX) for _ in range(3)]
    assert [g[-800:-8] for g in got] == [f[-800:-8] for f in (frames[0], frames[2], frames[3])]
    b = hb.engine.counters
    assert (b["tx_packets"], b["tx_error_EMSGSIZE"], b["l3_forwarded"], ha.engine.counters["l3_forwarded"]) == (3, 1, 4, 4)


def test_gsnd_gone_on_the_way_out_drops_every_frame_counted():
    fast, ha, hb, gsnd_a, gsnd_b = router_fast()
    for i in range(6):
        gsnd_a.send(plain(i))
    gsnd_b.close()
    assert drain(fast, ha) == []  # the other half's socket: its own session sees it end, not half A's
    b = hb.engine.counters
    assert (b["tx_packets"], b["tx_error_EPIPE"], b["l3_forwarded"]) == (0, 6, 6)


def test_pw0_counts_only_what_went_and_drops_the_rest_counted():
    core = ip_node()
    loop, (gsnd, ulp, tun_far, tun) = ip_loop(core)
    ipf = fastpath.IpFast(core)
    ipf.loop, ipf.client, ipf.peers = loop, AsyncUlpClient(ulp), fastpath.ip_peers(core)
    for i in range(5):
        tun_far.send(v4("10.77.0.1", "10.77.0.2", 100 + i))
    gsnd.close()
    try:
        ipf.tun_burst(SimpleNamespace(counters=core.counters))  # type: ignore[arg-type]
    except OSError as e:
        assert e.errno == errno.EPIPE
    else:
        raise AssertionError("my own ULP socket broken: the session must end")
    assert (core.counters["tx_ipv4"], core.counters["tx_error_EPIPE"]) == (0, 5)


def test_an_oversized_frame_is_dropped_and_counted_never_forwarded_cut_short():
    a, b = pair(mtu_a=16384, mtu_b=16384)
    gsnd_a, mine_a = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    gsnd_b, mine_b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    frame_max = 10 + 8 * 2000  # a frame of a whole number of EEP words fits it exactly
    r = Router(mine_a, mine_b, ET, frame_max, BURST)
    r.set_table(fastpath.router_table(a, b), sorted(a.routers))
    gsnd_a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    head = plain(7, frame_max - 10 - 24)  # a forwardable frame of exactly frame_max bytes ...
    assert len(head) == frame_max and r.classify(head) is not None
    gsnd_a.send(head + bytes(64))  # ... with more behind it: cut at frame_max it would look whole
    gsnd_a.send(plain(8))
    sent, slow, errs, eof, rerr, oversized, held = r.burst(64, 0)
    assert (sent, slow, errs, oversized, held) == (1, [], [], 1, 0)
    gsnd_b.setblocking(False)
    assert gsnd_b.recv(1 << 20) == r.classify(plain(8))
    loop, (gsnd, *_) = ip_loop(ip_node())
    gsnd.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    gsnd.send(recv_frame(ROUTER_ULA, Packet(dt=ME, sa=PEER, pt=0x0800, data=v4("10.77.0.2", "10.77.0.1", 100)).encode())
              + bytes(FRAME_MAX))
    assert loop.rx_burst(64)[7] == 1


SIGPIPE_PROBE = """
import signal, socket, sys
sys.path.insert(0, {root!r})
signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # as a process that does not ignore it (Python's runtime does)
from pktwayd._pwfast import Router
from tests.unit.test_pwfast_differential import pair, router
from tests.unit.test_pwfast_sockets import plain
from pktwayd import fastpath
a, b = pair(mtu_a=8192, mtu_b=8192)
gsnd_a, mine_a = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
gsnd_b, mine_b = socket.socketpair(socket.AF_UNIX, socket.{kind})
r = Router(mine_a, mine_b, {et}, {frame_max}, {burst})
r.set_table(fastpath.router_table(a, b), sorted(a.routers))
gsnd_a.send(plain(1))
gsnd_b.close()
print(r.burst(64, 0)[2])
"""


def test_a_peer_gone_is_an_error_never_sigpipe():
    root = str(__import__("pathlib").Path(__file__).resolve().parents[2])
    for kind in ("SOCK_SEQPACKET", "SOCK_STREAM"):  # gsnd's ULP sockets are SEQPACKET; a stream one must not kill either
        code = SIGPIPE_PROBE.format(root=root, kind=kind, et=ET, frame_max=FRAME_MAX, burst=BURST)
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, (kind, p.returncode, p.stderr[-500:])
        assert p.stdout.strip() == f"[{errno.EPIPE}]", (kind, p.stdout)


def test_a_full_socket_is_waited_for_and_nothing_falls_back():
    a, b = pair(mtu_a=32768, mtu_b=32768)
    r, (gsnd_a, _, gsnd_b, out) = router(a, b)
    gsnd_a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    out.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32768)  # room for 2-3 frames
    frames = [plain(i, 20000) for i in range(10)]  # a Unix datagram queue holds 10
    for f in frames:
        gsnd_a.send(f)
    got: list[bytes] = []

    def gsnd_b_reads_late():
        time.sleep(0.05)
        gsnd_b.settimeout(5)
        while len(got) < 10:
            got.append(gsnd_b.recv(1 << 20))

    t = threading.Thread(target=gsnd_b_reads_late)
    t0 = time.monotonic()
    t.start()
    sent, slow, errs, eof, rerr, oversized, held = r.burst(64, 1_000_000)
    t.join()
    assert time.monotonic() - t0 >= 0.05  # it did run out of room, and waited
    assert (sent, slow, errs, held) == (10, [], [], 0)
    assert got == [r.classify(f) for f in frames]
    for f in frames:  # nobody reads now: after the wait, what had no room is held
        gsnd_a.send(f)
    t0 = time.monotonic()
    sent, slow, errs, eof, rerr, oversized, held = r.burst(64, 20_000)
    assert time.monotonic() - t0 >= 0.02 and held and sent + held == 10


def test_what_was_held_goes_out_while_nothing_comes_in():
    """pktwayd's own loop (RouterFast.send_held) sends the held frames once gsnd B reads,
    counted then, with no new frame off SAN A to prompt a burst."""
    fast, ha, hb, gsnd_a, gsnd_b = router_fast(mtu=32768)
    hb.client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32768)
    gsnd_a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    frames = [plain(i, 20000) for i in range(6)]
    for f in frames:
        gsnd_a.send(f)
    got: list[bytes] = []

    async def run():
        assert fast.drain(0)(ha.client) == []
        held = fast.loops[0].held()
        assert held and hb.engine.counters["tx_packets"] == 6 - held
        async with trio.open_nursery() as nursery:
            nursery.start_soon(fast.send_held, 0)
            gsnd_b.setblocking(False)
            with trio.fail_after(5):
                while len(got) < 6:
                    await trio.lowlevel.wait_readable(gsnd_b)
                    got.append(gsnd_b.recv(FRAME_MAX))
                while fast.loops[0].held():
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()

    trio.run(run)
    assert [g[-20000:-8] for g in got] == [f[-20000:-8] for f in frames]
    assert hb.engine.counters["tx_packets"] == 6 and ha.engine.counters["l3_forwarded"] == 6


def test_frames_held_when_a_client_changes_are_counted_lost():
    fast, ha, hb, gsnd_a, gsnd_b = router_fast(mtu=32768)
    hb.client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32768)
    gsnd_a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    for i in range(6):
        gsnd_a.send(plain(i, 20000))
    assert drain(fast, ha) == []
    held = fast.loops[0].held()
    assert held and hb.engine.counters["tx_packets"] == 6 - held
    fast.attach()
    assert hb.engine.counters["tx_dropped_reconnect"] == held and fast.loops[0].held() == 0


def later(sock: socket.socket, frames: list[tuple[float, bytes]]) -> threading.Thread:
    """A thread that sends each frame at its time (seconds from now)."""
    def run():
        t0 = time.monotonic()
        for at, f in frames:
            time.sleep(max(0.0, t0 + at - time.monotonic()))
            sock.send(f)
    t = threading.Thread(target=run)
    t.start()
    return t


def test_a_burst_lingers_for_more_until_python_must_act():
    a, b = pair(mtu_a=8192, mtu_b=8192)
    r, (gsnd_a, _, gsnd_b, mine_b) = router(a, b)
    slow_frame = recv_frame(ULA[H_A], Packet(dt=0x7777, sa=H_A, pt=1).encode())  # unknown: the engine's
    linger, whole = 300_000, 1_000_000
    gsnd_a.send(plain(0))
    t, t0 = later(gsnd_a, [(0.05, plain(1)), (0.1, plain(2))]), time.monotonic()
    sent, slow, errs, eof, rerr, oversized, held = r.burst(64, 0, linger, whole)
    t.join()
    assert (sent, slow) == (3, []) and time.monotonic() - t0 >= 0.1 + 0.3 * 0.9  # all three, then idle for linger
    t, t0 = later(gsnd_a, [(0.05, slow_frame), (0.6, plain(3))]), time.monotonic()
    gsnd_a.send(plain(4))
    sent, slow, *_ = r.burst(64, 0, linger, whole)
    assert (sent, slow) == (1, [slow_frame]) and time.monotonic() - t0 < 0.3  # Python's frame: back at once
    t.join()
    t, t0 = later(gsnd_b, [(0.05, plain(5))]), time.monotonic()  # the other half has input: back at once
    sent, slow, *_ = r.burst(64, 0, linger, whole)
    assert (sent, slow) == (1, []) and time.monotonic() - t0 < 0.3
    t.join()
    assert mine_b.recv(FRAME_MAX) == plain(5)  # what Python, serving the other half, reads
    t, t0 = later(gsnd_a, [(0.02 * i, plain(i)) for i in range(1, 30)]), time.monotonic()
    gsnd_a.send(plain(0))
    sent, *_ = r.burst(64, 0, linger, 200_000)  # frames keep coming: the slice ends it
    assert time.monotonic() - t0 < 0.5 and 3 <= sent < 30
    t.join()
    assert r.burst(64, 0, linger, whole)[0] + sent == 30
