"""The kernel's IP multicast memberships of one interface, as ``/proc/net/igmp`` and
``/proc/net/igmp6`` list them (per network namespace): a socket or ``ip maddr`` joining
a group on pw0 shows up there, and leaving removes it.  Parsing never raises: a line
it cannot read is skipped."""

from __future__ import annotations

import ipaddress
import sys

IGMP, IGMP6 = "/proc/net/igmp", "/proc/net/igmp6"


def parse_igmp(text: str, dev: str) -> set:
    """IPv4 groups of ``dev``: a device line ("Idx<TAB>Device : Count Querier") is followed
    by one tab-indented line per group, the address as the kernel's native-order hex word."""
    groups: set = set()
    mine = False
    for line in text.splitlines()[1:]:
        if not line.startswith("\t"):
            fields = line.split()
            mine = len(fields) >= 2 and fields[1] == dev
            continue
        word = line.split()[:1]
        if mine and word and len(word[0]) == 8:
            try:
                group = ipaddress.IPv4Address(int(word[0], 16).to_bytes(4, sys.byteorder))
            except ValueError:
                continue
            if group.is_multicast:
                groups.add(group)
    return groups


def parse_igmp6(text: str, dev: str) -> set:
    """IPv6 groups of ``dev``: "Idx Device Group(32 hex digits) Users Flags Timer" per line;
    interface-local groups (ff01::/16) never leave the host and are left out."""
    groups: set = set()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 3 or fields[1] != dev or len(fields[2]) != 32:
            continue
        try:
            group = ipaddress.IPv6Address(bytes.fromhex(fields[2]))
        except ValueError:
            continue
        if group.is_multicast and not fields[2].startswith("ff01"):
            groups.add(group)
    return groups


def read(dev: str) -> set:
    """Both families' groups of ``dev`` now (a missing file: that family has none)."""
    out: set = set()
    for path, parse in ((IGMP, parse_igmp), (IGMP6, parse_igmp6)):
        try:
            with open(path) as f:
                out |= parse(f.read(), dev)
        except OSError:
            continue
    return out
