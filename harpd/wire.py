"""HARP codec: the HIPARP format (ar$hrd 28, 29 bytes for 6-byte ULAs) and the
generic RFC 826 format (ar$hrd 1 or 6, 28 bytes), every opcode, and the NAK
(the request echoed byte for byte with ar$op = 10).  Spec §6.2-6.4.

IPv6 (PROJECT CHOICE, README "IPv6"): the same two layouts with ar$pro = 0x86DD and
ar$pln = 16, both protocol addresses 16 bytes; "unknown" is the all-zero address
(::), as 0.0.0.0 is for IPv4.  ar$pro and ar$pln must agree (0x0800/4, 0x86DD/16)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from ipaddress import IPv4Address, IPv6Address

from daemons.wire.errors import DecodeError

from .constants import ACCEPTED_HRD, HRD_HIPARP, PRO_IPV4, PRO_IPV6, Op

Address = IPv4Address | IPv6Address
_PLN = {PRO_IPV4: 4, PRO_IPV6: 16}
_PRO = {4: PRO_IPV4, 6: PRO_IPV6}
_ADDR = {PRO_IPV4: IPv4Address, PRO_IPV6: IPv6Address}

_HIP = struct.Struct("!HHHBBB")  # hrd pro op pln rhl thl, then rpa tpa rha tha
_GEN = struct.Struct("!HHBBH")  # hrd pro hln pln op, then sha spa tha tpa


@dataclass(frozen=True)
class Harp:
    op: Op
    rpa: Address  # requester (replies: target) protocol address
    tpa: Address  # same family as rpa
    rha: bytes  # requester (replies: target) ULA
    tha: bytes
    hrd: int = HRD_HIPARP

    def encode(self) -> bytes:
        if self.rpa.version != self.tpa.version:
            raise ValueError("ar$rpa and ar$tpa must be of one address family")
        pro, pln = _PRO[self.rpa.version], len(self.rpa.packed)
        if self.hrd == HRD_HIPARP:
            return _HIP.pack(self.hrd, pro, self.op, pln, len(self.rha), len(self.tha)) + \
                self.rpa.packed + self.tpa.packed + self.rha + self.tha
        if len(self.rha) != 6 or len(self.tha) != 6:
            raise ValueError("the generic ARP format carries 6-byte hardware addresses")
        return _GEN.pack(self.hrd, pro, 6, pln, self.op) + self.rha + self.rpa.packed + self.tha + self.tpa.packed

    def reply(self, rpa: Address, rha: bytes, op: Op) -> Harp:
        """A reply in the request's format: answer in rha/rpa, requester swapped into tha/tpa."""
        return Harp(op, rpa, self.rpa, rha, self.rha, self.hrd)

    @property
    def is_request(self) -> bool:
        return self.op in (Op.HARP_REQUEST, Op.INHARP_REQUEST)

    @property
    def rula(self) -> bytes:
        return self.rha[-6:]

    @property
    def tula(self) -> bytes:
        return self.tha[-6:]


def decode(data: bytes) -> Harp:
    if len(data) < 8:
        raise DecodeError("harp", len(data), f"{len(data)} bytes is too short for any ARP format")
    (hrd,) = struct.unpack_from("!H", data)
    if hrd not in ACCEPTED_HRD:
        raise DecodeError("ar$hrd", 0, f"hardware type {hrd} is not 28, 1 or 6")
    if hrd == HRD_HIPARP:
        if len(data) < _HIP.size:
            raise DecodeError("harp", len(data), "truncated HIPARP header")
        hrd, pro, op, pln, rhl, thl = _HIP.unpack_from(data)
        addr = _check(pro, pln, 2, 6)
        for name, off, hl in (("ar$rhl", 7, rhl), ("ar$thl", 8, thl)):
            if hl not in (6, 10):
                raise DecodeError(name, off, f"hardware address length {hl} is not 6 (or 10)")
        p = 9 + 2 * pln
        need = p + rhl + thl
        if len(data) < need:
            raise DecodeError("harp", len(data), f"truncated: {len(data)} of {need} bytes")
        rpa, tpa = addr(bytes(data[9 : 9 + pln])), addr(bytes(data[9 + pln : p]))
        rha, tha = bytes(data[p : p + rhl]), bytes(data[p + rhl : need])
    else:
        if len(data) < _GEN.size:
            raise DecodeError("harp", len(data), "truncated ARP header")
        hrd, pro, hln, pln, op = _GEN.unpack_from(data)
        addr = _check(pro, pln, 2, 5)
        if hln != 6:
            raise DecodeError("ar$hln", 4, f"hardware address length {hln} is not 6")
        need = 8 + 12 + 2 * pln
        if len(data) < need:
            raise DecodeError("harp", len(data), f"truncated: {len(data)} of {need} bytes")
        rha, rpa = bytes(data[8:14]), addr(bytes(data[14 : 14 + pln]))
        tha, tpa = bytes(data[14 + pln : 20 + pln]), addr(bytes(data[20 + pln : need]))
    try:
        op = Op(op)
    except ValueError:
        raise DecodeError("ar$op", 4 if hrd == HRD_HIPARP else 6, f"unknown operation {op}") from None
    return Harp(op, rpa, tpa, rha, tha, hrd)


def _check(pro: int, pln: int, pro_off: int, pln_off: int) -> type:
    if pro not in _PLN:
        raise DecodeError("ar$pro", pro_off, f"protocol {pro:#06x} is not IPv4 or IPv6")
    if pln != _PLN[pro]:
        raise DecodeError("ar$pln", pln_off, f"protocol address length {pln} is not {_PLN[pro]} for {pro:#06x}")
    return _ADDR[pro]


def nak(request_bytes: bytes) -> bytes:
    """HARP_NAK: the received HARP_REQUEST copied byte for byte with ar$op = 10."""
    (hrd,) = struct.unpack_from("!H", request_bytes)
    off = 4 if hrd == HRD_HIPARP else 6
    return request_bytes[:off] + struct.pack("!H", Op.HARP_NAK) + request_bytes[off + 2 :]


__all__ = ["Address", "Harp", "decode", "nak", "replace"]
