"""An in-memory InfiniBand-style subnet on virtual time: the SM, switch and port cores
wired together directly (no sockets), for the core tests."""

from __future__ import annotations

import ipaddress
import struct

from ib import addr, arp, mgmt
from ib.partitions import Partition
from ib.portcore import PortCore
from ib.smcore import SmCore
from ib.switchcore import SwitchCore

GUID_BASE = 0x0002C90300000000


def guid(i: int) -> int:
    return GUID_BASE + i


class Net:
    """``links``: (("sw", n), port, ("sw", m) | ("ca", host), port) cables.  Hosts are
    named 1..n; each has interfaces [(name, pkey | None)]."""

    def __init__(self, switches: dict[int, list[int]], hosts: dict[int, list[tuple[str, int | None]]],
                 links: list[tuple], partitions: list[Partition] | None = None, epoch: int = 1) -> None:
        self.now = 0.0
        self.partitions = partitions or [Partition("default", 0x7FFF, all="full")]
        self.lids: dict[int, int] = {}
        self.sm: SmCore | None = SmCore(epoch, self.partitions, self.lids)
        self.sw = {n: SwitchCore(0x1000 + n, ports) for n, ports in switches.items()}
        self.hosts = {h: PortCore(guid(h), guid(h), ifs) for h, ifs in hosts.items()}
        self.cable: dict[tuple, tuple] = {}
        for a, pa, b, pb in links:
            self.cable[(a, pa)] = (b, pb)
            self.cable[(b, pb)] = (a, pa)
        self.tap: dict[tuple[int, str], list[bytes]] = {(h, i): [] for h, ifs in hosts.items() for i, _ in ifs}
        self.carrier: dict[tuple[int, str], tuple[bool, int]] = {}
        self.queue: list = []
        self.hold_kinds: set = set()  # SA reply kinds held back while set
        self.held: list = []
        self._seq = 0

    # --- plumbing -------------------------------------------------------------------
    def _post(self, fn, *args) -> None:
        self.queue.append((fn, args))

    def _drain_host(self, h: int) -> None:
        for item in self.hosts[h].outgoing():
            if item[0] == "cable":
                self._post(self._to_cable, ("ca", h), 1, item[1])
            elif item[0] == "sm":
                self._post(self._to_sm, ("h", h), item[1])
            elif item[0] == "tap":
                self.tap[(h, item[1])].append(item[2])
            elif item[0] == "carrier":
                self.carrier[(h, item[1])] = (item[2], item[3])

    def _drain_switch(self, n: int) -> None:
        for item in self.sw[n].outgoing():
            if item[0] == "cable":
                self._post(self._to_cable, ("sw", n), item[1], item[2])
            else:
                self._post(self._to_sm, ("sw", n), item[1])

    def _to_cable(self, node, port, data) -> None:
        peer = self.cable.get((node, port))
        if peer is None:
            return
        (kind, n), p = peer
        if kind == "sw":
            for out, d in self.sw[n].on_cable(p, data, self.now):
                self._post(self._to_cable, ("sw", n), out, d)
        else:
            self.hosts[n].on_cable(data, self.now)
            self._drain_host(n)

    def _to_sm(self, src, data) -> None:
        if self.sm is None:
            return
        self.sm.on_datagram(data, src, self.now)
        self._drain_sm()

    def _drain_sm(self) -> None:
        for dst, data in self.sm.outgoing():
            if mgmt.decode(data).kind in self.hold_kinds:
                self.held.append((dst, data))
            else:
                self._post(self._from_sm, dst, data)

    def _from_sm(self, dst, data) -> None:
        kind, n = dst
        if kind == "h":
            self.hosts[n].on_sm(data, self.now)
            self._drain_host(n)
        else:
            self.sw[n].on_sm(data)

    def release_held(self) -> None:
        for dst, data in self.held:
            self._post(self._from_sm, dst, data)
        self.held = []
        self.settle()

    def settle(self) -> None:
        while self.queue:
            fn, args = self.queue.pop(0)
            fn(*args)

    def run(self, seconds: float) -> None:
        end = self.now + seconds
        while True:
            self.settle()
            cores = [c for c in [self.sm, *self.sw.values(), *self.hosts.values()] if c is not None]
            t = min(c.timer() for c in cores)
            if t > end:
                break
            self.now = max(self.now, t)
            for c in cores:
                if c.timer() <= self.now:
                    c.handle_timer(self.now)
            if self.sm is not None:
                self._drain_sm()
            for n in self.sw:
                self._drain_switch(n)
            for h in self.hosts:
                self._drain_host(h)
        self.now = end
        self.settle()

    # --- SM life ---------------------------------------------------------------------------
    def kill_sm(self) -> None:
        self.lids = dict(self.sm.lids)  # what the SM's state file holds
        self.sm = None

    def start_sm(self, epoch: int) -> None:
        self.sm = SmCore(epoch, self.partitions, self.lids)

    # --- the kernel side of a TAP ------------------------------------------------------------
    def send(self, h: int, ifname: str, frame: bytes) -> None:
        self.hosts[h].on_tap(ifname, frame, self.now)
        self._drain_host(h)
        self.settle()

    def frames(self, h: int, ifname: str = "ib0") -> list[bytes]:
        out = self.tap[(h, ifname)]
        self.tap[(h, ifname)] = []
        return out

    def mac(self, h: int) -> bytes:
        return addr.lemac(guid(h))


def ipv4(a: str) -> bytes:
    return ipaddress.IPv4Address(a).packed


def arp_request(src_mac: bytes, src_ip: str, dst_ip: str) -> bytes:
    body = arp.Arp(1, src_mac, ipv4(src_ip), bytes(6), ipv4(dst_ip)).encode()
    return b"\xff" * 6 + src_mac + b"\x08\x06" + body


def arp_reply(src_mac: bytes, src_ip: str, dst_mac: bytes, dst_ip: str) -> bytes:
    body = arp.Arp(2, src_mac, ipv4(src_ip), dst_mac, ipv4(dst_ip)).encode()
    return dst_mac + src_mac + b"\x08\x06" + body


def ip_frame(src_mac: bytes, dst_mac: bytes, src: str, dst: str, data: bytes) -> bytes:
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(data), 0, 0, 64, 253, 0, ipv4(src), ipv4(dst))
    return dst_mac + src_mac + b"\x08\x00" + hdr + data
