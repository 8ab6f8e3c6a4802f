"""Why pktwayd drops a packet it could not decode: the field of the EEP (or MessageWay)
header that was wrong (pktwayd/eep.py ``decode``), as the counter key operators see."""

from __future__ import annotations

import enum

from daemons.wire.errors import DecodeError


class BadPacket(enum.StrEnum):
    PACKET = "rx_bad_packet"  # not a whole number of words, or shorter than header + TAIL
    HEADER = "rx_bad_header"  # no room for the EEP header
    DT = "rx_bad_DT"  # a reserved destination prefix
    L2RH = "rx_bad_L2RH"  # a route prefix that is empty or runs past the header
    SYMBOL = "rx_bad_symbol"  # a symbolic address that runs past the header
    OH = "rx_bad_OH"  # an optional header that runs into the TAIL
    PL = "rx_bad_PL"  # a pad length the data words cannot hold
    DL = "rx_bad_DL"  # more data words than the packet has
    V = "rx_bad_V"  # PacketWay version not 0
    VERSION = "rx_bad_Version"  # MessageWay version not 5
    OTHER = "rx_bad_other"  # a field this list does not name (a codec change not counted here yet)

    @classmethod
    def of(cls, exc: DecodeError) -> BadPacket:
        return _BY_FIELD.get(exc.field, cls.OTHER)

    @property
    def from_twin(self) -> str:
        """The same drop for a packet off the inter-SAN link."""
        return _TWIN[self]


_BY_FIELD = {m.value.removeprefix("rx_bad_"): m for m in BadPacket if m is not BadPacket.OTHER}
_TWIN = {m: f"twin_{m.value}" for m in BadPacket}
