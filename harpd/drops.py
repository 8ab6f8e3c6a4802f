"""Why HarpCore drops a received message or forgets an entry: the counter keys
operators see (``gsnarp``/metrics)."""

from __future__ import annotations

import enum

from daemons.wire.errors import DecodeError


class Drop(enum.StrEnum):
    PORT_DOWN = "rx_port_down"
    OUTSIDE_LIS = "rx_outside_lis"
    SPOOFED_SHA = "rx_dropped_spoofed_sha"
    REPLY_NOT_FOR_US = "rx_reply_not_for_us"
    REPLY_NOT_FROM_SERVER = "rx_dropped_reply_not_from_server"
    REPLY_UNSOLICITED = "rx_dropped_reply_unsolicited"
    NAK_NOT_FOR_US = "rx_nak_not_for_us"
    NAK_NOT_FROM_SERVER = "rx_dropped_nak_not_from_server"
    NAK_UNSOLICITED = "rx_dropped_nak_unsolicited"
    OUT_OF_STATE = "rx_dropped_out_of_state"  # an answer the LIS's phase does not allow
    REQUESTER_OUTSIDE_LIS = "server_requester_outside_lis"


class Removal(enum.StrEnum):
    """Why a cache entry went (the reason in ``Gone``; counted as cache_removed_<reason>)."""

    EXPIRED = "expired"
    UNANSWERED = "revalidation unanswered"
    NAK = "NAK"

    @property
    def counter(self) -> str:
        return f"cache_removed_{self.value.replace(' ', '_')}"


class BadHarp(enum.StrEnum):
    """A HARP/InHARP message that did not decode (harpd/wire.py ``decode``): the field that
    was wrong, as the counter key."""

    HARP = "rx_bad_harp"  # too short, or its addresses run past the end
    HRD = "rx_bad_ar$hrd"  # a hardware type harpd does not take
    RHL = "rx_bad_ar$rhl"  # requester hardware address length not 6 (or 10)
    THL = "rx_bad_ar$thl"  # target hardware address length not 6 (or 10)
    HLN = "rx_bad_ar$hln"  # an ARP-format hardware address length not 6
    OP = "rx_bad_ar$op"  # an op HARP does not have
    PRO = "rx_bad_ar$pro"  # protocol type not IPv4/IPv6
    PLN = "rx_bad_ar$pln"  # protocol address length not the protocol's
    OTHER = "rx_bad_other"  # a field this list does not name (a codec change not counted here yet)

    @classmethod
    def of(cls, exc: DecodeError) -> BadHarp:
        return _BAD_HARP.get(exc.field, cls.OTHER)


_BAD_HARP = {m.value.removeprefix("rx_bad_"): m for m in BadHarp if m is not BadHarp.OTHER}
