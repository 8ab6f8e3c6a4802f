"""HARP values (spec gsn-harp.md §6).  PROJECT CHOICE values are marked (pc)."""

import enum


HRD_HIPARP = 28  # FACT, IANA "HIPARP"
HRD_ETHERNET = 1
HRD_IEEE802 = 6
ACCEPTED_HRD = (HRD_HIPARP, HRD_ETHERNET, HRD_IEEE802)  # (pc): transmit 28, accept 28/1/6
PRO_IPV4 = 0x0800
PRO_IPV6 = 0x86DD  # (pc) IPv6 over HARP: ar$pro = the IPv6 EtherType, ar$pln = 16


class Op(enum.IntEnum):
    HARP_REQUEST = 1
    HARP_REPLY = 2
    INHARP_REQUEST = 8
    INHARP_REPLY = 9
    HARP_NAK = 10


# Timers in seconds (RFC defaults; all configurable in harpd.options / CLI)
REGISTRATION_RETRY = 5.0  # FACT: at least every 5 s
PROBE_COUNT = 3  # (pc)
PROBE_INTERVAL = 1.0  # (pc)
REREGISTER = 15 * 60.0  # FACT
CLIENT_ENTRY_LIFETIME = 15 * 60.0  # FACT
REVALIDATE_AT = 13 * 60.0  # (pc)
SERVER_ENTRY_LIFETIME = 20 * 60.0  # FACT
RESOLVE_RETRY = 2.0  # (pc)
RESOLVE_ATTEMPTS = 2  # (pc)
NEGATIVE_CACHE = 30.0  # (pc) = Linux ATMARP_RETRY_DELAY
SERVER_DEAD_WINDOW = 120.0  # FACT: 2 unanswered HARP_REQUESTs within 120 s
SERVER_DEAD_UNANSWERED = 2  # FACT
DEADLINE_HEAP_SLACK = 64  # (pc) superseded timer-heap items tolerated before compaction
LINK_LOCAL_LIS = "fe80::/64"  # (pc) added to every interface that has an IPv6 LIS
