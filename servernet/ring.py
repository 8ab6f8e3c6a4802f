"""PacketWay over ServerNet (spec §1.8, project choice): the receive ring and doorbell.

Each node exposes a ring of ``RING_SLOTS`` one-page slots (window ``pktway-ring``,
writable by its peers, translated per source: every sender has a ring of its own at
the same address, so senders never overwrite each other's slots) and, on the page right after it, a doorbell page with the
interrupt flag (window ``pktway-bell``).  A sender WRITEs the message into a free slot
of the receiver's ring in <= 64-byte chunks and, once all are ACKed, WRITEs the
16-byte descriptor ``{slot, length, seq, crc32}`` (u32 each, big-endian) to the
doorbell.  The receiver takes the message out of the slot at once, so a slot is free
again when its doorbell is ACKed; the sender keeps a slot busy until then.  That ACK
stands for the spec's credit word: no separate credit WRITE is sent.

The L2RH of this SAN carries 8 route bytes: ``DID (3, 20 bits right-aligned) |
fabric preference (0 = X, 1 = Y, 2 = either) | ring base address (4)``."""

from __future__ import annotations

import struct
import zlib
from collections import Counter
from collections.abc import Callable

from .avt import Interrupt, Window
from .bte import Op
from .constants import (BELL_WINDOW, ID_MAX, L2RH_ROUTE_BYTES, PAGE_BYTES, PREF_EITHER, RING_BASE, RING_SLOTS,
                        RING_WINDOW, SLOT_BYTES)
from .endpoint import Endpoint

_DESC = struct.Struct(">IIII")


def route(did: int, pref: int = PREF_EITHER, ring: int = RING_BASE) -> bytes:
    if not 0 <= did <= ID_MAX or pref not in (0, 1, 2) or not 0 <= ring <= 0xFFFFFFFF:
        raise ValueError("DID 20-bit, preference 0..2, ring 32-bit")
    return did.to_bytes(3, "big") + bytes((pref,)) + ring.to_bytes(4, "big")


def parse_route(raw: bytes) -> tuple[int, int, int]:
    """(DID, fabric preference, ring base) of L2RH route bytes; ValueError when malformed."""
    if len(raw) != L2RH_ROUTE_BYTES:
        raise ValueError(f"a ServerNet route is {L2RH_ROUTE_BYTES} bytes, not {len(raw)}")
    did, pref, ring = int.from_bytes(raw[:3], "big"), raw[3], int.from_bytes(raw[4:], "big")
    if did > ID_MAX or pref > PREF_EITHER or ring % PAGE_BYTES:
        raise ValueError(f"route {bytes(raw).hex()}: DID over 20 bits, preference over 2 or ring not page-aligned")
    return did, pref, ring


def ring_windows(windows: list[Window]) -> tuple[Window, Window]:
    """The node's ring and doorbell windows; ValueError naming what is wrong."""
    by_name = {w.name: w for w in windows}
    ring, bell = by_name.get(RING_WINDOW), by_name.get(BELL_WINDOW)
    if ring is None or bell is None:
        raise ValueError(f"PacketWay needs windows named {RING_WINDOW!r} and {BELL_WINDOW!r}")
    if ring.pages != RING_SLOTS or "w" not in ring.access or ring.interrupt or not ring.per_source:
        raise ValueError(f"window {RING_WINDOW!r}: {RING_SLOTS} writable pages, per_source = true, without the "
                         "interrupt flag")
    if bell.page != ring.page + ring.pages or bell.pages != 1 or not bell.interrupt or "w" not in bell.access:
        raise ValueError(f"window {BELL_WINDOW!r}: one writable interrupt page right after the ring")
    return ring, bell


class RingLink:
    def __init__(self, core: Endpoint, deliver: Callable[[int, bytes, bytes], None],
                 rings: dict[int, int] | None = None) -> None:
        self.core = core
        self.ring, self.bell = ring_windows(core.avt.windows)
        self.deliver = deliver  # (source DID, message, route back)
        self.rings = rings or {}  # peer DID -> its ring base, when not RING_BASE
        self.busy: dict[int, set[int]] = {p: set() for p in core.peers}
        self.next_slot: dict[int, int] = {p: 0 for p in core.peers}
        self.seq = 0
        self.counters: Counter[str] = Counter()
        core.on_interrupt = self._interrupt

    def send(self, raw_route: bytes, message: bytes, now: float) -> bool:
        c = self.counters
        try:
            did, pref, ring = parse_route(raw_route)
        except ValueError:
            c["tx_drop_bad_route"] += 1
            return False
        busy = self.busy.get(did)
        if busy is None:
            c["tx_drop_unknown_peer"] += 1
            return False
        if not message or len(message) > SLOT_BYTES:
            c["tx_drop_size"] += 1
            return False
        if len(busy) >= RING_SLOTS:
            c["tx_drop_ring_full"] += 1
            return False
        slot = self.next_slot[did]
        while slot in busy:
            slot = (slot + 1) % RING_SLOTS
        self.next_slot[did] = (slot + 1) % RING_SLOTS
        busy.add(slot)
        self.seq = (self.seq + 1) & 0xFFFFFFFF
        bell = _DESC.pack(slot, len(message), self.seq, zlib.crc32(message))

        def done(op: Op) -> None:
            busy.discard(slot)
            c["tx_messages" if op.error is None else f"tx_failed_{op.error}"] += 1

        op = Op("block", did, ring + slot * SLOT_BYTES, bytes(message), len(message),
                fabric=None if pref == PREF_EITHER else pref, doorbell=ring + RING_SLOTS * SLOT_BYTES,
                bell_data=bell, on_done=done)
        self.core.bte.submit(op, now)
        return True

    def _interrupt(self, irq: Interrupt) -> bool:
        if irq.address != self.bell.base:
            return False
        c = self.counters
        if len(irq.data) != _DESC.size:
            c["rx_drop_bad_descriptor"] += 1
            return True
        slot, length, _seq, crc = _DESC.unpack(irq.data)
        if slot >= RING_SLOTS or not 0 < length <= SLOT_BYTES:
            c["rx_drop_bad_descriptor"] += 1
            return True
        message = bytes(self.ring.memory_of(irq.source)[slot * SLOT_BYTES:slot * SLOT_BYTES + length])
        if zlib.crc32(message) != crc:
            c["rx_drop_bad_crc"] += 1
            return True
        c["rx_messages"] += 1
        self.deliver(irq.source, message, route(irq.source, PREF_EITHER, self.rings.get(irq.source, RING_BASE)))
        return True
