"""A ServerNet router's sans-IO core (spec §1.1, §1.8): numbered ports, each a UDP
address (an end node's fabric socket or another router's); forwarding by the DID
through a routing table, reading only the first 3 packet bytes to choose the port;
a bad CRC is forwarded tagged TPB ("this packet bad"), not dropped.  One router
serves one fabric: a datagram whose envelope names the other fabric is dropped, so
X and Y never exchange packets.  snet-router runs the same decisions compiled
(servernet/_snetfwd.c, over ``route_table``); :class:`RouterCore` is their oracle."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .codec import MIN_PACKET, crc_ok
from .constants import (ENVELOPE_BYTES, ENVELOPE_MAGIC, ENVELOPE_VERSION, FLAG_FABRIC, FLAG_II, FLAG_TPB,
                        FLAGS_KNOWN, ID_BITS, ID_MAX, MAX_DATAGRAM, MAX_DATAGRAM_II, ROUTE_BYTES)

Addr = tuple[str, int]
NO_PORT = 0xFF  # a DID no route covers, in route_table
_HEAD = (ENVELOPE_MAGIC >> 8, ENVELOPE_MAGIC & 0xFF, ENVELOPE_VERSION)


@dataclass(frozen=True)
class Route:
    """DIDs whose upper ``bits`` bits equal those of ``did`` leave by ``port``."""

    did: int
    bits: int
    port: int

    def matches(self, did: int) -> bool:
        shift = ID_BITS - self.bits
        return (did >> shift) == (self.did >> shift)


def route_table(routes: list[Route]) -> bytes:
    """One byte per 20-bit DID: the port it leaves by (longest prefix), NO_PORT for none;
    what the compiled router (servernet/_snetfwd.c) looks up."""
    table = bytearray([NO_PORT]) * (1 << ID_BITS)
    for r in sorted(routes, key=lambda r: r.bits):  # longer prefixes overwrite shorter ones
        size = 1 << (ID_BITS - r.bits)
        start = r.did & ~(size - 1)
        table[start:start + size] = bytes([r.port]) * size
    return bytes(table)


def parse_route(text: str) -> Route:
    """``DID=PORT`` (one ID) or ``DID/BITS=PORT`` (a prefix, e.g. a node's upper 6 bits);
    numbers in any Python base (0x...); ValueError with the reason."""
    lhs, sep, port = text.partition("=")
    did_s, slash, bits_s = lhs.partition("/")
    try:
        did, prt = int(did_s, 0), int(port, 0)
        bits = int(bits_s, 0) if slash else ID_BITS
    except ValueError:
        raise ValueError(f"{text!r} is not DID=PORT or DID/BITS=PORT") from None
    if not sep or not 0 <= did <= ID_MAX or not 0 <= bits <= ID_BITS:
        raise ValueError(f"{text!r}: DID is 20-bit (0..{ID_MAX:#x}), BITS 0..{ID_BITS}")
    if did & ((1 << (ID_BITS - bits)) - 1):
        raise ValueError(f"{text!r}: DID has bits set beyond the /{bits} prefix")
    return Route(did, bits, prt)


class RouterCore:
    def __init__(self, fabric: int, ports: dict[int, Addr], routes: list[Route],
                 enables: dict[int, frozenset[int]] | None = None) -> None:
        for r in routes:
            if r.port not in ports:
                raise ValueError(f"route {r.did:#x}/{r.bits} leaves by port {r.port}, which is not cabled")
        self.fabric = fabric
        self.ports = dict(ports)
        self.by_addr = {a: p for p, a in self.ports.items()}
        self.routes = sorted(routes, key=lambda r: -r.bits)  # longest prefix first
        self.enables = enables or {}  # in port -> out ports it may use (deadlock masks), all when absent
        self.cache: dict[int, int | None] = {}
        self.counters: Counter[str] = Counter()
        self.keys = {p: (f"port{p}_rx", f"port{p}_tx") for p in self.ports}

    def lookup(self, did: int) -> int | None:
        try:
            return self.cache[did]
        except KeyError:
            pass
        port = next((r.port for r in self.routes if r.matches(did)), None)
        if len(self.cache) < (1 << 16):
            self.cache[did] = port
        return port

    def receive(self, src: Addr, datagram: bytes) -> tuple[Addr, bytes] | None:
        """Where the datagram goes next, or None (counted) when it goes nowhere."""
        c = self.counters
        in_port = self.by_addr.get(src)
        if in_port is None:
            c["drop_unknown_sender"] += 1
            return None
        n = len(datagram)
        if n < ENVELOPE_BYTES + MIN_PACKET:
            c["drop_runt"] += 1
            return None
        flags = datagram[3]
        if (datagram[0], datagram[1], datagram[2]) != _HEAD or flags & ~FLAGS_KNOWN:
            c["drop_bad_envelope"] += 1
            return None
        if (flags & FLAG_FABRIC) != self.fabric:
            c["drop_wrong_fabric"] += 1
            return None
        if n > (MAX_DATAGRAM_II if flags & FLAG_II else MAX_DATAGRAM):
            c["drop_oversize"] += 1
            return None
        # the first 3 packet bytes choose the port
        did = int.from_bytes(datagram[ENVELOPE_BYTES:ENVELOPE_BYTES + ROUTE_BYTES], "big") >> 4
        out = self.lookup(did)
        if out is None:
            c["drop_no_route"] += 1
            return None
        allowed = self.enables.get(in_port)
        if allowed is not None and out not in allowed:
            c["drop_port_disabled"] += 1
            return None
        if not flags & FLAG_TPB and not crc_ok(memoryview(datagram)[ENVELOPE_BYTES:]):
            c["tagged_bad_crc"] += 1
            datagram = bytes(datagram[:3]) + bytes((flags | FLAG_TPB,)) + bytes(datagram[4:])
        c[self.keys[in_port][0]] += 1
        c[self.keys[out][1]] += 1
        return self.ports[out], datagram
