"""The wire bytes of a ULP client's SEND read by gsnd's loop (daemons/_ulpraw.h: read into
a transmit pool buffer, queued raw from 1024 micropackets and encoded straight into the
datagram; encoded at once below; spilled past a pool buffer) against the Python oracle:
the same Message sent by Endpoint.send (wire/message.py's encoder), cut into datagrams by
the link and sealed by the Python transport.  Two rigs in the same state; what reaches
the peer's cable socket must be equal byte for byte, plain and keyed cables alike.
"""

from __future__ import annotations

import socket
import time

from hypothesis import HealthCheck, example, given, settings, strategies as st

from daemons.io import pmtu
from daemons.constants import AUTH_TRAILER_BYTES, ETHERTYPE_IPV4, ETHERTYPE_IPV6
from daemons.wire.cableauth import CableAuth, direction
from daemons.wire.message import max_payload
from daemons.wire.ulp import Frame, Op
from tests.unit.dprig import ULAS, Rig
from tests.unit.test_ulp_dataplane import Pair, attach, server

KEY = bytes(range(32))
# payload sizes at the edges of _ulpraw.h: 1023 micropackets up to 32,712 bytes, 1024 from
# 32,713 (queued raw from there), 1025 from 32,745; a pool buffer holds a payload of up to
# 65,618 bytes (more spills into the receive buffer); VC0's largest is 2,184
EDGES = st.one_of(st.integers(0, 41), st.integers(32708, 32718), st.integers(32742, 32748),
                  st.integers(65612, 65624), st.sampled_from([2183, 2184, 131207, 131208, 200_001]))
ETHERTYPES = st.sampled_from([0x88B5, 0x1234, 0xFFFF, 0x0000, 0x88B7, ETHERTYPE_IPV4, ETHERTYPE_IPV6])
SENDS = st.lists(st.tuples(st.integers(0, 3), EDGES, ETHERTYPES, st.binary(min_size=1, max_size=7)),
                 min_size=1, max_size=4)


def _capture(r: Rig) -> socket.socket:
    """The peer's cable socket, one datagram per read (no GRO), drained."""
    s = r.transports[1].sock
    s.setsockopt(pmtu.SOL_UDP, pmtu.UDP_GRO, 0)
    _cable(s, 0.0)
    return s


def _cable(s: socket.socket, settle: float) -> list[bytes]:
    """Every datagram that reaches s until none came for ``settle`` seconds."""
    out: list[bytes] = []
    quiet = time.monotonic() + settle
    while True:
        try:
            out.append(s.recv(1 << 17))
            quiet = time.monotonic() + settle
        except BlockingIOError:
            if time.monotonic() >= quiet:
                return out
            time.sleep(0.001)


def messages(sends) -> list[tuple[int, int, bytes]]:
    return [(vc, et, (fill * (size // len(fill) + 1))[: min(size, max_payload(vc))])
            for vc, size, et, fill in sends]


def through_the_loop(msgs, key: bytes | None, max_mps: int | None = None) -> tuple[list[bytes], dict, CableAuth | None]:
    """The datagrams gsnd's loop sends for the clients' SENDs msgs (read by dp_run), its
    ULP counters and, on a keyed cable, the Python oracle of its sealing end."""
    r = Rig(seed=5, key=key)
    tx = Pair(4 << 20)
    try:
        r.bring_up()
        if max_mps:  # datagrams cut a raw chunk at other places (a smaller path MTU)
            r.eps[0].link.max_mps = max_mps
        cable = _capture(r)
        srv = server(r, 0)
        attach(srv, tx).privileged = True  # may send IP's EtherTypes too
        srv._sync(srv.clients[0])
        for vc, et, payload in msgs:
            tx.app.send(Frame(Op.SEND, vc, et, ULAS[1], payload).encode())
        ran = r.dps[0].run(r.now, r.now + 0.02, 1 << 30, -1)
        assert ran.reason != 2, "a SEND went up to Python"  # 2: EVENTS
        t = r.transports[0]
        oracle = None if t.auth is None else CableAuth(key, direction(t.sock.getsockname()[:2], t.peer), t.auth.session)
        return _cable(cable, 0.05), r.dps[0].counters("ulp", srv.counters), oracle
    finally:
        tx.close()
        r.close()


def through_the_oracle(msgs, key: bytes | None, max_mps: int | None = None) -> list[bytes]:
    """The datagrams the Python path sends for the same Messages, in the same link state."""
    r = Rig(seed=5, key=key)
    try:
        r.bring_up()
        if max_mps:  # datagrams cut a raw chunk at other places (a smaller path MTU)
            r.eps[0].link.max_mps = max_mps
        cable = _capture(r)
        # dp_run looks for datagrams to send once before it reads the clients; that turn
        # moves the link's round robin on (_link.c), as this one does
        assert r.eps[0].link.datagrams(r.now) == []
        for vc, et, payload in msgs:
            assert r.eps[0].send(vc, ULAS[1], et, payload)
        r.transports[0].send_many(r.eps[0].link.datagrams(r.now))
        return _cable(cable, 0.05)
    finally:
        r.close()


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@example(sends=[(1, 32712, 0x88B5, b"a"), (2, 32713, 0x1234, b"bc")], keyed=False, max_mps=None)
@example(sends=[(3, 65618, 0x88B5, b"\x00\xff"), (1, 65619, 0x0800 ^ 1, b"z")], keyed=True, max_mps=333)
@example(sends=[(0, 2184, 0x88B5, b"q"), (3, 200_001, 0xFFFF, b"xyz")], keyed=False, max_mps=None)
# after a spilled frame the client's next ones are read into a large buffer: queued raw
# from there (large, or from 1024 micropackets), encoded at once from there (small), and
# the frame that fits a pool buffer again puts the client back on the pool
@example(sends=[(3, 200_001, 0x88B5, b"a"), (2, 131207, 0x1234, b"b"), (1, 32713, 0x88B5, b"cd"),
                (0, 40, 0x88B5, b"e")], keyed=False, max_mps=None)
@example(sends=[(3, 262_184, 0x8181, b"st"), (3, 262_184, 0x8181, b"ts"), (3, 65619, 0x8181, b"u"),
                (3, 500, 0x8181, b"v")], keyed=True, max_mps=333)
@example(sends=[(1, 65619, 0x88B5, b"w"), (1, 32712, 0x88B5, b"x"), (1, 65619, 0x88B5, b"y")],
         keyed=False, max_mps=37)
@given(sends=SENDS, keyed=st.booleans(), max_mps=st.sampled_from([None, None, 1000, 333, 37]))
def test_the_loops_datagrams_for_ulp_sends_equal_the_python_encoding(sends, keyed, max_mps):
    key = KEY if keyed else None
    msgs = messages(sends)
    looped, counters, sealer = through_the_loop(msgs, key, max_mps)
    assert counters["tx_direct"] == len(msgs)  # every SEND read and queued in C
    expected = through_the_oracle(msgs, key, max_mps)
    assert expected, "nothing was sent"
    if sealer is not None:  # the oracle's rig has its own session and direction: seal as the loop's end
        sealer.counter = int.from_bytes(expected[0][-24:-16], "big")
        expected = [sealer.seal(d[:-AUTH_TRAILER_BYTES]) for d in expected]
    assert [len(d) for d in looped] == [len(d) for d in expected]
    for k, (a, b) in enumerate(zip(looped, expected)):
        assert a == b, f"datagram {k} differs from byte {_first_difference(a, b)}"


def _first_difference(a: bytes, b: bytes) -> int:
    return next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
