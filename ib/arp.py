"""ARP over IPoIB (hardware type 32, 20-byte addresses: 56 bytes) and over Ethernet
(type 1, 28 bytes), for rewriting between the two (spec 2.5, 2.10)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .constants import ARPHRD_INFINIBAND, ETH_ARP_BYTES, ETH_P_IP, IPOIB_ARP_BYTES, IPOIB_HWADDR_BYTES

ARPHRD_ETHER = 1
_HDR = struct.Struct("!HHBBH")


@dataclass(frozen=True)
class Arp:
    op: int
    sha: bytes
    spa: bytes
    tha: bytes
    tpa: bytes

    def encode(self) -> bytes:
        hlen = len(self.sha)
        if hlen not in (6, IPOIB_HWADDR_BYTES) or len(self.tha) != hlen or len(self.spa) != 4 or len(self.tpa) != 4:
            raise ValueError("ARP: bad address lengths")
        htype = ARPHRD_INFINIBAND if hlen == IPOIB_HWADDR_BYTES else ARPHRD_ETHER
        return _HDR.pack(htype, ETH_P_IP, hlen, 4, self.op) + self.sha + self.spa + self.tha + self.tpa


def decode(data: bytes, htype: int) -> Arp:
    """An IPv4 ARP packet of hardware type ``htype`` (1 or 32); ValueError if malformed.
    Bytes after the packet (Ethernet padding) are ignored."""
    hlen = IPOIB_HWADDR_BYTES if htype == ARPHRD_INFINIBAND else 6
    size = IPOIB_ARP_BYTES if htype == ARPHRD_INFINIBAND else ETH_ARP_BYTES
    if len(data) < size:
        raise ValueError("ARP: runt")
    ht, pt, hl, pl, op = _HDR.unpack_from(data)
    if ht != htype or pt != ETH_P_IP or hl != hlen or pl != 4:
        raise ValueError("ARP: not IPv4 over this hardware")
    o = _HDR.size
    sha, spa = bytes(data[o:o + hlen]), bytes(data[o + hlen:o + hlen + 4])
    o += hlen + 4
    tha, tpa = bytes(data[o:o + hlen]), bytes(data[o + hlen:o + hlen + 4])
    return Arp(op, sha, spa, tha, tpa)
