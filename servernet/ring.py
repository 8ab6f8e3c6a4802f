"""PacketWay over ServerNet (spec §1.8, project choice): the receive ring and doorbell.

Each node exposes a ring of ``RING_SLOTS`` one-page slots (window ``pktway-ring``,
writable by its peers, translated per source: every sender has a ring of its own at
the same address, so senders never overwrite each other's slots) and, on the page right after it, a doorbell page with the
interrupt flag (window ``pktway-bell``).  A sender WRITEs the message into a free slot
of the receiver's ring in <= 64-byte chunks and, once all are ACKed, WRITEs the
16-byte descriptor ``{slot, length, seq, crc32}`` (u32 each, big-endian) to the
doorbell.  The receiver takes the message out of the slot, hands it on, and returns the
slot by a credit WRITE into the sender's AVT: 64 bytes (one ServerNet I data field) at
``CREDIT_OFFSET`` in the sender's doorbell page, ``RING_SLOTS`` u32s, the seq of the last
message taken out of each slot.  A slot the sender filled is free again when a credit
names the seq it put there, so a lost, late or repeated credit can never free a slot
holding a newer message, and every credit repairs the ones lost before it.  At most one
credit WRITE per sender is in flight; slots freed meanwhile go in the next one; a credit
owed to a sender out of reach goes when it is reachable again, and a slot no credit
returns within CREDIT_WAIT_S of its doorbell's ACK (a receiver that restarted) is taken
back.  A
sender with no free slot for a peer holds its messages (a bounded backlog, counted) and
sends them as credits come back.

The L2RH of this SAN carries 8 route bytes: ``DID (3, 20 bits right-aligned) |
fabric preference (0 = X, 1 = Y, 2 = either) | ring base address (4)``."""

from __future__ import annotations

import struct
import zlib
from collections import Counter, deque
from collections.abc import Callable

from .avt import Interrupt, Window
from .bte import Op
from .constants import (BELL_WINDOW, CREDIT_OFFSET, CREDIT_WAIT_S, ID_MAX, L2RH_ROUTE_BYTES, PAGE_BYTES, PREF_EITHER, PW_BACKLOG,
                        RING_BASE, RING_SLOTS, RING_WINDOW, SLOT_BYTES)
from .endpoint import Endpoint

_DESC = struct.Struct(">IIII")
_CREDIT = struct.Struct(f">{RING_SLOTS}I")  # the seq last taken out of each slot


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
        # sending: per peer, the seq of the message in each busy slot, and the messages waiting for a slot
        self.busy: dict[int, dict[int, int]] = {p: {} for p in core.peers}
        self.rung: dict[int, dict[int, float]] = {p: {} for p in core.peers}  # slot -> when its doorbell was ACKed
        self.next_slot: dict[int, int] = {p: 0 for p in core.peers}
        self.backlog: dict[int, deque[tuple[int, int, bytes]]] = {p: deque() for p in core.peers}
        self.seq = 0
        # receiving: per sender, the seq last taken out of each slot, and the credit WRITE state
        self.taken: dict[int, list[int]] = {p: [0] * RING_SLOTS for p in core.peers}
        self.credit_out: dict[int, bool] = {p: False for p in core.peers}  # a credit WRITE is in flight
        self.credit_owed: dict[int, bool] = {p: False for p in core.peers}  # slots freed since it left
        self.counters: Counter[str] = Counter()
        core.on_interrupt = self._interrupt
        core.on_tick = self._tick

    # --- sending --------------------------------------------------------------------------------
    def send(self, raw_route: bytes, message: bytes, now: float) -> bool:
        """Queue a message for the peer the route names: True when it was taken (sent now,
        or held until a credit frees a slot), False when refused (counted)."""
        c = self.counters
        try:
            did, pref, ring = parse_route(raw_route)
        except ValueError:
            c["tx_drop_bad_route"] += 1
            return False
        backlog = self.backlog.get(did)
        if backlog is None:
            c["tx_drop_unknown_peer"] += 1
            return False
        if not message or len(message) > SLOT_BYTES:
            c["tx_drop_size"] += 1
            return False
        if len(self.busy[did]) >= RING_SLOTS or backlog:
            if len(backlog) >= PW_BACKLOG:
                c["tx_drop_backlog_full"] += 1
                return False
            c["tx_stalled_no_credit"] += 1
            backlog.append((pref, ring, bytes(message)))
            return True
        self._start(did, pref, ring, message, now)
        return True

    def _start(self, did: int, pref: int, ring: int, message: bytes, now: float) -> None:
        busy, c = self.busy[did], self.counters
        slot = self.next_slot[did]
        while slot in busy:
            slot = (slot + 1) % RING_SLOTS
        self.next_slot[did] = (slot + 1) % RING_SLOTS
        self.seq = self.seq % 0xFFFFFFFF + 1  # never 0: a slot nothing was taken from holds seq 0
        seq = self.seq
        busy[slot] = seq
        bell = _DESC.pack(slot, len(message), seq, zlib.crc32(message))

        def done(op: Op) -> None:
            if op.error is None:
                c["tx_messages"] += 1  # the slot stays busy until a credit returns it
                if busy.get(slot) == seq:
                    self.rung[did][slot] = op.finished
                return
            c[f"tx_failed_{op.error}"] += 1
            if busy.get(slot) == seq:  # never rung, or the peer is gone: no credit will come
                del busy[slot]
                self._drain_backlog(did, op.finished)

        op = Op("block", did, ring + slot * SLOT_BYTES, bytes(message), len(message),
                fabric=None if pref == PREF_EITHER else pref, doorbell=ring + RING_SLOTS * SLOT_BYTES,
                bell_data=bell, on_done=done)
        self.core.bte.submit(op, now)

    def _drain_backlog(self, did: int, now: float) -> None:
        backlog, busy = self.backlog[did], self.busy[did]
        while backlog and len(busy) < RING_SLOTS:
            pref, ring, message = backlog.popleft()
            self.counters["tx_resumed"] += 1
            self._start(did, pref, ring, message, now)

    def _credit_in(self, source: int, data: bytes, now: float) -> None:
        c = self.counters
        if len(data) != _CREDIT.size:
            c["credit_drop_bad_length"] += 1
            return
        c["credit_rx"] += 1
        taken, busy = _CREDIT.unpack(data), self.busy[source]
        freed = [slot for slot, seq in busy.items() if taken[slot] == seq]
        for slot in freed:
            del busy[slot]
            self.rung[source].pop(slot, None)
        c["slots_returned"] += len(freed)
        self._drain_backlog(source, now)

    def _tick(self, now: float) -> None:
        """Credits owed to a sender that was out of reach go when it is back; a slot whose
        doorbell was ACKed CREDIT_WAIT_S ago without a credit (the receiver restarted and
        forgot it) is taken back, counted."""
        for peer, rung in self.rung.items():
            late = [slot for slot, t in rung.items() if now - t >= CREDIT_WAIT_S]
            for slot in late:
                del rung[slot], self.busy[peer][slot]
            if late:
                self.counters["slots_reclaimed_no_credit"] += len(late)
                self._drain_backlog(peer, now)
            if self.credit_owed[peer] and not self.credit_out[peer] and self.core.bte.reachable(peer):
                self._credit_back(peer, now)

    # --- receiving ------------------------------------------------------------------------------
    def _credit_back(self, source: int, now: float) -> None:
        """Return the slots taken from this sender: one credit WRITE in flight at a time."""
        if self.credit_out[source]:
            self.credit_owed[source] = True
            return
        self.credit_out[source], self.credit_owed[source] = True, False
        c = self.counters

        def done(op: Op) -> None:
            self.credit_out[source] = False
            c["credit_tx" if op.error is None else f"credit_failed_{op.error}"] += 1
            if op.error is not None:
                self.credit_owed[source] = True  # the next credit carries the whole table again
                if not self.core.bte.reachable(source):
                    return  # no path left: resent with the next message taken from this sender
            if self.credit_owed[source]:
                self._credit_back(source, op.finished)

        address = self.rings.get(source, RING_BASE) + RING_SLOTS * SLOT_BYTES + CREDIT_OFFSET
        self.core.bte.submit(Op("write", source, address, _CREDIT.pack(*self.taken[source]), on_done=done), now)

    def _interrupt(self, irq: Interrupt, now: float) -> bool:
        if irq.address == self.bell.base + CREDIT_OFFSET:
            self._credit_in(irq.source, irq.data, now)
            return True
        if irq.address != self.bell.base:
            return False
        c = self.counters
        if len(irq.data) != _DESC.size:
            c["rx_drop_bad_descriptor"] += 1
            return True
        slot, length, seq, crc = _DESC.unpack(irq.data)
        if slot >= RING_SLOTS or not 0 < length <= SLOT_BYTES or not seq:
            c["rx_drop_bad_descriptor"] += 1
            return True
        message = bytes(self.ring.memory_of(irq.source)[slot * SLOT_BYTES:slot * SLOT_BYTES + length])
        self.taken[irq.source][slot] = seq  # the slot is free again whatever the message holds
        self._credit_back(irq.source, now)
        if zlib.crc32(message) != crc:
            c["rx_drop_bad_crc"] += 1
            return True
        c["rx_messages"] += 1
        self.deliver(irq.source, message, route(irq.source, PREF_EITHER, self.rings.get(irq.source, RING_BASE)))
        return True
