"""snet-router's compiled forwarding loop (servernet/_snetfwd.c) against its Python
oracle (servernet.router.RouterCore): the same decision, the same bytes out and the same
counters for built, mutated and random datagrams from cabled and unknown senders, with
drawn routing tables and deadlock masks; then the loop itself on real loopback sockets
(recvmmsg / sendmmsg, TPB tagging, drops counted)."""

import socket
import threading
import time
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servernet import _snetfwd, constants as K
from servernet.codec import Packet, envelope, open_envelope
from servernet.constants import TType
from servernet.router import NO_PORT, Route, RouterCore, parse_route, route_table

N1, N2 = 0x04001, 0x08001
ADDRS = [("10.0.0.1", 7510), ("10.0.0.2", 7520), ("10.0.1.1", 7500), ("::1", 7600), ("10.0.0.5", 1)]


def pair(fabric, ports, routes, enables=None):
    py = RouterCore(fabric, ports, routes, enables)
    c = _snetfwd.Router(-1, fabric, ports, route_table(routes), enables or {})
    return py, c


def test_constants_match_the_python_package():
    assert _snetfwd.MAX_PORTS == K.ROUTER_PORTS and _snetfwd.MAX_DATAGRAM_II == K.MAX_DATAGRAM_II
    assert _snetfwd.FLAGS_KNOWN == K.FLAGS_KNOWN and _snetfwd.NODE_BATCH == K.NODE_BATCH


@given(st.binary(max_size=600))
def test_crc_is_zlibs(data):
    assert _snetfwd.crc32(data) == zlib.crc32(data)


def test_route_table_is_longest_prefix():
    routes = [parse_route("0/0=3"), parse_route("0x40000/6=2"), parse_route("0x40001=1")]
    t = route_table(routes)
    assert len(t) == 1 << 20 and t[0x40001] == 1 and t[0x40002] == 2 and t[0x7FFFF] == 3 and t[0] == 3
    assert route_table([parse_route("0x40001=1")])[0x40000] == NO_PORT


@st.composite
def setups(draw):
    n = draw(st.integers(1, 4))
    ports = {p: ADDRS[i] for i, p in enumerate(draw(st.lists(st.integers(0, 11), min_size=n, max_size=n,
                                                              unique=True)))}
    routes, seen = [], set()
    for _ in range(draw(st.integers(0, 5))):
        bits = draw(st.sampled_from([0, 6, 14, 20]))
        did = draw(st.sampled_from([N1, N2, 0x40000, draw(st.integers(0, K.ID_MAX))])) >> (20 - bits) << (20 - bits)
        if (did, bits) not in seen:
            seen.add((did, bits))
            routes.append(Route(did, bits, draw(st.sampled_from(sorted(ports)))))
    enables = {}
    for p in ports:
        if draw(st.booleans()):
            enables[p] = frozenset(draw(st.sets(st.sampled_from(sorted(ports)))))
    return draw(st.integers(0, 1)), ports, routes, enables


@st.composite
def datagrams(draw):
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return draw(st.binary(max_size=600))
    ttype = draw(st.sampled_from([TType.READ, TType.WRITE, TType.BARRIER]))
    rsp = draw(st.booleans())
    ii = draw(st.booleans())
    n = 8 * draw(st.integers(0, 8)) if ttype == TType.WRITE and not rsp else 0
    data = draw(st.binary(min_size=n, max_size=n))
    fabric = draw(st.integers(0, 1))
    pkt = Packet(draw(st.sampled_from([N1, N2, 0x40123, draw(st.integers(0, K.ID_MAX))])), N1, ttype, rsp,
                 draw(st.integers(0, 15)), fabric, False, None if rsp else 0x100000, data, 0, ii)
    raw = bytearray(envelope(pkt.encode(), fabric, tpb=draw(st.booleans()), ii=ii))
    for _ in range(draw(st.integers(0, 2)) if kind == 2 else 0):  # mutate a byte
        raw[draw(st.integers(0, len(raw) - 1))] ^= draw(st.integers(1, 255))
    if kind == 3:
        raw += draw(st.binary(min_size=1, max_size=600))
    return bytes(raw)


@settings(max_examples=400, deadline=None)
@given(setups(), st.lists(st.tuples(st.integers(0, len(ADDRS) - 1), datagrams()), max_size=8))
def test_compiled_router_decides_as_the_oracle(setup, inputs):
    py, c = pair(*setup)
    for src_i, dgram in inputs:
        src = ADDRS[src_i]
        assert c.receive(src, dgram) == py.receive(src, dgram)
    assert c.counters() == {k: v for k, v in py.counters.items() if v}


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        _snetfwd.Router(-1, 0, {}, b"\xff" * 10, {})
    with pytest.raises(ValueError):
        _snetfwd.Router(-1, 2, {}, route_table([]), {})
    with pytest.raises(ValueError):
        _snetfwd.Router(-1, 0, {12: ADDRS[0]}, route_table([]), {})
    with pytest.raises(ValueError):
        _snetfwd.Router(-1, 0, {0: ("not-an-address", 1)}, route_table([]), {})
    with pytest.raises(ValueError):
        _snetfwd.Router(-1, 0, {0: ADDRS[0]}, route_table([]), {1: [0]})
    r = _snetfwd.Router(-1, 0, {0: ADDRS[0]}, route_table([]), {})
    with pytest.raises(ValueError):
        r.receive(("x", 1), b"")


def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(5)
    return s


def write(did, sid=N1, fabric=0, data=b"x" * 64):
    return envelope(Packet(did, sid, TType.WRITE, False, 1, fabric, address=0x100000, data=data).encode(), fabric)


@pytest.mark.parametrize("kind", ["forward", "serve"])
def test_forwarding_loop_on_sockets(kind):
    """Two nodes on loopback through the compiled loop: a burst both ways, a bad CRC
    tagged, drops counted; forward() gives the GIL away while it waits; serve() (snet-
    router's) stays in C until stop(), which it hears within its poll_ms."""
    router, a, b, stranger = udp(), udp(), udp(), udp()
    router.setblocking(False)
    ra = router.getsockname()
    ports = {0: a.getsockname(), 1: b.getsockname()}
    fwd = _snetfwd.Router(router.fileno(), 0, ports, route_table([parse_route(f"{N1:#x}=0"),
                                                                  parse_route(f"{N2:#x}=1")]), {})
    stop = threading.Event()

    def loop():
        if kind == "serve":
            fwd.serve(20)
        while not stop.is_set():
            fwd.forward(20)

    t = threading.Thread(target=loop)
    t.start()
    try:
        burst = [write(N2, data=bytes([i]) * 64) for i in range(200)]
        for d in burst:
            a.sendto(d, ra)
        got = [b.recvfrom(2048) for _ in burst]
        assert [g[0] for g in got] == burst and {g[1] for g in got} == {ra}
        back = envelope(Packet(N1, N2, TType.WRITE, True, 1, ack=True).encode(), 0)
        b.sendto(back, ra)
        assert a.recv(2048) == back
        bad = bytearray(write(N2))
        bad[-1] ^= 0xFF
        a.sendto(bytes(bad), ra)
        out = b.recv(2048)
        assert open_envelope(out).tpb and out[4:] == bytes(bad[4:])
        stranger.sendto(write(N2), ra)
        a.sendto(write(0x3FFFF), ra)
        a.sendto(write(N2, fabric=1), ra)
        deadline = time.monotonic() + 5
        want = {"port0_rx": 201, "port1_tx": 201, "port1_rx": 1, "port0_tx": 1, "tagged_bad_crc": 1,
                "drop_unknown_sender": 1, "drop_no_route": 1, "drop_wrong_fabric": 1}
        while fwd.counters() != want and time.monotonic() < deadline:
            time.sleep(0.01)
        assert fwd.counters() == want
        with pytest.raises(RuntimeError):  # one forward() at a time: it owns the buffers
            while True:
                fwd.receive(ports[0], write(N2))
    finally:
        stop.set()
        fwd.stop()
        t.join(5)
        assert not t.is_alive(), "serve() did not hear stop()"
        for s in (router, a, b, stranger):
            s.close()


def test_fabric_socket_sends_in_batches():
    """An end node's FabricSocket: send() many by sendmmsg to its router, in order."""
    node, router = udp(), udp()
    node.setblocking(False)
    wire = _snetfwd.FabricSocket(node.fileno(), router.getsockname())
    sent = [bytes([i]) * (1 + i % 84) for i in range(100)]
    assert wire.send(sent) == (0, 0)
    assert [router.recv(2048) for _ in sent] == sent
    with pytest.raises(TypeError):
        wire.send(["not bytes"])
    for s in (node, router):
        s.close()
