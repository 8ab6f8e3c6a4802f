"""IP packets as the pw0 interface sees them: the destination of an IPv4 or IPv6
packet read from the TUN device, and the ICMP errors a PacketWay node hands back
to its own IP stack when a route's MTU is too small (ICMPv4 "fragmentation
needed", RFC 792/1191; ICMPv6 "packet too big", RFC 4443).  Every input is
hostile: malformed packets give None, never an exception."""

from __future__ import annotations

import ipaddress
import struct
from typing import TypeAlias

from .constants import ICMP_HOP_LIMIT, PT_IPV4, PT_IPV6

IP: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address

IPV6_MIN_MTU = 1280


def _fold(total: int) -> int:
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071)."""
    if len(data) % 2:
        data += b"\0"
    return ~_fold(sum(struct.unpack(f">{len(data) // 2}H", data))) & 0xFFFF


def addresses(packet: bytes) -> tuple[int, bytes, bytes] | None:
    """(PT, source bytes, destination bytes) of an IP packet, or None if it is neither a
    whole IPv4 header nor a whole IPv6 header (or claims more bytes than it has)."""
    if len(packet) < 1:
        return None
    version = packet[0] >> 4
    if version == 4 and len(packet) >= 20:
        ihl = (packet[0] & 0xF) * 4
        total = (packet[2] << 8) | packet[3]
        if ihl < 20 or total < ihl or total > len(packet):
            return None
        return PT_IPV4, bytes(packet[12:16]), bytes(packet[16:20])
    if version == 6 and len(packet) >= 40:
        if 40 + ((packet[4] << 8) | packet[5]) > len(packet):
            return None
        return PT_IPV6, bytes(packet[8:24]), bytes(packet[24:40])
    return None


def parse(packet: bytes) -> tuple[int, IP, IP] | None:
    """(PT, source, destination) of an IP packet as ``ipaddress`` objects, or None (see
    :func:`addresses`)."""
    head = addresses(packet)
    if head is None:
        return None
    return head[0], ipaddress.ip_address(head[1]), ipaddress.ip_address(head[2])


def is_group(addr: bytes) -> bool:
    """An IPv4 multicast or limited-broadcast destination, or an IPv6 multicast one
    (what goes to a PacketWay logical or broadcast address)."""
    return addr[0] == 0xFF if len(addr) == 16 else addr[0] & 0xF0 == 0xE0 or addr == b"\xff\xff\xff\xff"


def dont_fragment(packet: bytes) -> bool:
    """IPv6 is never fragmented on the way; IPv4 only without DF."""
    return packet[0] >> 4 == 6 or bool(packet[6] & 0x40)


def too_big(packet: bytes, mtu: int) -> bytes | None:
    """The ICMP error telling the sender of ``packet`` (a parsable IP packet, possibly
    truncated) that the path holds only ``mtu`` bytes.  Its source is the packet's
    destination (project choice: PacketWay routers have no IP address, and Linux drops
    an error whose source is one of its own addresses as a martian)."""
    head = parse_head(packet)
    if head is None:
        return None
    version, src, dst = head
    if version == 4:
        ihl = (packet[0] & 0xF) * 4
        quote = packet[: ihl + 8]
        icmp = struct.pack(">BBHHH", 3, 4, 0, 0, min(mtu, 0xFFFF)) + quote
        icmp = icmp[:2] + struct.pack(">H", checksum(icmp)) + icmp[4:]
        ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0xC0, 20 + len(icmp), 0, 0, ICMP_HOP_LIMIT, 1, 0, dst, src)
        ip = ip[:10] + struct.pack(">H", checksum(ip)) + ip[12:]
        return ip + icmp
    quote = packet[: IPV6_MIN_MTU - 48]
    body = struct.pack(">BBHI", 2, 0, 0, mtu) + quote
    pseudo = dst + src + struct.pack(">I3xB", len(body), 58)
    body = body[:2] + struct.pack(">H", checksum(pseudo + body)) + body[4:]
    return struct.pack(">IHBB16s16s", 6 << 28, len(body), 58, ICMP_HOP_LIMIT, dst, src) + body


def parse_head(packet: bytes) -> tuple[int, bytes, bytes] | None:
    """(version, source bytes, destination bytes) from a header that may be followed by
    only part of its payload (the copy a router returns), or None."""
    if len(packet) >= 20 and packet[0] >> 4 == 4 and (packet[0] & 0xF) >= 5 and len(packet) >= (packet[0] & 0xF) * 4:
        return 4, bytes(packet[12:16]), bytes(packet[16:20])
    if len(packet) >= 40 and packet[0] >> 4 == 6:
        return 6, bytes(packet[8:24]), bytes(packet[24:40])
    return None


PT_OF_VERSION = {4: PT_IPV4, 6: PT_IPV6}
