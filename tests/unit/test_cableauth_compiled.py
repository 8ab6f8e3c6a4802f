"""The keyed cable in C (daemons/_cableauth.h, CompiledCableAuth and the data plane's
open in rx_pump) against its oracle CableAuth (daemons/wire/cableauth.py): the same
sealed bytes, and for any stream of datagrams -- genuine, reordered, replayed, from a
restarted sender, reflected, corrupted, truncated, plain -- the same bodies accepted,
the same drop reasons counted, in the same order."""

from __future__ import annotations

import socket

import pytest
from hypothesis import given, settings, strategies as st

from daemons import constants as C
from daemons.gsnd.dataplane import usable
from daemons.link.clink import CLink
from daemons.wire.cableauth import CableAuth, CompiledCableAuth

T0 = 1_790_000_000_000_000_000
KEYS = st.binary(min_size=32, max_size=32)


def body(n_mps: int, fill: int) -> bytes:
    return bytes(C.SHIM_BYTES) + bytes([fill]) * (C.MP_BYTES * n_mps)


@settings(max_examples=100, deadline=None)
@given(KEYS, st.integers(0, 1), st.integers(0, (1 << 64) - 1),
       st.lists(st.one_of(st.integers(1, 40).map(lambda n: body(n, n)), st.binary(max_size=300)), max_size=8))
def test_seal_is_byte_for_byte_the_oracles(key, direction, session, bodies):
    oracle, compiled = CableAuth(key, direction, session), CompiledCableAuth(key, direction, session)
    half = len(bodies) // 2
    assert [oracle.seal(b) for b in bodies[:half]] == [compiled.seal(b) for b in bodies[:half]]
    assert oracle.seal_many(bodies[half:]) == compiled.seal_many(bodies[half:])
    assert oracle.counter == compiled.counter == len(bodies)
    assert compiled.session == session


# One received datagram, made from the peer's sealing state: (kind, argument).
EVENTS = st.lists(st.tuples(
    st.sampled_from(["next", "counter", "edge", "restart", "old_session", "reflect", "flip", "truncate", "plain",
                     "junk", "again"]),
    st.integers(0, 1 << 13)), max_size=60)


def _stream(key, events, window=C.AUTH_REPLAY_WINDOW):
    """The datagrams the higher end receives, built with oracle sealers ("edge": a
    counter just inside, at or just outside the window behind the highest sent)."""
    peer = CableAuth(key, 0, T0)  # the lower end
    me = CableAuth(key, 1, T0 + 7)
    sent: list[bytes] = []
    out = []
    max_sent = 0
    for kind, arg in events:
        b = body(1 + arg % 5, arg & 0xFF)
        if kind == "next":
            d = peer.seal(b)
        elif kind == "counter":  # out of order: any counter, near or far
            peer.counter = arg
            d = peer.seal(b)
        elif kind == "edge":
            peer.counter = max(0, max_sent - window + arg % 3)
            d = peer.seal(b)
        elif kind == "restart":  # a newer session
            peer = CableAuth(key, 0, peer.session + 1 + arg)
            max_sent = 0
            d = peer.seal(b)
        elif kind == "old_session":
            d = CableAuth(key, 0, max(0, peer.session - 1 - arg)).seal(b)
        elif kind == "reflect":
            d = me.seal(b)
        elif kind == "flip":
            d = bytearray(peer.seal(b))
            d[arg % len(d)] ^= 1 << (arg % 8)
            d = bytes(d)
        elif kind == "truncate":
            d = peer.seal(b)[: arg % (len(b) + 32)]
        elif kind == "plain":
            d = b
        elif kind == "junk":
            d = bytes([arg & 0xFF]) * (arg % 300)
        else:  # again: a replay of something sent before
            d = sent[arg % len(sent)] if sent else peer.seal(b)
        max_sent = max(max_sent, peer.counter - 1)
        sent.append(d)
        out.append(d)
    return out


@settings(max_examples=150, deadline=None)
@given(KEYS, st.sampled_from([1, 2, 64, 65, 100, C.AUTH_REPLAY_WINDOW]), EVENTS)
def test_open_matches_the_oracle_on_any_stream(key, window, events):
    oracle = CableAuth(key, 1, T0 + 7, window=window)
    compiled = CompiledCableAuth(key, 1, T0 + 7, window=window)
    for d in _stream(key, events, window):
        assert compiled.open(d) == oracle.open(d)
        assert compiled.counters == oracle.counters


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        CompiledCableAuth(bytes(31), 0, T0)
    with pytest.raises(ValueError):
        CompiledCableAuth(bytes(32), 2, T0)
    with pytest.raises(ValueError):
        CompiledCableAuth(bytes(32), 0, 1 << 64)
    with pytest.raises(ValueError):
        CompiledCableAuth(bytes(32), 0, T0, window=0)
    with pytest.raises(TypeError):
        CompiledCableAuth(bytes(32), 0, T0).open("text")


def test_keyed_and_plain_cables_take_the_data_plane_one_without_a_peer_does_not():
    class Keyed:
        sock, peer, auth = object(), ("127.0.0.1", 9), object()

    class Plain:
        sock, peer, auth = object(), ("127.0.0.1", 9), None

    class NoPeer:
        sock, peer, auth = object(), None, None
    assert usable(Keyed()) and usable(Plain()) and not usable(NoPeer())


@settings(max_examples=40, deadline=None)
@given(KEYS, st.integers(0, 1), st.lists(st.sampled_from([1, 2, 7, 36]), min_size=1, max_size=70), st.booleans())
def test_the_data_planes_seal_is_byte_for_byte_the_oracles(key, direction, sizes, gso):
    """dp_send on a keyed cable (what dp_run's flushes call) seals in C: every datagram that
    arrives -- GSO runs cut into segments by the kernel -- is the oracle's seal of the same
    body with the same counter, the peer's oracle opens each one, and the Python path's
    next seal continues the same counter."""
    rx, tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM), socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.bind(("127.0.0.1", 0))
        tx.bind(("127.0.0.1", 0))
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        rx.settimeout(2)
        link = CLink(9, 0.0)
        link.dp_attach(-1, tx.fileno(), rx.getsockname(), 1500, True, b"", C.ULP_MAX_PAYLOAD)
        compiled = CompiledCableAuth(key, direction, T0 + 7)
        link.dp_auth(compiled.core)
        bodies = [body(n, i & 0xFF) for i, n in enumerate(sizes)]
        sent, err, sends, segs, biggest = link.dp_send(bodies, gso)
        assert (sent, err) == (len(bodies), 0)
        got = [rx.recv(65536) for _ in bodies]
        oracle = CableAuth(key, direction, T0 + 7)
        assert got == oracle.seal_many(bodies)
        assert biggest == max(map(len, got))
        assert segs <= len(bodies) and (gso or segs == 0)
        if gso and len(set(sizes)) == 1 and len(sizes) > 1:
            per = min(64, 65507 // len(got[0]))  # segments per GSO send (io/udp.py GSO_MAX_*)
            assert segs == len(bodies) - (len(bodies) % per == 1) and sends == len(bodies) // per + (len(bodies) % per > 1)
        peer = CableAuth(key, 1 - direction, T0)
        assert [peer.open(d) for d in got] == bodies and peer.counters == {"rx_auth_ok": len(bodies)}
        assert compiled.counter == len(bodies)
        assert compiled.core.dp_counts() == {"tx_auth_sealed_dp": len(bodies)}
        assert compiled.seal(bodies[0]) == oracle.seal(bodies[0])
        link.dp_auth(None)
    finally:
        rx.close()
        tx.close()


@settings(max_examples=25, deadline=None)
@given(KEYS, EVENTS)
def test_the_data_planes_open_counts_what_the_oracle_counts(key, events):
    """rx_pump on a real UDP socket opens with the shared CableAuthCore: its counters
    (merged into the cable group) equal the oracle's for the same datagrams."""
    rx, tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM), socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.bind(("127.0.0.1", 0))
        tx.bind(("127.0.0.1", 0))
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        rx.setblocking(False)
        link = CLink(9, 0.0)
        link.dp_attach(-1, rx.fileno(), tx.getsockname(), 1500, True, b"", C.ULP_MAX_PAYLOAD)
        compiled = CompiledCableAuth(key, 1, T0 + 7)
        link.dp_auth(compiled.core)
        oracle = CableAuth(key, 1, T0 + 7)
        stream = [d for d in _stream(key, events) if d]  # an empty UDP datagram is no datagram to open
        for d in stream:
            oracle.open(d)
            tx.sendto(d, rx.getsockname())
        got = 0
        for _ in range(100):
            got += link.rx_pump(0.0, 64)
            if got >= len(stream):
                break
        assert got == len(stream)
        assert compiled.core.dp_counts() == dict(oracle.counters)
        assert compiled.counters == {}  # the Python path saw none of them
        link.dp_auth(None)
    finally:
        rx.close()
        tx.close()
