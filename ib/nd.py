"""IPv6 Neighbor Discovery link-layer address options, rewritten between Ethernet's
8-byte form and IPoIB's 24-byte form (type, length 3, 2 padding bytes, 20-byte
address) with the payload length and ICMPv6 checksum fixed (spec 2.5, 2.10)."""

from __future__ import annotations

import struct
from collections.abc import Callable

from .constants import IPOIB_HWADDR_BYTES, ND_OPT_ETH_BYTES, ND_OPT_IB_BYTES

ICMPV6 = 58
ND_TYPES = {133: 8, 134: 16, 135: 24, 136: 24, 137: 40}  # ICMPv6 type -> bytes before the options
LLA_OPTIONS = (1, 2)  # source, target link-layer address
IPV6_HDR = 40


def checksum(src: bytes, dst: bytes, icmp: bytes) -> int:
    data = src + dst + struct.pack("!I3xB", len(icmp), ICMPV6) + icmp
    if len(data) % 2:
        data += b"\0"
    s: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def rewrite(ip6: bytes, to_ib: bool, mapper: Callable[[bytes], bytes | None]) -> bytes | None:
    """``ip6`` with each SLLA/TLLA option converted (``mapper`` maps the old address
    to the new one; None = unknown).  Non-ND packets come back unchanged; None when
    the ND packet is malformed or an address cannot be mapped."""
    if len(ip6) < IPV6_HDR or ip6[0] >> 4 != 6 or ip6[6] != ICMPV6:
        return ip6
    plen = int.from_bytes(ip6[4:6], "big")
    icmp = ip6[IPV6_HDR:IPV6_HDR + plen]
    if len(icmp) != plen or plen < 4 or icmp[0] not in ND_TYPES:
        return ip6
    fixed = ND_TYPES[icmp[0]]
    if plen < fixed:
        return None
    src_len, dst_len = (ND_OPT_ETH_BYTES, ND_OPT_IB_BYTES) if to_ib else (ND_OPT_IB_BYTES, ND_OPT_ETH_BYTES)
    out = bytearray(icmp[:fixed])
    o = fixed
    while o < plen:
        if o + 2 > plen:
            return None
        otype, olen = icmp[o], icmp[o + 1] * 8
        if olen == 0 or o + olen > plen:
            return None
        if otype in LLA_OPTIONS:
            if olen != src_len:
                return None
            old = icmp[o + 2:o + 2 + (6 if to_ib else IPOIB_HWADDR_BYTES)] if to_ib else icmp[o + 4:o + 24]
            new = mapper(bytes(old))
            if new is None:
                return None
            if to_ib:
                out += bytes([otype, dst_len // 8, 0, 0]) + new
            else:
                out += bytes([otype, dst_len // 8]) + new
        else:
            out += icmp[o:o + olen]
        o += olen
    out[2:4] = b"\0\0"
    out[2:4] = checksum(ip6[8:24], ip6[24:40], bytes(out)).to_bytes(2, "big")
    return ip6[:4] + len(out).to_bytes(2, "big") + ip6[6:IPV6_HDR] + bytes(out)
