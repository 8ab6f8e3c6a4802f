"""Why HarpCore drops a received message or forgets an entry: the counter keys
operators see (``gsnarp``/metrics)."""

from __future__ import annotations

import enum


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
