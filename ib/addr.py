"""IPoIB addresses: GIDs, the 20-byte hardware address, multicast GIDs per P_Key (spec
2.3, 2.4) and the eIPoIB-style 6-byte MACs that stand for them on a TAP (spec 2.10)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from .constants import (GUID_MAC_BYTES, IPOIB_HWADDR_BYTES, PKEY_FULL, QPN_MCAST, REMAC_QPN_LA,
                        SCOPE_LINK_LOCAL)


def gid(prefix: int, guid: int) -> bytes:
    """Port GID = 64-bit subnet prefix + 64-bit port GUID."""
    return prefix.to_bytes(8, "big") + guid.to_bytes(8, "big")


def gid_text(g: bytes) -> str:
    return str(ipaddress.IPv6Address(g))


def is_mgid(g: bytes) -> bool:
    return len(g) == 16 and g[0] == 0xFF


@dataclass(frozen=True)
class HwAddr:
    """flags (byte 0), QPN (bytes 1..3), GID (bytes 4..19)."""

    qpn: int
    gid: bytes
    flags: int = 0

    def pack(self) -> bytes:
        return bytes([self.flags]) + self.qpn.to_bytes(3, "big") + self.gid

    @classmethod
    def unpack(cls, b: bytes) -> HwAddr:
        if len(b) != IPOIB_HWADDR_BYTES:
            raise ValueError(f"an IPoIB hardware address is {IPOIB_HWADDR_BYTES} bytes, not {len(b)}")
        return cls(int.from_bytes(b[1:4], "big"), bytes(b[4:]), b[0])

    @property
    def multicast(self) -> bool:
        return self.gid[0] == 0xFF  # byte 4 of the address [LNX]

    def text(self) -> str:
        return ":".join(f"{x:02x}" for x in self.pack())


def full_pkey(pkey: int) -> int:
    return pkey | PKEY_FULL


def mgid_ipv4(group: str | ipaddress.IPv4Address, pkey: int, scope: int = SCOPE_LINK_LOCAL) -> bytes:
    """ff1s:401b:PPPP:0000:0000:0000:GGGG:GGGG with G = the low 28 bits of the group."""
    g = int(ipaddress.IPv4Address(group)) & 0x0FFFFFFF
    if str(group) == "255.255.255.255":
        g = 0xFFFFFFFF
    return bytes([0xFF, 0x10 | scope, 0x40, 0x1B]) + full_pkey(pkey).to_bytes(2, "big") + bytes(6) + g.to_bytes(4, "big")


def mgid_ipv6(group: str | ipaddress.IPv6Address, pkey: int, scope: int = SCOPE_LINK_LOCAL) -> bytes:
    """ff1s:601b:PPPP + the low 80 bits (bytes 6..15) of the IPv6 group."""
    g = ipaddress.IPv6Address(group).packed
    return bytes([0xFF, 0x10 | scope, 0x60, 0x1B]) + full_pkey(pkey).to_bytes(2, "big") + g[6:]


def broadcast_mgid(pkey: int, scope: int = SCOPE_LINK_LOCAL) -> bytes:
    return mgid_ipv4("255.255.255.255", pkey, scope)


def broadcast_hwaddr(pkey: int) -> HwAddr:
    """00 ff ff ff | ff 12 40 1b PP PP 00.. ff ff ff ff [LNX]."""
    return HwAddr(QPN_MCAST, broadcast_mgid(pkey))


def lemac(guid: int) -> bytes:
    """Our local MAC: GUID bytes 0, 1, 2, 5, 6, 7 (mask 0xE7) [IPXE]."""
    g = guid.to_bytes(8, "big")
    return bytes(g[i] for i in GUID_MAC_BYTES)


def remac(qpn: int, lid: int) -> bytes:
    """A remote port's MAC: (QPN | 0x02000000) as 4 bytes + LID as 2 [IPXE]."""
    return ((qpn & 0xFFFFFF) | REMAC_QPN_LA).to_bytes(4, "big") + (lid & 0xFFFF).to_bytes(2, "big")


def mcast_mac_for_mgid(mgid: bytes) -> bytes:
    """The Ethernet multicast MAC Linux expects for the group an MGID stands for."""
    if mgid[2:4] == b"\x60\x1b":
        return b"\x33\x33" + mgid[12:16]
    if mgid[12:16] == b"\xff\xff\xff\xff":
        return b"\xff" * 6
    return b"\x01\x00\x5e" + bytes([mgid[13] & 0x7F]) + mgid[14:16]
