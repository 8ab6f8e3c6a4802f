"""harpd.kernel: the kernel's neighbour requests (RTM_GETNEIGH / RTM_NEWNEIGH in
INCOMPLETE or PROBE) for IPv4 and IPv6, parsed from raw netlink datagrams."""

import socket
import struct
from ipaddress import IPv4Address, IPv6Address

import pytest
from hypothesis import given, strategies as st

from daemons.wire.errors import DecodeError
from harpd.kernel import RTM_GETNEIGH, RTM_NEWNEIGH, NUD_INCOMPLETE, NUD_REACHABLE, parse_neigh_requests


def neigh(kind, family, ifindex, state, dst: bytes) -> bytes:
    rta = struct.pack("=HH", 4 + len(dst), 1) + dst
    rta += bytes(-len(rta) % 4)
    body = struct.pack("=BxxxiHBB", family, ifindex, state, 0, 0) + rta
    return struct.pack("=IHHII", 16 + len(body), kind, 0, 0, 0) + body


def test_ipv4_and_ipv6_requests():
    data = (neigh(RTM_GETNEIGH, socket.AF_INET, 3, 0, IPv4Address("192.0.2.3").packed)
            + neigh(RTM_GETNEIGH, socket.AF_INET6, 3, 0, IPv6Address("2001:db8::3").packed)
            + neigh(RTM_NEWNEIGH, socket.AF_INET6, 4, NUD_INCOMPLETE, IPv6Address("fe80::3").packed)
            + neigh(RTM_NEWNEIGH, socket.AF_INET6, 4, NUD_REACHABLE, IPv6Address("fe80::4").packed))
    assert parse_neigh_requests(data) == [(3, IPv4Address("192.0.2.3")), (3, IPv6Address("2001:db8::3")),
                                          (4, IPv6Address("fe80::3"))]


def test_wrong_length_address_ignored():
    assert parse_neigh_requests(neigh(RTM_GETNEIGH, socket.AF_INET6, 3, 0, bytes(4))) == []
    assert parse_neigh_requests(neigh(RTM_GETNEIGH, socket.AF_INET, 3, 0, bytes(16))) == []


_GOOD = neigh(RTM_GETNEIGH, socket.AF_INET6, 3, 0, IPv6Address("2001:db8::3").packed)


@given(st.integers(0, len(_GOOD)), st.binary(min_size=1, max_size=4), st.integers(0, len(_GOOD)))
def test_malformed_only_decode_error(at, patch, cut):
    blob = (_GOOD[:at] + patch + _GOOD[at + len(patch):])[:cut]
    try:
        out = parse_neigh_requests(blob)
    except DecodeError:
        return
    assert all(isinstance(ip, (IPv4Address, IPv6Address)) for _, ip in out)


@pytest.mark.parametrize("blob", [struct.pack("=IHHII", 8, RTM_GETNEIGH, 0, 0, 0)])
def test_bad_length_is_decode_error(blob):
    with pytest.raises(DecodeError):
        parse_neigh_requests(blob)
