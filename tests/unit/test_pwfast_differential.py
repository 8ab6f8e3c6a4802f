"""pktwayd._pwfast against its oracles: the half-router pair (engine.Engine, twins) and
pw0's core (ipnode.IpNode).  Whatever the C code forwards must be exactly what the Python
path would send (same bytes, same counters); what it does not take goes back whole; its
bursts over real sockets keep order and hand back what the socket had no room for."""

from __future__ import annotations

import ipaddress
import os
import socket

import pytest
from hypothesis import given, strategies as st

from daemons.wire.ulp import HEADER, Op
from pktwayd import fastpath
from pktwayd._pwfast import Ip, Router
from pktwayd.constants import ADDR_BROADCAST, ADDR_HEY_YOU, ETHERTYPE_PKTWAY, PT
from pktwayd.eep import L2RH, OptField, Packet, Symbol
from pktwayd.engine import Engine
from pktwayd.ipnode import IpNode
from pktwayd.routing import HalfRouter, NodeEntry
from tests.unit.test_pw_ip import v4, v6

ET = ETHERTYPE_PKTWAY
RA, RB, RB2 = 0x50, 0x51, 0x52  # the pair's halves; RB2 another router on SAN B
H_A, H_B, H_B2 = 0x40, 0x60, 0x61
ULA = {H_A: bytes.fromhex("020000000040"), H_B: bytes.fromhex("020000000060"), H_B2: bytes.fromhex("020000000061"),
       RB2: bytes.fromhex("020000000052"), RA: bytes.fromhex("020000000050"), RB: bytes.fromhex("020000000051")}
FRAME_MAX, BURST = 70000, 1 << 20


def recv_frame(route: bytes, payload: bytes, op: int = Op.RECV, vc: int = 1, et: int = ET) -> bytes:
    return HEADER.pack(op, vc, et, route) + payload


def pair(mtu_a: int = 1024, mtu_b: int = 512) -> tuple[Engine, Engine]:
    """Half A on SAN 0x100 (host H_A), half B on 0x101 (hosts H_B, H_B2, router RB2), converged."""
    def entry(a, router=False):
        return NodeEntry(a, (L2RH(ULA[a]),), 1, router=router)
    hra = HalfRouter(RA, 0x100, mtu_a, RB, (NodeEntry(RA, (), 0, router=True), entry(H_A)), sn=1)
    hrb = HalfRouter(RB, 0x101, mtu_b, RA, (NodeEntry(RB, (), 0, router=True), entry(H_B), entry(H_B2),
                                            entry(RB2, router=True)), sn=1)
    hrs = {RA: hra, RB: hrb}
    q = [(hr.addr, dest, rt) for hr in hrs.values() for dest, rt in hr.start()]
    while q:  # flood the twins' RTs (RB2's router is not simulated: what goes to it is dropped)
        src, dest, rt = q.pop(0)
        q += [(dest, d2, rt2) for d2, rt2 in hrs[dest].receive(src, rt)] if dest in hrs else []
    a, b = Engine(hra), Engine(hrb)
    for e in (a, b):
        e.twin_alive, e.twin_heard = True, 0.0
    return a, b


def router(a: Engine, b: Engine) -> tuple[Router, list[socket.socket]]:
    socks = [*socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET),
             *socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)]
    r = Router(socks[1], socks[3], ET, FRAME_MAX, BURST)
    r.set_table(fastpath.router_table(a, b), sorted(a.routers))
    return r, socks


def python_forward(a: Engine, b: Engine, frame: bytes) -> bytes | None:
    """What the Python half pair sends for a frame off A's socket, if it is one SEND frame
    on B's SAN and nothing else; None otherwise."""
    ula, payload = frame[4:10], frame[HEADER.size:]
    acts = a.from_san_bytes(payload, "pw0", src_route=ula)
    if len(acts) != 1 or acts[0][0] != "twin":
        return None
    out = b.from_twin(acts[0][2])
    if len(out) != 1 or out[0][0] != "san":
        return None
    route = b.route_of(out[0][1])
    return None if route is None else HEADER.pack(Op.SEND, 1, ET, route) + out[0][2].encode("pw0")


addresses = st.sampled_from([H_A, H_B, H_B2, RA, RB, RB2, ADDR_HEY_YOU, ADDR_BROADCAST, 0xE00001, 0x7777, 0])
packets = st.builds(
    Packet, dt=addresses, sa=addresses, pt=st.sampled_from([PT.USER, PT.RRP, PT.ERR, 0x0800, 0x86DD]),
    te=st.integers(0, 3), data=st.binary(max_size=4200),
    prefix=st.sampled_from([(), (L2RH(ULA[H_B]),), (Symbol(1),)]),
    options=st.sampled_from([(), (OptField(5),), (OptField(9, b"x", True),)]),
    trailer=st.sampled_from([b"", bytes(8)]), tail=st.sampled_from([0, 0, 1, 1 << 63]),
    p=st.integers(0, 63), e=st.integers(0, 15), rz=st.integers(0, 127))


@given(packets, st.sampled_from([H_A, RB2, RA]), st.integers(0, 40), st.binary(max_size=8))
def test_router_forwards_exactly_what_the_engines_would(pkt, src, cut, junk):
    a, b = pair()
    r, _ = router(a, b)
    raw = pkt.encode()
    for payload in (raw, raw[:-cut] + junk if cut else raw):
        frame = recv_frame(ULA[src], payload)
        fast = r.classify(frame)
        before = (a.counters["l3_forwarded"], b.counters["l3_forwarded"])
        want = python_forward(a, b, frame)
        if fast is not None:
            assert fast == want
            assert (a.counters["l3_forwarded"], b.counters["l3_forwarded"]) == (before[0] + 1, before[1] + 1)


def test_router_takes_the_common_shape_and_leaves_the_rest():
    a, b = pair()
    r, _ = router(a, b)
    data = Packet(dt=H_B, sa=H_A, pt=0x0800, data=v4())
    assert r.classify(recv_frame(ULA[H_A], data.encode())) == HEADER.pack(Op.SEND, 1, ET, ULA[H_B]) + data.encode()
    for frame in (recv_frame(ULA[H_A], Packet(dt=H_B, sa=H_A, pt=1, data=bytes(8 * 600)).encode()),  # over B's MTU
                  recv_frame(ULA[H_A], Packet(dt=H_B, sa=H_A, pt=1, tail=1).encode()),  # EI set: the engine's
                  recv_frame(ULA[H_A], Packet(dt=0x7777, sa=H_A, pt=1).encode()),  # unknown: ERR/UNK
                  recv_frame(ULA[H_A], Packet(dt=RB, sa=H_A, pt=PT.RRP).encode()),  # for the router itself
                  recv_frame(ULA[H_A], data.encode(), et=0x0800),  # another EtherType
                  recv_frame(ULA[H_A], data.encode(), op=Op.STATUS),
                  recv_frame(ULA[H_A], data.encode()[:-1] + b"\x01"),  # TAIL not 0
                  recv_frame(ULA[H_A], data.encode())[:9], b""):
        assert r.classify(frame) is None, frame[:40]
    back, _ = router(b, a)  # B -> A: from a router of B's SAN, the engine follows its liveness
    assert back.classify(recv_frame(ULA[H_B], Packet(dt=H_A, sa=H_B, pt=1).encode())) is not None
    assert back.classify(recv_frame(ULA[RB2], Packet(dt=H_A, sa=RB2, pt=1).encode())) is None
    b.twin_alive = False  # the twin is not up yet: the engines bring it up
    assert fastpath.router_table(a, b) == []


def test_router_burst_over_sockets_keeps_order_and_counts():
    a, b = pair()
    r, (gsnd_a, _, gsnd_b, _) = router(a, b)
    frames = [recv_frame(ULA[H_A], Packet(dt=H_B if i % 3 else 0x7777, sa=H_A, pt=1, data=bytes([i]) * 800).encode())
              for i in range(9)]  # a Unix datagram queue holds 10
    gsnd_a.settimeout(5)
    for f in frames:
        gsnd_a.send(f)
    sent, slow, errs, eof, rerr, oversized, held = r.burst(64, 0)
    assert (sent, errs, eof, rerr, oversized, held) == (6, [], 0, 0, 0, 0)
    assert slow == [f for i, f in enumerate(frames) if i % 3 == 0]
    gsnd_b.setblocking(False)
    got = [gsnd_b.recv(FRAME_MAX) for _ in range(6)]
    assert got == [r.classify(f) for i, f in enumerate(frames) if i % 3]
    assert r.burst(64, 0) == (0, [], [], 0, 0, 0, 0)  # nothing waiting
    gsnd_a.close()
    assert r.burst(64, 0)[3] == 1  # gsnd went away: EOF


def test_router_holds_what_the_socket_had_no_room_for_and_reads_nothing_more():
    a, b = pair(mtu_a=8192, mtu_b=8192)
    r, (gsnd_a, _, gsnd_b, out) = router(a, b)
    gsnd_a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    gsnd_a.settimeout(5)
    out.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32768)  # the kernel doubles it: room for 2-3 frames
    frames = [recv_frame(ULA[H_A], Packet(dt=H_B, sa=H_A, pt=1, data=bytes([i]) * 20000).encode()) for i in range(9)]
    for f in frames[:6]:
        gsnd_a.send(f)
    sent, slow, errs, eof, rerr, oversized, held = r.burst(64, 0)
    assert slow == [] and errs == [] and held and sent + held == 6 and r.held() == held
    for f in frames[6:]:
        gsnd_a.send(f)
    assert r.burst(64, 0)[:2] == (0, []) and r.held() == held  # no room yet: nothing more read
    gsnd_b.setblocking(False)
    got = [gsnd_b.recv(FRAME_MAX) for _ in range(sent)]
    while len(got) < 9:  # gsnd reads: the held frames go first, then the rest is read
        s2, slow, errs, *_ = r.burst(64, 0)
        assert slow == [] and errs == []
        while True:
            try:
                got.append(gsnd_b.recv(FRAME_MAX))
            except BlockingIOError:
                break
    assert got == [r.classify(f) for f in frames] and r.held() == 0
    assert r.send_held() == (0, [], 0)


# --- pw0 ---------------------------------------------------------------------------------------
ME, PEER = 0x40, 0x60
ROUTER_ULA = bytes.fromhex("020000000050")
ips = st.sampled_from(["10.77.0.1", "10.77.0.2", "10.77.0.3", "224.0.0.1", "255.255.255.255"])
ip6s = st.sampled_from(["fd77::1", "fd77::2", "fd77::3", "ff02::1"])


def ip_node(limit: int | None = None, redirect: bool = False) -> IpNode:
    core = IpNode(ME, peers={"10.77.0.2": PEER, "fd77::2": PEER}, name=b"10.77.0.1")
    if limit is not None:
        core.route_mtu[PEER] = limit
    if redirect:
        core.redirects[PEER] = (0x70, 1e9)
    return core


def ip_loop(core: IpNode) -> tuple[Ip, list[socket.socket]]:
    ulp = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    tun = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    tun[1].setblocking(False)  # as pw0's TUN device is opened
    loop = Ip(tun[1].fileno(), ulp[1], ME, ROUTER_ULA, ET, FRAME_MAX, BURST, 65600)
    loop.set_peers(fastpath.ip_peers(core))
    return loop, [*ulp, *tun]


ip_packets = st.one_of(
    st.builds(lambda s, d, n: v4(s, d, n), ips, ips, st.integers(20, 3000)),
    st.builds(lambda s, d, n: v6(s, d, n), ip6s, ip6s, st.integers(40, 3000)),
    st.binary(max_size=100))


@given(ip_packets, st.integers(0, 30), st.sampled_from([None, 0, 1000, 65535]), st.booleans())
def test_pw0_tx_sends_exactly_what_ipnode_would(raw, cut, limit, redirect):
    core = ip_node(limit, redirect)
    loop, _ = ip_loop(core)
    raw = raw[: len(raw) - cut] if cut < len(raw) else raw
    fast = loop.tx_one(raw)
    before = dict(core.counters)
    acts = core.from_tun(raw, 0.0)
    if fast is not None:
        assert len(acts) == 1 and acts[0][0] == "pw" and acts[0][2] is None
        assert fast == HEADER.pack(Op.SEND, 1, ET, ROUTER_ULA) + acts[0][1].encode("pw0")
        changed = {k: v - before.get(k, 0) for k, v in core.counters.items() if v != before.get(k, 0)}
        assert changed == {("tx_ipv4" if raw[0] >> 4 == 4 else "tx_ipv6"): 1}
    elif not redirect and limit != 0 and len(acts) == 1 and acts[0][0] == "pw" and acts[0][1].dt == PEER:
        pytest.fail("a plain packet to a configured peer was left to Python")


rx_packets = st.builds(
    lambda dt, pt, ip, prefix, trailer, tail: Packet(dt=dt, sa=PEER, pt=pt, data=ip, prefix=prefix, trailer=trailer,
                                                     tail=tail),
    st.sampled_from([ME, PEER, ADDR_HEY_YOU, ADDR_BROADCAST, 0xE00001]), st.sampled_from([0x0800, 0x86DD, PT.RRP, 1]),
    ip_packets, st.sampled_from([(), (L2RH(b"\x01"),)]), st.sampled_from([b"", bytes(8)]), st.sampled_from([0, 5]))


@given(rx_packets, st.integers(0, 30), st.binary(max_size=9))
def test_pw0_rx_writes_exactly_what_ipnode_would(pkt, cut, junk):
    core = ip_node()
    loop, _ = ip_loop(core)
    raw = pkt.encode()
    for payload in (raw, raw[:-cut] + junk if cut else raw):
        frame = recv_frame(ROUTER_ULA, payload)
        fast = loop.rx_one(frame)
        before = dict(core.counters)
        acts = core.from_pw_bytes(payload, "pw0", ROUTER_ULA, 0.0)
        if fast is not None:
            assert acts == [("tun", fast)]
            changed = {k: v - before.get(k, 0) for k, v in core.counters.items() if v != before.get(k, 0)}
            assert changed == {("rx_ipv4" if pkt.pt == 0x0800 else "rx_ipv6"): 1}


def test_pw0_bursts_over_sockets():
    core = ip_node()
    loop, (gsnd, _, tun_far, _) = ip_loop(core)
    out = [v4("10.77.0.1", "10.77.0.2", 1000 + i) for i in range(8)] + [v4("10.77.0.1", "10.77.0.9", 100)]
    for p in out:
        tun_far.send(p)
    n4, n6, slow, blocked, errs, rerr = loop.tx_burst(64, 0)
    assert (n4, n6, slow, blocked, errs, rerr) == (8, 0, [out[-1]], [], [], 0)
    gsnd.setblocking(False)
    assert [gsnd.recv(FRAME_MAX) for _ in range(8)] == [loop.tx_one(p) for p in out[:8]]
    back = [v6("fd77::2", "fd77::1", 200 + i) for i in range(5)]
    frames = [recv_frame(ROUTER_ULA, Packet(dt=ME, sa=PEER, pt=0x86DD, data=p).encode()) for p in back]
    frames.append(recv_frame(ROUTER_ULA, Packet(dt=ME, sa=PEER, pt=PT.RRP, data=bytes(8)).encode()))
    for f in frames:
        gsnd.send(f)
    n4, n6, slow, eof, rerr, full, werrs, oversized = loop.rx_burst(64)
    assert (n4, n6, slow, eof, rerr, full, werrs, oversized) == (0, 5, [frames[-1]], 0, 0, 0, [], 0)
    tun_far.setblocking(False)
    assert [tun_far.recv(70000) for _ in range(5)] == back


def test_bad_arguments_are_errors_not_crashes():
    s = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with pytest.raises(ValueError):
        Router(s[0], s[1], 0x10000, FRAME_MAX, BURST)
    r = Router(s[0], s[1], ET, FRAME_MAX, BURST)
    with pytest.raises(ValueError):
        r.set_table([(1 << 24, bytes(6), 0)], [])
    with pytest.raises(ValueError):
        r.set_table([(1, bytes(5), 0)], [])
    with pytest.raises(TypeError):
        r.set_table([("x",)], [])
    with pytest.raises(ValueError):
        r.burst(0, 0)
    with pytest.raises(ValueError):
        r.burst(1, -1)
    with pytest.raises(ValueError):
        Ip(-1, s[0], ME, bytes(5), ET, FRAME_MAX, BURST, 65600)
    loop = Ip(os.open(os.devnull, os.O_RDONLY), s[0], ME, ROUTER_ULA, ET, FRAME_MAX, BURST, 65600)
    with pytest.raises(ValueError):
        loop.set_peers([(bytes(5), 1, 0)])
    with pytest.raises(ValueError):
        loop.tx_burst(300, 0)
    with pytest.raises(ValueError):
        loop.rx_burst(0)
    assert loop.tx_one(b"") is None and loop.rx_one(b"") is None
    assert r.held() == 0 and r.send_held() == (0, [], 0)
    assert {p[0] for p in fastpath.ip_peers(ip_node())} == {ipaddress.ip_address(a).packed for a in ("10.77.0.2", "fd77::2")}
    assert fastpath.ip_peers(ip_node(redirect=True)) == [] and fastpath.ip_peers(ip_node(limit=0)) == []
