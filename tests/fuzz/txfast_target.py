"""Fuzz target for the link's send path, daemons/_txfast.h, differential against Link.

Two senders in the same state, each with a CLink as its peer: a CLink with gsnd's data
plane attached (its TAP one end of a datagram socketpair), and the Python Link.
The input is a run of operations: a TAP frame (any size to past the MTU, any
destination and EtherType, IPv4 total lengths that cut it) read by the CLink's
tap_pump, where the Link gets the Message wire/ether.py makes of it (or nothing, when
that drops it); a Message on any VC enqueued on both (copied and stamped: tx_stamp);
a new max_mps (a frame's micropackets spread over datagrams: tx_encode in pieces, the
running ECRC kept between takes; the spare datagrams' size changes); the datagrams
sent now, some of them lost, the peers' acks and credits back; time passing
(retransmissions).  The two senders' datagrams must be equal byte for byte, and their
queues equal in length, after every operation, whatever the block CRC in use.  The
senders an input leaves up with nothing unsent serve the next input (sequence numbers
and timers go on; anything else, a failed check included, and they are made afresh).

``one_input(data)`` is driven by atheris (fuzz_txfast.py), Hypothesis
(test_fuzz_txfast.py) and ./gsn fuzz (target txfast).
"""

from __future__ import annotations

import random
import socket

from daemons import _link
from daemons.constants import ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ULA_BROADCAST, ULP_MAX_PAYLOAD
from daemons.link.clink import CLink
from daemons.link.link import Link, Received
from daemons.wire.ether import FrameDrop, frame_to_message
from daemons.wire.message import Message
from tests.fuzz.fastpath_target import Reader
from tests.unit.dprig import FakeTap

CABLE = 7
ME, PEER = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")
MTU = 9000  # the data plane's IP MTU here: frames past it are dropped (tx_drop_over_mtu)
ARGS = {"buffers": (64, 512, 128, 256), "window": 1200, "max_mps": 64}
_DEFAULT = _link.crc_impl()
IMPLS = ["tables"] + [i for i in ("clmul", "vpclmul") if _link.crc_impl(i) == i]
_link.crc_impl(_DEFAULT)

_fds: tuple[FakeTap, socket.socket] | None = None  # made once: descriptors are slow to make


def _descriptors() -> tuple[FakeTap, socket.socket]:
    global _fds
    if _fds is None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # never used: datagrams() returns them
        sock.bind(("127.0.0.1", 0))
        _fds = (FakeTap(), sock)
    _fds[0].frames()
    while True:  # what an earlier input left unread
        try:
            _fds[0].inner.recv(1 << 17)
        except BlockingIOError:
            break
    return _fds


def _exchange(a, b, now: float, lose: int = 0) -> list[bytes]:
    """a's datagrams now to b (those whose bit is set in ``lose`` lost), b's answers to a."""
    out = [bytes(d) for d in a.handle_timer(now) + a.datagrams(now)]
    for k, d in enumerate(out):
        if not (lose >> (k % 8)) & 1:
            b.receive(d, now)
    for ev in b.events():
        if isinstance(ev, Received):
            b.release(ev.vc, len(ev.recs))
    for d in b.handle_timer(now) + b.datagrams(now):
        a.receive(d, now)
    a.events()
    return out


def _senders():
    tap, sock = _descriptors()
    pairs = []
    for impl in (CLink, Link):
        a, b = impl(CABLE, 0.0, rng=random.Random(1), **ARGS), CLink(CABLE, 0.0, rng=random.Random(2), **ARGS)
        now = 0.0
        for _ in range(4):
            now += 0.001
            _exchange(a, b, now)
        assert a.up and b.up
        pairs.append((a, b))
    c = pairs[0][0]
    c.dp_attach(tap.fd, sock.fileno(), sock.getsockname(), MTU, True, b"", ULP_MAX_PAYLOAD)
    c.dp_ula(ME)
    return pairs, now


_live: tuple[list, float] | None = None  # the senders an input left with nothing unsent, and the time


def _frame(r: Reader) -> bytes:
    k = r.int(1) % 6
    dst = r.take(6).ljust(6, b"\0") if k == 5 else [PEER, ULA_BROADCAST, b"\x01\x00\x5e\x00\x00\x09",
                                                      b"\x33\x33\x00\x00\x00\x01", bytes(6)][k]
    k = r.int(1) % 4
    et = r.int(2) if k == 3 else [ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_ARP][k]
    k = r.int(1) % 4  # sizes: tiny, around TX_RAW_MIN (64 micropackets), up to past the MTU
    size = r.int(1) if k == 0 else [0, 1900, 0][k - 1] + r.int(2) % [2200, 2000, MTU + 200][k - 1]
    fill = r.take(4) or b"\0"
    payload = bytearray((fill * (size // len(fill) + 1))[:size])
    if et == ETHERTYPE_IPV4 and size >= 20 and r.int(1) & 1:  # a total length that cuts the frame
        payload[2:4] = (r.int(2) % (size + 40)).to_bytes(2, "big")
    f = dst + ME + et.to_bytes(2, "big") + bytes(payload)
    return f[: r.int(1) % 20] if r.int(1) % 8 == 7 else f  # or a runt


def one_input(data: bytes) -> None:
    r = Reader(data)
    impl = IMPLS[r.int(1) % len(IMPLS)]
    _link.crc_impl(impl)
    try:
        _run(r)
    finally:
        _link.crc_impl(_DEFAULT)


def _run(r: Reader) -> None:
    global _live
    pairs, now = _live or _senders()  # bring-up costs as much as an input: kept while it ends clean
    _live = None
    ((c, cpeer), (p, ppeer)), tap = pairs, _descriptors()[0]
    c.max_mps = p.max_mps = ARGS["max_mps"]
    for _ in range(2 + r.int(1) % 10):
        op = r.int(1) % 5
        if op == 0:  # a TAP frame
            f = _frame(r)
            tap.outer.send(f)
            assert c.tap_pump(1, 1 << 30) == 1
            m = frame_to_message(f, MTU)
            if not isinstance(m, FrameDrop):
                p.enqueue(1, Message(1, m[0], ME, m[1], m[2]).records())
        elif op == 1:  # a Message from Python: copied and stamped
            vc = r.int(1) % 4
            recs = Message(vc, PEER, ME, 0x88B5, r.take(r.int(2) % 1500)).records()
            c.enqueue(vc, recs)
            p.enqueue(vc, recs)
        elif op == 2:
            c.max_mps = p.max_mps = 1 + r.int(1) % 64
        elif op == 3:  # send now, some lost
            lose = r.int(1) if r.int(1) % 4 == 0 else 0
            assert _exchange(c, cpeer, now, lose) == _exchange(p, ppeer, now, lose)
        else:
            now += [0.0005, 0.01, 0.05, 0.3][r.int(1) % 4]
            assert _exchange(c, cpeer, now) == _exchange(p, ppeer, now)
        assert [c.queued(v) for v in range(4)] == [p.queued(v) for v in range(4)]
    for _ in range(40):  # the rest, every datagram acknowledged
        now += 0.001
        sent = _exchange(c, cpeer, now)
        assert sent == _exchange(p, ppeer, now)
        if not sent and not any(c.queued(v) for v in range(4)):
            break
    if c.up and p.up and not any(c.queued(v) or p.queued(v) for v in range(4)):
        _live = (pairs, now)
