"""HARP codec: the HIPARP format (ar$hrd 28, 29 bytes for 6-byte ULAs) and the
generic RFC 826 format (ar$hrd 1 or 6, 28 bytes), every opcode, and the NAK
(the request echoed byte for byte with ar$op = 10).  Spec §6.2-6.4."""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from ipaddress import IPv4Address

from daemons.wire.errors import DecodeError

from .constants import ACCEPTED_HRD, HRD_HIPARP, PRO_IPV4, Op

_HIP = struct.Struct("!HHHBBB")  # hrd pro op pln rhl thl, then rpa tpa rha tha
_GEN = struct.Struct("!HHBBH")  # hrd pro hln pln op, then sha spa tha tpa


@dataclass(frozen=True)
class Harp:
    op: Op
    rpa: IPv4Address  # requester (replies: target) protocol address
    tpa: IPv4Address
    rha: bytes  # requester (replies: target) ULA
    tha: bytes
    hrd: int = HRD_HIPARP

    def encode(self) -> bytes:
        if self.hrd == HRD_HIPARP:
            return _HIP.pack(self.hrd, PRO_IPV4, self.op, 4, len(self.rha), len(self.tha)) + \
                self.rpa.packed + self.tpa.packed + self.rha + self.tha
        if len(self.rha) != 6 or len(self.tha) != 6:
            raise ValueError("the generic ARP format carries 6-byte hardware addresses")
        return _GEN.pack(self.hrd, PRO_IPV4, 6, 4, self.op) + self.rha + self.rpa.packed + self.tha + self.tpa.packed

    def reply(self, rpa: IPv4Address, rha: bytes, op: Op) -> "Harp":
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
        _check(pro, pln, 2, 6)
        for name, off, hl in (("ar$rhl", 7, rhl), ("ar$thl", 8, thl)):
            if hl not in (6, 10):
                raise DecodeError(name, off, f"hardware address length {hl} is not 6 (or 10)")
        need = 17 + rhl + thl
        if len(data) < need:
            raise DecodeError("harp", len(data), f"truncated: {len(data)} of {need} bytes")
        rpa, tpa = IPv4Address(data[9:13]), IPv4Address(data[13:17])
        rha, tha = bytes(data[17 : 17 + rhl]), bytes(data[17 + rhl : need])
    else:
        if len(data) < 28:
            raise DecodeError("harp", len(data), f"truncated: {len(data)} of 28 bytes")
        hrd, pro, hln, pln, op = _GEN.unpack_from(data)
        _check(pro, pln, 2, 5)
        if hln != 6:
            raise DecodeError("ar$hln", 4, f"hardware address length {hln} is not 6")
        rha, rpa, tha, tpa = data[8:14], IPv4Address(data[14:18]), data[18:24], IPv4Address(data[24:28])
        rha, tha = bytes(rha), bytes(tha)
    try:
        op = Op(op)
    except ValueError:
        raise DecodeError("ar$op", 4 if hrd == HRD_HIPARP else 6, f"unknown operation {op}") from None
    return Harp(op, rpa, tpa, rha, tha, hrd)


def _check(pro: int, pln: int, pro_off: int, pln_off: int) -> None:
    if pro != PRO_IPV4:
        raise DecodeError("ar$pro", pro_off, f"protocol {pro:#06x} is not IPv4")
    if pln != 4:
        raise DecodeError("ar$pln", pln_off, f"protocol address length {pln} is not 4")


def nak(request_bytes: bytes) -> bytes:
    """HARP_NAK: the received HARP_REQUEST copied byte for byte with ar$op = 10."""
    (hrd,) = struct.unpack_from("!H", request_bytes)
    off = 4 if hrd == HRD_HIPARP else 6
    return request_bytes[:off] + struct.pack("!H", Op.HARP_NAK) + request_bytes[off + 2 :]


__all__ = ["Harp", "decode", "nak", "replace"]
