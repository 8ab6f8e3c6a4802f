"""The multicast groups the kernel has joined on an interface, read from
/proc/net/igmp and /proc/net/igmp6 (an IPoIB port joins the matching MGIDs)."""

from __future__ import annotations

import ipaddress
import sys

from . import addr


def parse_igmp(text: str) -> dict[str, set[str]]:
    """device -> IPv4 groups.  Group words are in host byte order."""
    out: dict[str, set[str]] = {}
    dev = None
    for line in text.splitlines()[1:]:
        if not line.strip():
            continue
        if not line[0].isspace():
            parts = line.split()
            dev = parts[1].rstrip(":") if len(parts) > 1 else None
            if dev is not None:
                out.setdefault(dev, set())
        elif dev is not None:
            word = line.split()[0]
            try:
                out[dev].add(str(ipaddress.IPv4Address(int(word, 16).to_bytes(4, sys.byteorder))))
            except (ValueError, OverflowError):
                continue
    return out


def parse_igmp6(text: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and len(parts[2]) == 32:
            try:
                out.setdefault(parts[1], set()).add(str(ipaddress.IPv6Address(bytes.fromhex(parts[2]))))
            except ValueError:
                continue
    return out


def mgids(ifname: str, pkey: int, igmp: str, igmp6: str) -> set[bytes]:
    v4 = parse_igmp(igmp).get(ifname, set())
    v6 = parse_igmp6(igmp6).get(ifname, set())
    return {addr.mgid_ipv4(g, pkey) for g in v4} | {addr.mgid_ipv6(g, pkey) for g in v6}


def read(ifname: str, pkey: int) -> set[bytes]:
    texts = []
    for path in ("/proc/net/igmp", "/proc/net/igmp6"):
        try:
            with open(path) as f:
                texts.append(f.read())
        except OSError:
            texts.append("")
    return mgids(ifname, pkey, *texts)
