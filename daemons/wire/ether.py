"""IP over HIPPI-6400 (RFC 2835 §4): Ethernet frames from a TAP <-> GSN Messages on VC1.

ULAs are 48-bit IEEE addresses, so they serve as the TAP's MAC addresses.  The
Message payload is the IP datagram (or ARP packet) behind LLC/SNAP; for IPv4 it is
trimmed to the IP Total Length, so M_len = Total Length + 8 as RFC 2835 requires.
GSN has no multicast: group-addressed frames go to the broadcast ULA (the
authoritative address on a broadcast fabric) and come back out of the TAP with
the multicast MAC rebuilt from the IP destination.
"""

from __future__ import annotations

import enum
import struct

from ..constants import ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6, IP_MTU, ULA_BROADCAST, ULA_NONE

IP_ETHERTYPES = frozenset({ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_ARP})
ETH_HEADER = 14


class FrameDrop(enum.StrEnum):
    """Why a TAP frame is not sent (counted as tx_drop_<reason>)."""

    RUNT = "runt_frame"
    NOT_IP = "not_ip_or_arp"
    OVER_MTU = "over_mtu"
    UNKNOWN_ULA = "unknown_ula"

    @property
    def counter(self) -> str:
        return f"tx_drop_{self.value}"


def frame_to_message(frame: bytes, mtu: int = IP_MTU) -> tuple[bytes, int, bytes] | FrameDrop:
    """(D_ULA, EtherType, payload) for a TAP frame, or the reason it is dropped."""
    if len(frame) < ETH_HEADER:
        return FrameDrop.RUNT
    dst = frame[:6]
    (ethertype,) = struct.unpack_from("!H", frame, 12)
    if ethertype not in IP_ETHERTYPES:
        return FrameDrop.NOT_IP
    payload = frame[ETH_HEADER:]
    if ethertype == ETHERTYPE_IPV4 and len(payload) >= 20:
        (total,) = struct.unpack_from("!H", payload, 2)
        if 20 <= total <= len(payload):
            payload = payload[:total]
    if len(payload) > mtu:
        return FrameDrop.OVER_MTU
    if dst[0] & 1:
        dst = ULA_BROADCAST  # broadcast and multicast: the authoritative address
    elif dst == ULA_NONE:
        return FrameDrop.UNKNOWN_ULA
    return dst, ethertype, payload


def message_to_frame(d_ula: bytes, s_ula: bytes, ethertype: int, payload: bytes) -> bytes:
    dst = d_ula
    if d_ula == ULA_BROADCAST:
        if ethertype == ETHERTYPE_IPV6 and len(payload) >= 40 and payload[24] == 0xFF:
            dst = b"\x33\x33" + payload[36:40]
        elif ethertype == ETHERTYPE_IPV4 and len(payload) >= 20 and 224 <= payload[16] <= 239:
            dst = bytes((0x01, 0x00, 0x5E, payload[17] & 0x7F, payload[18], payload[19]))
    return dst + s_ula + struct.pack("!H", ethertype) + payload
