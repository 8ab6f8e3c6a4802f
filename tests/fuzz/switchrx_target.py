"""Fuzz target for the decoder of gsn-switch's compiled data path: hostile cable datagrams
through ``SwitchPlane.rx`` (recvmsg from a real UDP socket on loopback, the peer check,
the link's per-micropacket receive, the compiled walk and pump) and ``SwitchPlane.flush``
(the datagrams built and sent back), with no oracle beside it, so that it runs fast
enough for millions of inputs (the differential targets, switchloop_target.py, build two
whole switches per input).

The rig (a two-port Switch(plane=True), a hostile neighbour on port 1 whose datagrams
reach the switch through the socket, a well-behaved one on port 2, fed in Python) is
built once and kept for RIG_INPUTS inputs, or until a link is down (the hostile input
may reset it), so successive inputs also meet the state earlier ones left (open
Messages, queued segments, held out-of-order datagrams).  Per input the attacker sends
1-3 rounds of datagrams (fuzz/frames.py ``attack``: built with the codec, then one field
mutated and the LCRC re-stamped; raw bytes; replays) and now and then a stranger sends
one too.  Checked, besides "nothing raises": every datagram is received exactly once
and counted in the cable's counters (the stranger's as ``rx_foreign_datagram``), and
every datagram ``flush`` counts as sent is read off the wire.

``one_input(data)`` is driven by atheris (fuzz_switchrx.py), by ``./gsn fuzz``
(target "switchloop.rx") and by the suite's short runs (test_fuzz_targets.py).
"""

from __future__ import annotations

import socket
from collections import Counter
from types import SimpleNamespace

from daemons import constants as C
from fuzz.draw import Draw
from tests.fuzz.switchfwd_target import recv_all

RIG_INPUTS = 64  # inputs per rig before it is rebuilt (a fresh switch now and then)
STRANGER_EVERY = 5  # every 5th datagram is preceded by a stranger's (not drawn: cheap)


def loopback_cable(sw) -> tuple[list[socket.socket], Counter]:
    """Port 1 of ``sw``'s compiled plane on a loopback UDP socket: the sockets (switch,
    its peer, a stranger) and the cable's counters."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(3)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
        s.setblocking(False)
    counters: Counter = Counter()
    sw.plane.cable(1, SimpleNamespace(sock=socks[0], peer=socks[1].getsockname(), counters=counters, gso=True,
                                      max_sent=0))
    return socks, counters


class Rig:
    def __init__(self) -> None:
        from fuzz.targets_cores import _switch

        self.sw, self.attacker, self.other, self.now = _switch(None, plane=True)
        self.socks, self.cable = loopback_cable(self.sw)
        self.addr = self.socks[0].getsockname()
        self.targets = [C.ULA_BROADCAST, C.ULA_NONE, self.sw.ula, *list(self.sw.table)[:4]]
        self.history: list[bytes] = []
        self.inputs = self.sent = self.strangers = 0

    def usable(self) -> bool:
        return (self.inputs < RIG_INPUTS and self.attacker.up and self.other.up
                and all(p.link.up for p in self.sw.ports.values()))

    def close(self) -> None:
        for s in self.socks:
            s.close()


_RIG: list[Rig] = []


def _rig() -> Rig:
    if _RIG and not _RIG[0].usable():
        _RIG.pop().close()
    if not _RIG:
        _RIG.append(Rig())
    return _RIG[0]


def one_input(data: bytes) -> None:
    from fuzz.frames import attack
    from fuzz.targets_cores import _drain_received

    rig = _rig()
    rig.inputs += 1
    d = Draw(data)
    sw, now = rig.sw, rig.now
    for _ in range(1 + d.below(3)):
        for dgram in attack(d, rig.attacker, sw.ports[1].link, rig.targets, now, rig.history):
            if rig.sent % STRANGER_EVERY == 2:
                rig.socks[2].sendto(b"\x47\x53" + bytes(dgram)[2:], rig.addr)
                rig.strangers += 1
            rig.socks[1].sendto(dgram, rig.addr)  # loopback: queued before sendto returns
            rig.sent += 1
            assert sw.plane.rx(now, C.SWITCH_PLANE_DATAGRAMS) == {1: 1}
        # port 1's datagrams: retransmissions by the timer (Python), the rest built and sent
        # by flush and read off the wire; port 2's neighbour answers in Python
        tx0 = rig.cable["tx_datagrams"]
        out = sw.ports[1].link.handle_timer(now)
        assert sw.plane.flush(now) == {}
        wire = recv_all(rig.socks[1])
        assert rig.cable["tx_datagrams"] - tx0 == len(wire)
        for dg in [*out, *wire]:
            rig.attacker.receive(dg, now)
        for dg in rig.attacker.handle_timer(now):  # the attacker's own retransmissions
            rig.socks[1].sendto(dg, rig.addr)
            rig.sent += 1
            assert sw.plane.rx(now, C.SWITCH_PLANE_DATAGRAMS) == {1: 1}
        _drain_received(rig.attacker)
        link2 = sw.ports[2].link
        for dg in link2.handle_timer(now) + link2.datagrams(now):
            rig.other.receive(dg, now)
        for dg in rig.other.handle_timer(now) + rig.other.datagrams(now):
            link2.receive(dg, now)
            sw.process(2, now)
        _drain_received(rig.other)
        now += d.choice([0.0, 0.001, 0.01, 0.3])
    rig.now = now
    sw.handle_timer(now)
    rx = {k: v for k, v in rig.cable.items() if k.startswith("rx_")}
    assert rx == {k: v for k, v in (("rx_datagrams", rig.sent), ("rx_foreign_datagram", rig.strangers)) if v}, rx
