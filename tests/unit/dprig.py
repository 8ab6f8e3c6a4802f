"""Two gsnd Endpoints with the data plane attached, on real descriptors but no
namespaces: the cable is a pair of UDP sockets on 127.0.0.1, each "TAP" one end of an
AF_UNIX datagram socketpair (one read, one frame; the test holds the other end).
Time is virtual: the rig steps it.  Used by test_dataplane.py and the dataplane fuzz
target."""

from __future__ import annotations

import random
import socket

from daemons.constants import IP_MTU as MTU
from daemons.endpoint.core import Endpoint, UlaChanged
from daemons.gsnd.dataplane import DataPlane
from daemons.io.udp import UdpTransport

ULAS = (bytes.fromhex("020000000001"), bytes.fromhex("020000000002"))


class FakeTap:
    def __init__(self, vnet: bool = False) -> None:
        """``vnet``: frames behind a virtio_net_hdr, as gsnd's TAP (daemons/wire/vnet.py)."""
        self.vnet = vnet
        self.inner, self.outer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        for s in (self.inner, self.outer):
            s.setblocking(False)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.fd = self.inner.fileno()

    def frames(self) -> list[bytes]:
        out = []
        while True:
            try:
                out.append(self.outer.recv(70000))
            except BlockingIOError:
                return out

    def close(self) -> None:
        self.inner.close()
        self.outer.close()


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Rig:
    def __init__(self, seed: int = 0, arp: bool = True, mtu: int = MTU, dataplane: bool = True,
                 now: float = 0.0, key: bytes | None = None, vnet: tuple[bool, bool] = (False, False)) -> None:
        """dataplane=False: the Python path (no pumps; bench/dataplane_cost.py compares).
        ``now``: the endpoints' start time (trio's, when the rig runs in trio).
        ``key``: a keyed cable (both ends hold it).  ``vnet``: per side, the TAP's frames carry
        a virtio_net_hdr (gsnd's TAP while the compiled data plane runs)."""
        pa, pb = _free_ports(2)
        self.now = now
        self.transports = [UdpTransport(("127.0.0.1", pa), ("127.0.0.1", pb), key=key),
                           UdpTransport(("127.0.0.1", pb), ("127.0.0.1", pa), key=key)]
        self.taps = [FakeTap(vnet[0]), FakeTap(vnet[1])]
        self.eps = [Endpoint(7, now, ula=ULAS[i], rng=random.Random(seed + i), max_payload=4 << 20)
                    for i in (0, 1)]
        self.dps = [DataPlane(self.eps[i], self.transports[i], self.taps[i], mtu=mtu, arp=arp,
                              wants=lambda et: False) for i in (0, 1)] if dataplane else None
        self.up_events = [[], []]
        self.messages = [[], []]  # MessageIn events that reached Python

    def step(self, dt: float = 0.001) -> None:
        self.now += dt
        for i in (0, 1):
            ep, dp = self.eps[i], self.dps[i] if self.dps else None
            dgrams = ep.handle_timer(self.now) + ep.link.datagrams(self.now)
            if dgrams:
                (dp.send_many if dp else self.transports[i].send_many)(dgrams)
        for i in (0, 1):
            if self.dps:
                self.dps[i].rx(self.now)
            else:
                for d in self.transports[i].drain():
                    self.eps[i].link.receive(d, self.now)
            self.eps[i].process(self.now)
            for ev in self.eps[i].events():
                if isinstance(ev, UlaChanged) and self.dps:
                    self.dps[i].set_ula(ev.ula)
                self.up_events[i].append(ev)
                if type(ev).__name__ == "MessageIn":
                    self.messages[i].append(ev.message)

    def bring_up(self) -> None:
        for _ in range(400):
            self.step()
            if all(ep.link.up and ep.ula for ep in self.eps):
                return
        raise AssertionError("the rig's links did not come up")

    def send_frames(self, i: int, frames) -> int:
        for f in frames:
            self.taps[i].outer.send(f)
        n = self.dps[i].tap_batch(1 << 30)
        for _ in range(20):
            self.step()
        return n

    def close(self) -> None:
        for dp in self.dps or ():
            dp.close()
        for t in self.transports:
            t.close()
        for t in self.taps:
            t.close()
