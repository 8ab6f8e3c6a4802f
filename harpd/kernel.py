"""The kernel side of HARP: the neighbour table of a GSN interface.

On a non-broadcast fabric harpd sets the interface's ``app_solicit`` (and turns
off ARP's own solicitations), so the kernel asks userspace over rtnetlink
(RTM_GETNEIGH to RTNLGRP_NEIGH) whenever it needs an IP->ULA mapping or wants to
revalidate one.  harpd answers with ``ip neigh replace``.  On a broadcast fabric
the kernel's own ARP does the work and harpd only restores the defaults.  IPv6's
neighbour table works the same way (``/proc/sys/net/ipv6/neigh/IFACE``): with
app_solicit set the kernel sends no neighbour solicitations and asks harpd.
"""

from __future__ import annotations

import socket
import struct
from ipaddress import IPv4Address, IPv6Address, ip_address

from pyroute2 import IPRoute

from daemons.wire.errors import DecodeError

RTM_NEWNEIGH, RTM_GETNEIGH = 28, 30
RTMGRP_NEIGH = 0x4
NDA_DST = 1
NUD_INCOMPLETE, NUD_REACHABLE, NUD_STALE, NUD_PROBE, NUD_PERMANENT = 0x01, 0x02, 0x04, 0x10, 0x80
_NLMSG = struct.Struct("=IHHII")
_NDMSG = struct.Struct("=BxxxiHBB")
_RTA = struct.Struct("=HH")


_FAMILY_LEN = {socket.AF_INET: 4, socket.AF_INET6: 16}
_FAMILY_ADDR: dict[int, type[IPv4Address] | type[IPv6Address]] = {socket.AF_INET: IPv4Address, socket.AF_INET6: IPv6Address}
NUD_NAMES = {0x01: "incomplete", 0x02: "reachable", 0x04: "stale", 0x08: "delay", 0x10: "probe",
             0x20: "failed", 0x40: "noarp", 0x80: "permanent"}


def parse_neigh_requests(data: bytes) -> list[tuple[int, IPv4Address | IPv6Address]]:
    """(ifindex, IPv4 or IPv6 address) for each neighbour resolution request in a netlink datagram."""
    out = []
    off = 0
    while off + _NLMSG.size <= len(data):
        length, kind, _flags, _seq, _pid = _NLMSG.unpack_from(data, off)
        if length < _NLMSG.size or off + length > len(data):
            raise DecodeError("nlmsg_len", off, f"length {length} does not fit the datagram")
        body = off + _NLMSG.size
        wanted = kind == RTM_GETNEIGH or kind == RTM_NEWNEIGH
        if wanted and length >= _NLMSG.size + _NDMSG.size:
            family, ifindex, state, _f, _t = _NDMSG.unpack_from(data, body)
            is_request = kind == RTM_GETNEIGH or state & (NUD_INCOMPLETE | NUD_PROBE)
            a = body + _NDMSG.size
            n = _FAMILY_LEN.get(family)
            while n and is_request and a + _RTA.size <= off + length:
                alen, atype = _RTA.unpack_from(data, a)
                if alen < _RTA.size:
                    raise DecodeError("rta_len", a, f"attribute length {alen}")
                if atype == NDA_DST and alen == _RTA.size + n and a + alen <= off + length:
                    addr: IPv4Address | IPv6Address = _FAMILY_ADDR[family](bytes(data[a + 4 : a + 4 + n]))
                    out.append((ifindex, addr))
                a += (alen + 3) & ~3
        off += (length + 3) & ~3
    return out


def open_neigh_listener() -> socket.socket:
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    s.bind((0, RTMGRP_NEIGH))
    s.setblocking(False)
    return s


def set_solicit(ifname: str, broadcast: bool, version: int = 4) -> None:
    """Kernel ARP (IPv6: neighbour discovery) on broadcast fabrics; resolution by
    harpd (app_solicit) otherwise."""
    values = {"mcast_solicit": 3, "ucast_solicit": 3, "app_solicit": 0} if broadcast else \
        {"mcast_solicit": 0, "ucast_solicit": 0, "app_solicit": 3}
    for key, value in values.items():
        with open(f"/proc/sys/net/ipv{version}/neigh/{ifname}/{key}", "w") as f:
            f.write(str(value))


class Neighbours:
    """Blocking pyroute2 calls; the daemon runs them in a worker thread."""

    def __init__(self, ifname: str) -> None:
        self.ifname = ifname

    def index(self) -> int | None:
        with IPRoute() as ipr:
            found = ipr.link_lookup(ifname=self.ifname)
            return found[0] if found else None

    def addresses(self) -> list[IPv4Address | IPv6Address]:
        """The interface's IPv4 and IPv6 addresses (link-local ones too), IPv4 first."""
        with IPRoute() as ipr:
            found = ipr.link_lookup(ifname=self.ifname)
            if not found:
                return []
            out = []
            for family in (socket.AF_INET, socket.AF_INET6):
                out += [ip_address(a.get_attr("IFA_ADDRESS")) for a in ipr.get_addr(index=found[0], family=family)]
            return out

    def neighbours(self) -> list[dict]:
        """The kernel's neighbour entries on the interface (IPv4 and IPv6) that have a
        link-layer address: what the kernel learnt by itself on a broadcast fabric."""
        with IPRoute() as ipr:
            found = ipr.link_lookup(ifname=self.ifname)
            if not found:
                return []
            rows = []
            for n in ipr.get_neighbours(ifindex=found[0]):
                dst, lladdr = n.get_attr("NDA_DST"), n.get_attr("NDA_LLADDR")
                state = n["state"]
                if dst is None or lladdr is None or ip_address(dst).is_multicast or state & 0x20:
                    continue
                names = [v for k, v in NUD_NAMES.items() if state & k]
                rows.append({"ip": str(ip_address(dst)), "ula": lladdr.lower(), "state": "/".join(names) or "none"})
            return rows

    def replace(self, ip: IPv4Address | IPv6Address, ula: bytes, permanent: bool) -> None:
        with IPRoute() as ipr:
            idx = ipr.link_lookup(ifname=self.ifname)[0]
            ipr.neigh("replace", dst=str(ip), lladdr=":".join(f"{b:02x}" for b in ula), ifindex=idx,
                      state=NUD_PERMANENT if permanent else NUD_REACHABLE)

    def delete(self, ip: IPv4Address | IPv6Address) -> None:
        with IPRoute() as ipr:
            idx = ipr.link_lookup(ifname=self.ifname)[0]
            try:
                ipr.neigh("del", dst=str(ip), ifindex=idx)
            except Exception:  # already gone
                pass
