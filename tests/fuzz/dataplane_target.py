"""Fuzz target for gsnd's compiled data plane (daemons/_pump.h, daemons/_reasm.h).

The input picks one of three decoders per operation:
  0  the C reassembly on batches of micropackets (real Messages with bits flipped,
     cut, interleaved across VCs; raw bytes), differential against Reassembler;
  1  TAP frames (any bytes) through tap_pump -> cable -> rx_pump -> TAP, differential
     against wire/ether.py (what arrives must be what the Python path would write);
  2  cable datagrams (real ones mutated, raw bytes) into rx_pump from the peer's
     address: nothing may raise, the credit ledger must stay balanced;
  3  ULP client frames (real SENDs and BINDs mutated, raw bytes; SENDs of every size
     class: encoded at once, read raw into a pool buffer, spilled) read by dp_run
     (daemons/_ulploop.h, _ulpraw.h): every frame is queued in C or handed to the Python server,
     which answers it; nothing may raise;
  4  TAP reads with a virtio_net_hdr (any header, real and random frames) through a
     vnet rig, differential against wire/vnet.py (take, then to_tap on the other side).
``one_input(data)`` is driven by atheris (fuzz_dataplane.py), Hypothesis
(test_fuzz_dataplane.py) and ./gsn fuzz (target gsnd.dataplane).  GSN_DP_FUZZ_OPS
(e.g. "0") restricts the operations: the reassembly alone runs ~20x faster than the
operations that step the socket rig.
"""

from __future__ import annotations

import os
import time

from daemons.link.clink import UlpFrameIn
from daemons.wire import vnet
from daemons.wire.message import Message
from daemons.wire.ulp import Frame, Op
from tests.fuzz.fastpath_target import Reader
from tests.unit.dprig import ULAS, Rig
from tests.unit.reasmdiff import check
from tests.unit.test_dataplane import expect
from tests.unit.test_ulp_dataplane import Pair, attach, server
from tests.unit.test_vnet import tcp_partial

_rigs: dict[str, Rig] = {}
_ulp: tuple | None = None  # (rig, server, client pair) of operation 3


def rig(name: str = "hostile", **kw) -> Rig:
    """One rig per name for many inputs (sockets are slow to make); remade if a mutated
    datagram reset its link.  Operation 1 has a rig of its own ("frames"): it expects
    exactly what it sent, which a rig shared with operations 2 and 3 cannot promise.  A
    datagram of operation 2 from the peer's address whose shim seq was moved (no CRC
    covers the shim; only a keyed cable authenticates it) waits in the out-of-order buffer
    and, when the sequence reaches it, displaces the real one: the Messages it overlaps
    are lost (counted by the reassembly), as on a real unkeyed cable; and Messages of
    operation 3 still in flight would reach the TAP during operation 1."""
    r = _rigs.get(name)
    if r is None or not all(ep.link.up and ep.ula for ep in r.eps):
        if r is not None:
            r.close()
        r = _rigs[name] = Rig(**kw)
        r.bring_up()
    return r


def vnet_rig() -> Rig:
    return rig("vnet", vnet=(True, True))


def _mutate(r: Reader, d: bytes) -> bytes:
    b = bytearray(d or b"\0")
    for _ in range(r.int(1) % 4):
        spot = r.int(3)
        b[spot % len(b)] ^= 1 << (spot >> 21)
    cut = r.int(1)
    if cut & 1:
        b = b[: max(0, len(b) - cut)]
    elif cut & 2:
        b += r.take(cut % 80)
    return bytes(b)


def _reassembly(r: Reader) -> None:
    batches = []
    for _ in range(1 + r.int(1) % 6):
        vc = r.int(1) % 4
        mode = r.int(1) % 4
        if mode == 3:
            raw = r.take(40 * (r.int(1) % 8))
            batches.append(None if r.int(1) & 1 else (vc, raw[: len(raw) - len(raw) % 40]))
            continue
        size = r.int(2) % (2000 if vc == 0 else 9000)
        recs = Message(vc, ULAS[0], ULAS[1], 0x0800, r.take(8) * (size // 8)).records().tobytes()
        if mode:
            recs = _mutate(r, recs)
            recs = recs[: len(recs) - len(recs) % 40]
        split = r.int(2) % (len(recs) // 40 + 1)
        batches += [(vc, recs[: 40 * split]), (vc, recs[40 * split:])]
    check([b for b in batches if b is None or b[1]], None if r.int(1) & 1 else 5000)


def _frames(r: Reader) -> None:
    g = rig("frames")
    g.taps[1].frames()
    fs = []
    for _ in range(1 + r.int(1) % 4):
        dst = [ULAS[1], b"\xff" * 6, bytes(6), b"\x01\x00\x5e\x00\x00\x01", r.take(6).ljust(6, b"\0")][r.int(1) % 5]
        et = [0x0800, 0x86DD, 0x0806, r.int(2)][r.int(1) % 4]
        fs.append((dst + ULAS[0] + et.to_bytes(2, "big") + r.take(r.int(2) % 3000))[: r.int(2) % 3100])
    g.send_frames(0, fs)
    if all(ep.link.up for ep in g.eps):
        _delivered(g, [w for w in map(expect, fs) if isinstance(w, bytes)])


def _vnet_frames(r: Reader) -> None:
    g = vnet_rig()
    g.taps[1].frames()
    bufs = []
    for _ in range(1 + r.int(1) % 4):
        if r.int(1) & 1:  # a TCP segment as the kernel hands it over, its header then mutated
            f, start, off = tcp_partial(r.take(r.int(2) % 3000))
            bufs.append(_mutate(r, vnet.HDR.pack(vnet.F_NEEDS_CSUM, 0, 0, 0, start, off) + f) if r.int(1) & 1
                        else vnet.HDR.pack(vnet.F_NEEDS_CSUM, 0, 0, 0, start, off) + f)
        else:
            et = [0x0800, 0x86DD, r.int(2)][r.int(1) % 3]
            bufs.append(r.take(10) + ULAS[1] + ULAS[0] + et.to_bytes(2, "big") + r.take(r.int(2) % 3000))
    g.send_frames(0, bufs)
    want = []
    for b in bufs:
        t = vnet.take(b)
        if isinstance(t, bytes) and isinstance(w := expect(t), bytes):
            want.append(vnet.to_tap(w))
    if all(ep.link.up for ep in g.eps):
        _delivered(g, want)


def _delivered(g: Rig, want: list[bytes]) -> None:
    """Side 1's TAP gets exactly ``want``, in order.  send_frames' 20 steps usually carry
    them; should a datagram reach its socket a step late (a loaded machine), the rig steps
    on (up to 5 s of real time) until as many frames arrived, and then compares."""
    got = g.taps[1].frames()
    until = time.monotonic() + 5
    while len(got) < len(want) and time.monotonic() < until:
        g.step()
        got += g.taps[1].frames()
    assert got == want, (f"{len(got)} frames on the TAP, {len(want)} expected; first difference at "
                         f"{next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))}")


def _datagrams(r: Reader) -> None:
    g = rig()
    a, b = g.eps
    if r.int(1) & 1:
        a.send(r.int(1) % 4, ULAS[1], 0x88B5, bytes(r.int(2) % 3000))
    real = a.link.datagrams(g.now) or [bytes(a.link._control_datagram(0))]
    for _ in range(1 + r.int(1) % 4):
        d = r.take(r.int(2) % 700) if r.int(1) % 4 == 0 else _mutate(r, real[r.int(1) % len(real)])
        g.transports[0].sock.sendto(d, g.transports[1].local)
    g.dps[0].send_many(real)
    g.dps[1].rx(g.now)
    b.process(g.now)
    for _ in range(5):
        g.step()
    assert b.link.ledger.balanced() and a.link.ledger.balanced()


# SEND payload sizes at the edges of daemons/_ulpraw.h (queued raw from 1024 micropackets,
# 32,713 bytes; a pool buffer holds 65,618; larger spills), one in four draws; a short
# input (zeros once it is read) draws a raw one
_ULP_EDGES = ((65600, 40), (32700, 30), (131180, 29))


def _ulp_payload(r: Reader) -> bytes:
    pick = r.int(1) % 12
    if pick >= len(_ULP_EDGES):
        return r.take(r.int(2) % 3000)
    base, spread = _ULP_EDGES[pick]
    size = base + r.int(1) % spread
    fill = r.take(1 + r.int(1) % 8) or b"\0"
    return (fill * (size // len(fill) + 1))[:size]


def _ulp_frames(r: Reader) -> None:
    global _ulp
    g = rig()
    if _ulp is None or _ulp[0] is not g:
        if _ulp is not None:
            _ulp[2].close()
        pair = Pair()
        srv = server(g, 0)
        attach(srv, pair, 0x88B5).privileged = r.int(1) & 1 == 1
        _ulp = (g, srv, pair)
    _, srv, pair = _ulp
    srv._sync(srv.clients[0])
    sent = 0
    for _ in range(1 + r.int(1) % 4):
        real = Frame([Op.SEND, Op.BIND, Op.UNBIND][r.int(1) % 3], r.int(1) % 4, [0x88B5, 0x0800, 0x88B7][r.int(1) % 3],
                     ULAS[1], _ulp_payload(r)).encode()
        f = r.take(r.int(1) % 40) if r.int(1) % 4 == 0 else _mutate(r, real)
        try:
            pair.app.send(f)
            sent += 1
        except BlockingIOError:
            break
    for _ in range(sent + 3):  # at most one frame handed up per run
        t = g.now
        ran = g.dps[0].run(t, t, 1 << 30, -1)  # deadline now: one pass, no wait (the frames are already queued)
        g.eps[0].process(t)
        events = [ev for ev in g.eps[0].events() if isinstance(ev, UlpFrameIn)]
        for ev in events:
            srv.frame_in(ev.fd, ev.data, ev.size)
        if not events and ran.reason != 2:  # 2: EVENTS
            break
    _drain(pair)  # gsnd's answers
    for _ in range(3):
        g.step()
    for i in (0, 1):  # what came up to Python (the peer binds none of it) is not kept: 64 KiB SENDs
        g.messages[i].clear()  # would grow the process by megabytes a second
        g.up_events[i].clear()
    assert g.eps[0].link.ledger.balanced()


def _drain(pair: Pair) -> list[bytes]:
    out = []
    while True:
        try:
            out.append(pair.app.recv(1 << 23))
        except BlockingIOError:
            return out


OPS = [(_reassembly, _frames, _datagrams, _ulp_frames, _vnet_frames)[int(k)]
       for k in os.environ.get("GSN_DP_FUZZ_OPS", "01234")]


def one_input(data: bytes) -> None:
    r = Reader(data)
    for _ in range(3):
        OPS[r.int(1) % len(OPS)](r)
