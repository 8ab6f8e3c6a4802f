"""Other SANs, emulated over UDP (spec pktway.md §3.8): a generic datagram fabric
is one switch process with numbered ports, each port a UDP address.  A node sends
``[out port, 0x03, 0x00] + packet`` to the switch;
the switch consumes the port byte and delivers ``[in port, 0x03, 0x00] + packet``
(the route back, PC) to the output port.  A native route, and the L2RH of such a
SAN, is those three bytes.

:class:`SanSwitch` is the switch's sans-IO core; :class:`UdpSanPort` is a node's
blocking port (the subset of :class:`~daemons.ulpclient.UlpClient` that
:class:`~pktwayd.node.Node` uses), :class:`AsyncSanPort` a half-router's.
"""

from __future__ import annotations

import socket
from collections import Counter

import trio

from daemons.runtime.oserrors import count_udp_error
from daemons.wire.errors import DecodeError
from daemons.wire.ulp import Frame, Op

from .constants import ETHERTYPE_PKTWAY, MYRINET_TYPE

TYPE = MYRINET_TYPE.to_bytes(2, "big")
MAX_DATAGRAM = 65507


def native(port: int) -> bytes:
    if not 0 <= port <= 255:
        raise ValueError(f"port {port} is not 0..255")
    return bytes((port,)) + TYPE


def split(datagram: bytes) -> tuple[bytes, bytes]:
    """(route, packet) of a datagram; DecodeError if it has no native header."""
    if len(datagram) < 3:
        raise DecodeError("native", len(datagram), "shorter than the 3-byte native header")
    if datagram[1:3] != TYPE:
        raise DecodeError("native", 1, f"type {datagram[1:3].hex()} is not 0300")
    return bytes(datagram[:3]), bytes(datagram[3:])


class SanSwitch:
    def __init__(self, ports: dict[int, tuple[str, int]], mtu: int = 0) -> None:
        self.ports = dict(ports)
        self.by_addr = {a: p for p, a in self.ports.items()}
        self.mtu = mtu  # largest packet in bytes (0 = what a datagram holds)
        self.counters: Counter[str] = Counter()

    def receive(self, src: tuple[str, int], datagram: bytes) -> list[tuple[tuple[str, int], bytes]]:
        c = self.counters
        in_port = self.by_addr.get(src)
        if in_port is None:
            c["drop_unknown_sender"] += 1
            return []
        try:
            route, packet = split(datagram)
        except DecodeError:
            c["drop_bad_header"] += 1
            return []
        dst = self.ports.get(route[0])
        if dst is None:
            c["drop_no_such_port"] += 1
            return []
        if self.mtu and len(packet) > self.mtu:
            c["drop_over_mtu"] += 1
            return []
        c[f"port{in_port}_rx"] += 1
        c[f"port{route[0]}_tx"] += 1
        return [(dst, native(in_port) + packet)]


class UdpSanPort:
    """A node's port on an emulated SAN (blocking)."""

    def __init__(self, switch: tuple[str, int], local: tuple[str, int], my_port: int) -> None:
        self.switch = switch
        self.own = native(my_port)
        self.sock = socket.socket(socket.AF_INET6 if ":" in local[0] else socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(local)

    def bind(self, ethertype: int) -> Frame:
        return Frame(Op.STATUS, 1, ethertype, self.own)

    def send(self, route: bytes, payload: bytes, *, vc: int = 1, ethertype: int = ETHERTYPE_PKTWAY) -> None:
        self.sock.sendto(bytes(route) + bytes(payload), self.switch)

    def recv(self, timeout: float | None = None) -> Frame:
        while True:
            self.sock.settimeout(timeout)
            data, addr = self.sock.recvfrom(MAX_DATAGRAM + 1)
            if addr[:2] != self.switch:
                continue  # only the switch talks to a port
            try:
                route, packet = split(data)
            except DecodeError:
                continue
            return Frame(Op.RECV, 1, ETHERTYPE_PKTWAY, route, packet)

    def close(self) -> None:
        self.sock.close()


class AsyncSanPort:
    """A half-router's port on an emulated SAN (trio): the ``send_nowait`` of the ULP
    client, and a receive loop handing ``Frame``s (ula = the route back) to ``on_frame``."""

    def __init__(self, switch: tuple[str, int], local: tuple[str, int]) -> None:
        self.switch = switch
        self.sock = socket.socket(socket.AF_INET6 if ":" in local[0] else socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(local)
        self.sock.setblocking(False)
        self.counters: Counter[str] = Counter()

    def send_nowait(self, route: bytes, payload: bytes, *, vc: int = 1, ethertype: int = ETHERTYPE_PKTWAY) -> None:
        data = bytes(route) + bytes(payload)
        if len(data) > MAX_DATAGRAM:
            self.counters["tx_drop_too_big"] += 1
            return
        try:
            self.sock.sendto(data, self.switch)
        except OSError as exc:
            count_udp_error(self.counters, exc)

    async def run(self, on_frame) -> None:
        while True:
            await trio.lowlevel.wait_readable(self.sock)
            while True:
                try:
                    data, addr = self.sock.recvfrom(MAX_DATAGRAM + 1)
                except BlockingIOError:
                    break
                except OSError as exc:  # ICMP unreachable from an earlier send
                    count_udp_error(self.counters, exc, prefix="rx_error_")
                    continue
                if addr[:2] != self.switch:
                    self.counters["rx_foreign"] += 1
                    continue
                try:
                    route, packet = split(data)
                except DecodeError:
                    self.counters["rx_bad_header"] += 1
                    continue
                on_frame(Frame(Op.RECV, 1, ETHERTYPE_PKTWAY, route, packet), trio.current_time())
            await trio.lowlevel.checkpoint()
