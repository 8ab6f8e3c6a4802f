"""Fuzz target for gsn-switch's compiled ingress walk (daemons._switchfwd.Forwarder),
differential against its Python oracle (daemons.switch.forward.PyForwarder).

The input picks a switch (per port: inter-switch, trust_source, unconfigured switch,
link up; a ULA table; broadcast; the spanning tree) and a sequence of batches: raw
bytes (maybe truncated) or micropackets with drawn TYPE/TAIL/other control bits and
ULAs from a pool (known, unknown, broadcast), on any input port and VC, resumed after
each ADMIN as the Switch does.  Both walks must return the same results or raise the
same error type; the compiled one never raises anything but ValueError (truncation).

``one_input(data)`` is driven by atheris (fuzz_switchfwd.py), by Hypothesis
(test_fuzz_switchfwd.py) and by ``./gsn fuzz`` (target "switchfwd").
"""

from __future__ import annotations

import random
import socket
import struct
from collections import Counter
from types import SimpleNamespace

from daemons import constants as C
from daemons.constants import MpType
from daemons.link.clink import CLink
from daemons.switch.core import Port
from daemons.switch.forward import Forwarder, PyForwarder
from fuzz.draw import Draw

PORTS = (1, 2, 3, 7, 40)
POOL = [bytes([2, 0, 0, 1, 0, p]) for p in PORTS] + [b"\x02\x09\x09\x09\x09\x09", C.ULA_BROADCAST, C.ULA_NONE]
KINDS = [MpType.DATA, MpType.DATA, MpType.DATA, MpType.HEADER, MpType.HEADER, MpType.ADMIN, MpType.NULL, 0xF]


def make_ports(flags, ups) -> dict:
    """Ports as the Switch holds them: real CLinks, brought up where ``ups`` says."""
    ports = {}
    for p, (fabric, trusted, stray), up in zip(PORTS, flags, ups):
        link = CLink(p, 0.0, rng=random.Random(p))
        if up:
            link._go_up(1, 0.0)
        ports[p] = Port(p, link, fabric=fabric, trust_source=trusted, stray_switch=stray)
    return ports


def mp(kind: int, tail: int, other: int, d_ula: bytes, s_ula: bytes, vc: int) -> bytes:
    """One micropacket: a HEADER-shaped data area, the control word from its fields."""
    ctrl = vc << C.CTRL_VC_SHIFT | kind << C.CTRL_TYPE_SHIFT | tail << C.CTRL_TAIL_SHIFT | other
    return d_ula + s_ula + bytes(20) + struct.pack(">Q", ctrl)


def _run(fwd, batches, broadcast, tree):
    current, said = {}, []
    for in_port, vc, recs in batches:
        pos, n = 0, len(recs) // C.MP_BYTES
        while True:
            try:
                segs, pos, cur, counts, strays = fwd.ingress(recs, vc, in_port, current.get((in_port, vc)), pos,
                                                             broadcast, tree)
            except ValueError as exc:
                said.append(("ValueError", str(exc)))
                break
            current[in_port, vc] = cur
            said.append((segs, pos, cur, counts, strays))
            pos += 1
            if pos >= n:
                break
    return said


def one_input(data: bytes) -> None:
    d = Draw(data)
    flags = [(d.bool(), d.bool(), d.bool()) for _ in PORTS]
    ports = make_ports(flags, [d.int(1) % 4 != 0 for _ in PORTS])
    table = {d.choice(POOL): d.choice(PORTS) for _ in range(d.below(6))}
    table.pop(C.ULA_BROADCAST, None)
    broadcast, tree = d.bool(), d.int(8)
    batches = []
    for _ in range(1 + d.below(6)):
        in_port, vc = d.choice(PORTS), d.below(C.NUM_VCS)
        if d.int(1) % 8 == 0:  # raw bytes, maybe not whole micropackets
            recs = d.take(d.below(200))
        else:
            recs = b"".join(mp(d.choice(KINDS), d.bits(1), d.bits(57), d.choice(POOL), d.choice(POOL), vc)
                            for _ in range(d.below(20)))
        batches.append((in_port, vc, recs))
    got = _run(Forwarder(ports, dict(table)), batches, broadcast, tree)
    want = _run(PyForwarder(ports, dict(table)), batches, broadcast, tree)
    assert [g if g[0] != "ValueError" else g[0] for g in got] == [w if w[0] != "ValueError" else w[0] for w in want]


def _switch_run(impl, data: bytes, plane: bool = False) -> list:
    """Hostile datagrams (mutated, truncated, replayed, bad LCRCs) on port 1, its
    neighbour answering on port 2: everything the switch sends and its status.  With
    ``plane`` the switch's data path is compiled and port 1's datagrams reach it through
    SwitchPlane.rx from a UDP socket on loopback (a foreign sender now and then)."""
    from fuzz.frames import attack
    from fuzz.targets_cores import _drain_received, _switch

    d = Draw(data)
    sw, attacker, other, now = _switch(impl, plane=plane)
    seen, history = [], []
    targets = [C.ULA_BROADCAST, C.ULA_NONE, sw.ula, *list(sw.table)[:4]]
    socks, cable = [], Counter()
    if plane:
        socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(3)]  # switch, peer, stranger
        for s in socks:
            s.bind(("127.0.0.1", 0))
        socks[0].setblocking(False)
        socks[1].setblocking(False)
        sw.plane.cable(1, SimpleNamespace(sock=socks[0], peer=socks[1].getsockname(), counters=cable,
                                                 gso=True, max_sent=0))
    sent = strangers = rtx = 0
    try:
        for _ in range(1 + d.below(4)):
            for dgram in attack(d, attacker, sw.ports[1].link, targets, now, history):
                if not plane:
                    sw.ports[1].link.receive(dgram, now)
                    sw.process(1, now)
                    continue
                if sent % 7 == 3:  # not drawn: both runs must read the same input
                    socks[2].sendto(b"stranger" + bytes(dgram), socks[0].getsockname())
                    strangers += 1
                socks[1].sendto(dgram, socks[0].getsockname())  # loopback: queued before sendto returns
                sent += 1
                assert sw.plane.rx(now, 64) == {1: 1}
            for p, peer in ((2, other), (1, attacker)):
                out = sw.ports[p].link.handle_timer(now)
                if p == 1:
                    rtx += len(out)
                if plane and p == 1:  # SwitchPlane.flush builds and sends them: read them off the wire
                    assert sw.plane.flush(now) == {}
                    out += recv_all(socks[1])
                else:
                    out += sw.ports[p].link.datagrams(now)
                for dg in out:
                    seen.append((p, bytes(dg)))
                    peer.receive(dg, now)
                for dg in peer.handle_timer(now) + peer.datagrams(now):
                    sw.ports[p].link.receive(dg, now)
                    sw.process(p, now)
                _drain_received(peer)
            now += d.choice([0.0, 0.01, 1.0])
    finally:
        for s in socks:
            s.close()
    st = sw.status()
    for port in st["ports"].values():
        port["counters"] = {k: v for k, v in port["counters"].items() if v}
    if plane:  # every datagram counted once, the stranger's as foreign
        rx = {k: v for k, v in cable.items() if k.startswith("rx_")}
        assert rx == {k: v for k, v in (("rx_datagrams", sent), ("rx_foreign_datagram", strangers)) if v}
        assert cable["tx_datagrams"] == sum(1 for p, _ in seen if p == 1) - rtx
    return [seen, st]


def recv_all(sock) -> list[bytes]:
    """Every datagram waiting on a non-blocking socket."""
    out = []
    while True:
        try:
            out.append(sock.recv(65536))
        except BlockingIOError:
            return out


def switch_input(data: bytes) -> None:
    """A whole Switch with the compiled walk sends the same datagrams and counts the
    same as one with the Python walk, for the same hostile cable input."""
    assert _switch_run(Forwarder, data) == _switch_run(PyForwarder, data)
