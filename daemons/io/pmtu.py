"""Cable datagrams that fit the underlay: path MTU, Don't Fragment, micropackets per datagram.

A cable datagram is IP header + UDP header + shim + N micropackets (+ the 32-byte
auth trailer on a keyed cable, ``overhead`` below).  Sent whole
(Don't Fragment set), one lost IP packet loses only its N micropackets, not the
~1,600 of a 64 KB datagram split into ~44 fragments.  N (``max_mps``) follows
from the MTU of the path to the peer:

    max_mps = (mtu - ip_header - 8 - SHIM_BYTES - overhead) // MP_BYTES, clamped to 1..MAX_DATAGRAM_MPS

Python 3.11's socket module lacks the Linux constants; they are spelled here.
"""

from __future__ import annotations

import fcntl
import socket
import struct

from ..constants import MAX_DATAGRAM_MPS, MP_BYTES, SHIM_BYTES

# <linux/in.h>, <linux/in6.h>, <linux/udp.h>, <linux/sockios.h>
IP_MTU_DISCOVER, IP_PMTUDISC_DO, IP_MTU = 10, 2, 14
IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO, IPV6_MTU = 23, 2, 24
SOL_UDP, UDP_SEGMENT, UDP_GRO = 17, 103, 104
SIOCGIFADDR, SIOCGIFMTU = 0x8915, 0x8921

UDP_HEADER = 8
DEFAULT_MTU = 1500
MAX_MTU = 65535


def ip_header(family: int) -> int:
    return 40 if family == socket.AF_INET6 else 20


def family_of(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def min_mtu(family: int, overhead: int = 0) -> int:
    """The smallest MTU that carries one micropacket (100 bytes IPv4, 120 IPv6; plus
    ``overhead``, the auth trailer of a keyed cable)."""
    return ip_header(family) + UDP_HEADER + SHIM_BYTES + MP_BYTES + overhead


def max_mps_for(mtu: int, family: int, overhead: int = 0) -> int:
    n = (mtu - ip_header(family) - UDP_HEADER - SHIM_BYTES - overhead) // MP_BYTES
    return max(1, min(MAX_DATAGRAM_MPS, n))


def check_mtu(mtu: int, family: int, overhead: int = 0) -> int:
    """Config check: ValueError (one line) if ``mtu`` cannot carry a micropacket."""
    lo = min_mtu(family, overhead)
    if not lo <= mtu <= MAX_MTU:
        v = "IPv6" if family == socket.AF_INET6 else "IPv4"
        trailer = f", one 40-byte micropacket and the {overhead}-byte auth trailer" if overhead else \
            " and one 40-byte micropacket"
        raise ValueError(f"{mtu} is outside {lo}..{MAX_MTU} (an {v} datagram must hold the 32-byte shim{trailer})")
    return mtu


def set_dont_fragment(sock: socket.socket) -> None:
    """PMTUDISC_DO: never fragment locally; a datagram over the path MTU fails with EMSGSIZE."""
    if sock.family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO)
    else:
        sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)


def path_mtu(peer: tuple[str, int], local_host: str | None = None) -> tuple[int, str]:
    """The MTU of the route to ``peer`` and where it came from: ``"path"`` (IP_MTU of a
    socket connected to the peer: the kernel's path MTU, ICMP-learnt drops included),
    ``"interface"`` (the outgoing interface's MTU), or ``"default"`` (1500)."""
    family = family_of(peer[0])
    src = None
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            if local_host and local_host not in ("0.0.0.0", "::"):
                s.bind((local_host, 0))  # the route from the cable's own address
            set_dont_fragment(s)
            s.connect(peer)
            src = s.getsockname()[0]
            level, opt = (socket.IPPROTO_IPV6, IPV6_MTU) if family == socket.AF_INET6 else (socket.IPPROTO_IP, IP_MTU)
            mtu = s.getsockopt(level, opt)
            if mtu > 0:
                return mtu, "path"
    except OSError:
        pass
    if_mtu = interface_mtu(src, family) if src else None
    return (if_mtu, "interface") if if_mtu else (DEFAULT_MTU, "default")


def interface_mtu(src_ip: str, family: int) -> int | None:
    """The MTU of the interface holding ``src_ip`` (the kernel route's source address)."""
    name = None
    try:
        if family == socket.AF_INET6:
            want_hex = socket.inet_pton(socket.AF_INET6, src_ip).hex()
            with open("/proc/net/if_inet6") as f:
                for line in f:
                    fields = line.split()
                    if fields and fields[0] == want_hex:
                        name = fields[-1]
                        break
        else:
            want = socket.inet_aton(src_ip)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                for _idx, ifname in socket.if_nameindex():
                    try:
                        res = fcntl.ioctl(s, SIOCGIFADDR, struct.pack("16s24x", ifname.encode()[:15]))
                    except OSError:
                        continue
                    if res[20:24] == want:
                        name = ifname
                        break
        if name is None:
            return None
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            res = fcntl.ioctl(s, SIOCGIFMTU, struct.pack("16s24x", name.encode()[:15]))
        return struct.unpack_from("i", res, 16)[0] or None
    except (OSError, ValueError):
        return None


_SEQ = struct.Struct("!Q")
_SEQ_OFFSET = 16  # the shim's wide sequence number (daemons/wire/shim.py)


def split_datagram(data: bytes, max_mps: int) -> list[bytes]:
    """A cable datagram cut into datagrams of at most ``max_mps`` micropackets.

    A sequenced batch is consecutive micropackets from the shim's seq on, each with
    its own TSEQ and LCRC, so any run of them is a valid batch once the shim says
    where it starts; unsequenced ones (a single control micropacket) are left whole.
    """
    n = (len(data) - SHIM_BYTES) // MP_BYTES
    if n <= max_mps or len(data) < SHIM_BYTES or not data[3] & 1:
        return [data]
    shim = bytearray(data[:SHIM_BYTES])
    (seq,) = _SEQ.unpack_from(shim, _SEQ_OFFSET)
    out = []
    for first in range(0, n, max_mps):
        _SEQ.pack_into(shim, _SEQ_OFFSET, seq + first)
        lo = SHIM_BYTES + first * MP_BYTES
        out.append(bytes(shim) + data[lo: lo + max_mps * MP_BYTES])
    return out
