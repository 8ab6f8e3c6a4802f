"""Sans-IO GSN link: bring-up/reset, wide sequencing with selective repeat, per-VC
credits, VC scheduling, keepalive and link-down detection.

Loss recovery: the receiver keeps datagrams that arrive ahead of the next expected
sequence number (bounded by the window) and delivers them in sequence order once the
hole before them is filled; it reports them in a SACK NULL.  The sender resends a
datagram at once when SACK_DUPTHRESH datagrams sent after it were selectively
acknowledged, and everything not yet acknowledged at all after an adaptive RTO.

The link is fed datagrams (``receive``) and the time (``handle_timer``), and asked
for datagrams to send (``datagrams``) and events (``events``).  It never reads a
clock or touches a socket.  Micropackets travel in bulk as :data:`MP_DTYPE`
arrays; the per-micropacket fields that change per hop (VCR/CR, RSEQ, TSEQ and
LCRC) are stamped and checked by daemons._fastpath, never with a Python loop.
"""

from __future__ import annotations

import enum
import random
import struct
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np

from .. import _fastpath
from .. import constants as C
from ..constants import MpType
from ..transitions import TransitionTable
from ..wire.errors import DecodeError
from ..wire.buffers import Bytes
from ..wire.message import encode_stream, stream_records
from ..wire.micropacket import MP_DTYPE, Micropacket, credit_split, field
from ..wire.shim import Shim, decode_datagram
from .credits import CreditLedger

_U64 = np.uint64
_SEQ_MASK = _U64(C.SEQ_MOD - 1)
_SEQUENCED = np.zeros(16, bool)
_SEQUENCED[[int(t) for t in C.SEQUENCED_TYPES]] = True


class LinkState(enum.Enum):
    RESETTING = "resetting"
    UP = "up"


class LinkEvent(enum.Enum):
    RESET_ACKED = "reset_acked"  # the peer answered our RESET/INIT (remote)
    PEER_RESET = "peer_reset"  # the peer sent a RESET/INIT with a new nonce (remote)
    FAILED = "failed"  # dead interval or retransmission limit (local)


# The link's transitions (daemons/_link.c's CLink follows the same table: its
# ST_RESETTING/ST_UP moves are checked against this one by the differential tests).
LINK_TABLE: TransitionTable[LinkState, LinkEvent] = TransitionTable("link", {
    (LinkState.RESETTING, LinkEvent.RESET_ACKED): LinkState.UP,
    (LinkState.RESETTING, LinkEvent.PEER_RESET): LinkState.UP,
    (LinkState.UP, LinkEvent.PEER_RESET): LinkState.UP,  # the peer restarted: up again with its new nonce
    (LinkState.UP, LinkEvent.FAILED): LinkState.RESETTING,
}, remote=(LinkEvent.RESET_ACKED, LinkEvent.PEER_RESET), initial=(LinkState.RESETTING,))


@dataclass(frozen=True)
class LinkUp:
    peer_nonce: int


@dataclass(frozen=True)
class LinkDown:
    reason: str


@dataclass(frozen=True)
class Received:
    """In-order upper-layer micropackets (HEADER/DATA/ADMIN) of one VC."""

    vc: int
    recs: np.ndarray


Event: TypeAlias = LinkUp | LinkDown | Received
"""What :meth:`Link.events` hands up."""


@dataclass(frozen=True)
class Timers:
    ack_delay: float = C.ACK_DELAY_S
    rtx_timeout: float = C.RTX_TIMEOUT_S
    rtx_limit: int = C.RTX_LIMIT
    rtx_timeout_max: float = C.RTX_TIMEOUT_MAX_S  # consecutive timeouts double the RTO up to this
    rtx_timeout_min: float = C.RTX_TIMEOUT_MIN_S  # floor of the adaptive RTO (rtx_timeout: the first one)
    reset_interval: float = C.RESET_INTERVAL_S
    keepalive: float = C.KEEPALIVE_S
    dead_interval: float = C.DEAD_INTERVAL_S


class _VcQueue:
    """FIFO of micropacket arrays for one VC; takes any number of micropackets."""

    __slots__ = ("chunks", "head", "count")

    def __init__(self) -> None:
        self.chunks: deque[np.ndarray] = deque()
        self.head = 0
        self.count = 0

    def push(self, recs: np.ndarray) -> None:
        if len(recs):
            self.chunks.append(recs)
            self.count += len(recs)

    def take(self, n: int, out: list[np.ndarray]) -> int:
        taken = 0
        while taken < n and self.chunks:
            chunk = self.chunks[0]
            k = min(n - taken, len(chunk) - self.head)
            out.append(chunk[self.head : self.head + k])
            taken += k
            self.head += k
            if self.head == len(chunk):
                self.chunks.popleft()
                self.head = 0
        self.count -= taken
        return taken

    def clear(self) -> int:
        dropped = self.count
        self.chunks.clear()
        self.head = self.count = 0
        return dropped


class _Sent:
    """One datagram in flight: its micropackets as last sent and its recovery state."""

    __slots__ = ("seq", "recs", "xmit", "sent", "sacked", "lost")

    def __init__(self, seq: int, recs: np.ndarray, xmit: int, sent: float) -> None:
        self.seq, self.recs, self.xmit, self.sent = seq, recs, xmit, sent
        self.sacked = self.lost = False  # sent < 0: retransmitted, no round-trip sample (Karn)


def sack_ranges(buffered: dict[int, np.ndarray], expected: int) -> list[tuple[int, int]]:
    """The lowest SACK_RANGES merged ranges of buffered datagrams, as offsets from ``expected``."""
    out: list[list[int]] = []
    for seq in sorted(buffered):
        end = seq + len(buffered[seq])
        if out and seq <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        elif len(out) == C.SACK_RANGES:
            break
        else:
            out.append([seq, end])
    return [(a - expected, b - expected) for a, b in out]


class Link:
    def __init__(
        self,
        cable_id: int,
        now: float,
        *,
        buffers: tuple[int, ...] = C.VC_BUFFER_MPS,
        timers: Timers = Timers(),
        rng: random.Random | None = None,
        window: int = C.SEQ_WINDOW_MPS,
        max_mps: int = C.MAX_DATAGRAM_MPS,
    ) -> None:
        if not 1 <= max_mps <= C.MAX_DATAGRAM_MPS:
            raise ValueError(f"max_mps must be 1..{C.MAX_DATAGRAM_MPS}, not {max_mps}")
        self.cable_id = cable_id
        self.max_mps = max_mps  # micropackets per cable datagram (the underlay's MTU bounds it)
        self.timers = timers
        self.buffers = tuple(buffers)
        self.window = window
        self.rng = rng or random.Random()
        self.counters: Counter[str] = Counter()
        self.queues = [_VcQueue() for _ in range(C.NUM_VCS)]
        self._events: list[Event] = []
        self._control_out: list[bytes] = []
        self.state = LinkState.RESETTING
        self.peer_nonce = 0
        self.last_heard = now
        self.last_sent = -1e9
        self._rr = 0
        self._start_reset(now)

    # --- state ---------------------------------------------------------------
    def _clear(self) -> None:
        self.next_seq = 0  # wide TSEQ of the next micropacket we sequence
        self.base = 0  # oldest unacknowledged
        self.expected = 0  # wide TSEQ we accept next
        self.inflight: deque[_Sent] = deque()
        self.xmit_count = 0  # numbers every (re)transmission, for SACK loss detection
        self.rtx_deadline: float | None = None
        self.rtx_count = 0
        self.srtt = -1.0  # no sample yet
        self.rttvar = 0.0
        self.rto = self.timers.rtx_timeout
        self.buffered: dict[int, np.ndarray] = {}  # out-of-order datagrams by wide seq
        self.buffered_mps = 0
        self.sack_due = False
        self.ack_due: float | None = None
        self.credit_due: float | None = None
        self.unacked_rx = 0
        self.ledger = CreditLedger(self.buffers)
        for q in self.queues:
            dropped = q.clear()
            if dropped:
                self.counters["dropped_on_reset_mps"] += dropped

    def _start_reset(self, now: float) -> None:
        self.my_nonce = self.rng.getrandbits(32) or 1
        self._clear()
        self.reset_due = now

    def _go_up(self, peer_nonce: int, now: float, event: LinkEvent = LinkEvent.RESET_ACKED) -> None:
        self.peer_nonce = peer_nonce
        self.state = LINK_TABLE.next(self.state, event)
        self.last_heard = now
        self.ledger.grant_initial()
        self.counters["link_up"] += 1
        self._events.append(LinkUp(peer_nonce))

    def _fail(self, reason: str, now: float) -> None:
        self.counters[f"link_down_{reason}"] += 1
        self._events.append(LinkDown(reason))
        self.state = LINK_TABLE.next(self.state, LinkEvent.FAILED)
        self._start_reset(now)

    @property
    def up(self) -> bool:
        return self.state is LinkState.UP

    def events(self) -> list[Event]:
        ev, self._events = self._events, []
        return ev

    # --- upper interface ------------------------------------------------------
    def enqueue(self, vc: int, recs: np.ndarray) -> None:
        """Queue micropackets (whole Messages, or successive parts of one) on ``vc``."""
        self.queues[vc].push(recs)

    def enqueue_message(self, vc: int, d_ula: bytes, s_ula: bytes, ethertype: int, payload: Bytes) -> int:
        """Queue one Message built from its fields; the micropackets queued.  (CLink does
        the same in C, daemons/_ulpsend.h; this is its oracle.)"""
        recs = stream_records(vc, encode_stream(vc, d_ula, s_ula, ethertype, payload))
        self.enqueue(vc, recs)
        return len(recs)

    def queued(self, vc: int) -> int:
        return self.queues[vc].count

    def release(self, vc: int, n: int) -> None:
        """The upper layer freed ``n`` receive-buffer micropackets of ``vc``."""
        self.ledger.release(vc, n)

    def reclaim(self, vc: int, n: int) -> int:
        """Undo up to ``n`` of the latest releases of ``vc`` whose credits have not
        left yet (call before ``datagrams``); returns how many."""
        return self.ledger.reclaim(vc, n)

    @property
    def credits(self) -> list[int]:
        return self.ledger.tx

    # --- receive ----------------------------------------------------------------
    def receive(self, datagram: Bytes, now: float) -> None:
        try:
            shim, count = decode_datagram(datagram)
        except DecodeError as exc:
            self.counters[f"bad_shim_{exc.field}"] += 1
            return
        if shim.cable_id != self.cable_id:
            self.counters["wrong_cable"] += 1
            return
        recs = np.frombuffer(datagram, MP_DTYPE, count, C.SHIM_BYTES)
        bad = _fastpath.lcrc_check(recs)  # each micropacket on its own (spec §1.4 item 3, §1.5)
        if bad:
            self.counters["lcrc_error"] += bad
            ok = np.empty(count, np.uint8)
            _fastpath.lcrc_check(recs, ok)
            # sequenced: those after the first bad one are out of sequence now (go-back-N)
            keep = recs[: int(np.argmin(ok))] if shim.sequenced else recs[ok.view(bool)]
            self.counters["dropped_after_lcrc_error_mps"] += count - bad - len(keep)
            if not len(keep):
                return
            recs = keep
        if shim.sequenced:
            self._receive_sequenced(shim, recs, now)
        else:
            self._receive_control(shim, recs, now)

    def _nonces_ok(self, shim: Shim) -> bool:
        if self.state is not LinkState.UP:
            self.counters["rx_while_resetting"] += 1
            return False
        if shim.src_nonce != self.peer_nonce or shim.dst_nonce != self.my_nonce:
            self.counters["stale_nonce"] += 1
            return False
        return True

    def _process_ack(self, ack: int, rseq_field: np.ndarray | None, now: float) -> bool:
        if ack == C.NO_ACK:
            ack = 0
        if ack > self.next_seq:
            self.counters["bad_ack"] += 1
            return False
        if rseq_field is not None and (rseq_field != _U64((ack - 1) & 0xFF)).any():
            self.counters["rseq_mismatch"] += 1
            return False
        if ack < self.base:  # overtaken by a later ack: old news, the datagram is still good
            self.counters["stale_ack"] += 1
            return True
        if ack > self.base:
            self.base = ack
            sample = -1.0
            while self.inflight and self.inflight[0].seq + len(self.inflight[0].recs) <= ack:
                sent = self.inflight.popleft().sent
                if sent >= 0:
                    sample = now - sent
            if sample >= 0:
                self._rtt_sample(sample)
            self.rtx_count = 0
            self.rtx_deadline = now + self.rto if self.inflight else None
        return True

    def _rtt_sample(self, r: float) -> None:
        """RFC 6298's estimator; the RTO clamped to [rtx_timeout_min, rtx_timeout_max]."""
        if self.srtt < 0:
            self.srtt = r
            self.rttvar = r / 2
        else:
            self.rttvar = (1 - C.RTT_BETA) * self.rttvar + C.RTT_BETA * abs(self.srtt - r)
            self.srtt = (1 - C.RTT_ALPHA) * self.srtt + C.RTT_ALPHA * r
        self.rto = min(max(self.srtt + 4 * self.rttvar, self.timers.rtx_timeout_min), self.timers.rtx_timeout_max)

    def _process_sack(self, ack: int, data: bytes) -> None:
        """Mark the datagrams a SACK NULL covers, then look for losses."""
        words = struct.unpack("!8I", data)
        ranges = [(ack + a, ack + b) for a, b in zip(words[::2], words[1::2]) if a or b]
        if not all(0 < lo - ack < hi - ack and hi <= self.next_seq for lo, hi in ranges):
            self.counters["bad_sack"] += 1
            return
        if not ranges:
            return
        self.counters["rx_sack"] += 1
        for e in self.inflight:
            if not e.sacked:
                end = e.seq + len(e.recs)
                e.sacked = any(lo <= e.seq and end <= hi for lo, hi in ranges)
        self._detect_losses()

    def _detect_losses(self) -> None:
        """A datagram is lost (resent by the next ``datagrams``) when SACK_DUPTHRESH
        transmissions after it were selectively acked."""
        top: list[int] = []  # the SACK_DUPTHRESH latest transmissions selectively acked so far
        for e in reversed(self.inflight):
            if e.sacked:
                top = sorted(top + [e.xmit])[-C.SACK_DUPTHRESH:]
            elif not e.lost and len(top) == C.SACK_DUPTHRESH and top[0] > e.xmit:
                e.lost = True

    def _receive_sequenced(self, shim: Shim, recs: np.ndarray, now: float) -> None:
        if not self._nonces_ok(shim):
            return
        ctrl = recs["ctrl"].astype(_U64)
        n = len(ctrl)
        types = field(ctrl, C.CTRL_TYPE_SHIFT, 4).astype(np.intp)
        if not _SEQUENCED[types].all():
            self.counters["unsequenced_in_sequenced_batch"] += 1
            return
        tseq = field(ctrl, C.CTRL_TSEQ_SHIFT, 8)
        if (tseq != ((np.arange(n, dtype=_U64) + _U64(shim.seq & 0xFF)) & _SEQ_MASK)).any():
            self.counters["tseq_mismatch"] += 1
            return
        if not self._process_ack(shim.ack, field(ctrl, C.CTRL_RSEQ_SHIFT, 8), now):
            return
        self.last_heard = now
        if shim.seq > self.expected:
            self._buffer(shim.seq, recs, now)
            return
        start = self.expected - shim.seq
        if start >= n:
            self.counters["duplicate"] += 1
            self._want_ack(now, soon=True)
            self.sack_due = bool(self.buffered)
            return
        holes = bool(self.buffered)
        self._accept(recs[start:], now)
        while self.buffered:  # the hole is filled: what waited behind it, in sequence order
            seq = min(self.buffered)
            if seq > self.expected:
                break
            part = self.buffered.pop(seq)
            self.buffered_mps -= len(part)
            if self.expected - seq >= len(part):
                self.counters["duplicate"] += 1
                continue
            self.counters["ooo_delivered_mps"] += seq + len(part) - self.expected
            self._accept(part[self.expected - seq:], now)
        if holes:  # a hole filled (or some of it): the sender learns it at once
            self._want_ack(now, soon=True)
        self.sack_due = bool(self.buffered)

    def _buffer(self, seq: int, recs: np.ndarray, now: float) -> None:
        """Keep a datagram that arrived ahead of a hole (its ack was taken already)."""
        self._want_ack(now, soon=True)
        self.sack_due = True
        end = seq + len(recs)
        limit = max(self.window, C.OOO_MAX_MPS)  # the sender's window may be larger than ours
        if end - self.expected > limit:
            self.counters["out_of_window"] += 1
            return
        if any(s <= seq and end <= s + len(r) for s, r in self.buffered.items()):
            self.counters["duplicate"] += 1
            return
        self.counters["out_of_order"] += 1
        old = len(self.buffered.get(seq, ()))  # a shorter one from the same seq (a re-cut datagram)
        if self.buffered_mps - old + len(recs) > limit or (not old and len(self.buffered) >= C.OOO_MAX_DATAGRAMS):
            self.counters["ooo_buffer_full"] += 1
            return
        self.buffered[seq] = recs.copy()
        self.buffered_mps += len(recs) - old

    def _accept(self, recs: np.ndarray, now: float) -> None:
        """Take in-sequence micropackets: credits granted to us, then each VC's."""
        ctrl = recs["ctrl"].astype(_U64)
        types = field(ctrl, C.CTRL_TYPE_SHIFT, 4).astype(np.intp)
        self.expected += len(recs)
        self.unacked_rx += len(recs)
        self.counters["rx_mps"] += len(recs)
        self._want_ack(now, soon=self.unacked_rx >= self.window // 4)
        # credits granted to us ride on every accepted sequenced micropacket
        vcr = field(ctrl, C.CTRL_VCR_SHIFT, 2).astype(np.intp)
        cr = field(ctrl, C.CTRL_CR_SHIFT, 6).astype(np.int64)
        if cr.any():
            self.ledger.granted(np.bincount(vcr, weights=cr, minlength=C.NUM_VCS).astype(int))
        upper = types != MpType.CREDIT
        if not upper.any():
            return
        vcs = field(ctrl, C.CTRL_VC_SHIFT, 2).astype(np.intp)
        if not upper.all():
            recs, vcs = recs[upper], vcs[upper]
        counts = np.bincount(vcs, minlength=C.NUM_VCS)
        for vc_index in np.flatnonzero(counts):
            vc = int(vc_index)
            part = recs if counts[vc] == len(recs) else recs[vcs == vc]
            accepted = self.ledger.received(vc, len(part))
            if accepted < len(part):
                self.counters[f"credit_violation_vc{vc}_mps"] += len(part) - accepted
                part = part[:accepted]
            if len(part):
                self._events.append(Received(vc, part))

    def _receive_control(self, shim: Shim, recs: np.ndarray, now: float) -> None:
        # Decode the whole batch before acting on any of it: a reserved TYPE (or a
        # bad LCRC the batch fold missed) drops the batch, counted, like any other
        # malformed datagram; a DecodeError must never leave the link.
        try:
            mps = [Micropacket.decode(raw.tobytes()) for raw in recs]  # few micropackets
        except DecodeError as exc:
            self.counters[f"bad_control_{exc.field}"] += 1
            return
        for mp in mps:
            kind = MpType(mp.type)  # decode() made it one; this tells the checker
            if kind in (MpType.RESET, MpType.INIT):
                self.counters[f"rx_{kind.name.lower()}"] += 1
                self._on_reset(shim.src_nonce, MpType.RESET_ACK if kind is MpType.RESET else MpType.INIT_ACK, now)
            elif kind in (MpType.RESET_ACK, MpType.INIT_ACK):
                if self.state is LinkState.RESETTING and shim.dst_nonce == self.my_nonce:
                    self._go_up(shim.src_nonce, now, LinkEvent.RESET_ACKED)
                elif self.state is LinkState.UP and (shim.src_nonce, shim.dst_nonce) == (self.peer_nonce,
                                                                                       self.my_nonce):
                    self.counters["duplicate_reset_ack"] += 1
                else:
                    self.counters["stale_reset_ack"] += 1
            elif kind is MpType.NULL:
                if self._nonces_ok(shim) and self._process_ack(shim.ack, None, now):
                    self.last_heard = now
                    self._process_sack(0 if shim.ack == C.NO_ACK else shim.ack, mp.data)
            else:
                self.counters["sequenced_in_control_batch"] += 1

    def _on_reset(self, their_nonce: int, answer: MpType, now: float) -> None:
        if self.state is LinkState.UP and their_nonce == self.peer_nonce:
            self.counters["duplicate_reset"] += 1  # already answered: answer again, keep state
        else:
            if self.state is LinkState.UP:
                self._events.append(LinkDown("peer_reset"))
                self.counters["link_down_peer_reset"] += 1
            # Keep my_nonce: the peer may already know it from our RESETs (both
            # sides resetting at once); stale data is still told apart because
            # the peer's nonce is new.
            self._clear()
            self._go_up(their_nonce, now, LinkEvent.PEER_RESET)
        self._control_out.append(self._control_datagram(answer, dst_nonce=their_nonce))

    def _want_ack(self, now: float, soon: bool) -> None:
        due = now if soon else now + self.timers.ack_delay
        if self.ack_due is None or due < self.ack_due:
            self.ack_due = due

    # --- send ------------------------------------------------------------------
    def _control_datagram(self, kind: MpType, dst_nonce: int | None = None) -> bytes:
        rseq = (self.expected - 1) & 0xFF
        data = bytes(C.MP_DATA_BYTES)
        if kind is MpType.NULL and self.buffered:
            pairs = sack_ranges(self.buffered, self.expected)
            words = [w for pair in pairs for w in pair] + [0] * (2 * (C.SACK_RANGES - len(pairs)))
            data = struct.pack("!8I", *words)
            self.counters["tx_sack"] += 1
        mp = Micropacket(data=data, type=kind, rseq=rseq, tseq=(self.next_seq - 1) & 0xFF)
        shim = Shim(0, self.cable_id, self.my_nonce, self.peer_nonce if dst_nonce is None else dst_nonce,
                    self.next_seq, self.expected)
        return shim.encode() + mp.encode()

    def _sequenced_datagram(self, seq: int, recs: np.ndarray) -> bytes:
        shim = Shim(C.SHIM_FLAG_SEQUENCED, self.cable_id, self.my_nonce, self.peer_nonce, seq, self.expected)
        return shim.encode() + recs.tobytes()

    def _stamp(self, recs: np.ndarray, seq: int, grants: list[tuple[int, int]]) -> None:
        """Set VCR/CR (first micropackets), RSEQ and TSEQ, and fix LCRC."""
        # compiled, in place; credits ride on the first micropackets, one (VCR, CR) each
        _fastpath.stamp(recs, (self.expected - 1) & 0xFF, seq & 0xFF, bytes(x for g in grants for x in g))

    def _credit_mps(self, k: int) -> np.ndarray:
        recs = np.zeros(k, MP_DTYPE)
        empty = Micropacket(type=MpType.CREDIT).encode()
        recs[:] = np.frombuffer(empty, MP_DTYPE)[0]
        return recs

    def _build_batch(self, now: float, force_credit: bool) -> bytes | None:
        space = min(self.max_mps, self.window - (self.next_seq - self.base))
        if space <= 0:
            self.counters["window_full"] += 1
            return None
        pending = self.ledger.pending
        want_credit = force_credit or any(p >= max(1, b // 4) for p, b in zip(pending, self.buffers))
        grants: list[tuple[int, int]] = []
        if want_credit:
            grants = [(vc, cr) for vc in range(C.NUM_VCS) for cr in credit_split(pending[vc])][:space]
        parts: list[np.ndarray] = []
        taken_total = 0
        progress = True
        while progress and taken_total < space:
            progress = False
            for i in range(C.NUM_VCS):
                vc = (self._rr + i) % C.NUM_VCS
                q = self.queues[vc]
                k = min(C.VC_QUANTUM_MPS, self.ledger.tx[vc], q.count, space - taken_total)
                if k > 0:
                    got = q.take(k, parts)
                    self.ledger.spend(vc, got)
                    taken_total += got
                    progress = True
            self._rr = (self._rr + 1) % C.NUM_VCS
        if not want_credit and taken_total:  # credits ride free on the data micropackets
            grants = [(vc, cr) for vc in range(C.NUM_VCS) for cr in credit_split(pending[vc])][:taken_total]
        if not parts and not grants:
            return None
        extra = max(0, len(grants) - taken_total)
        if extra:
            parts.append(self._credit_mps(extra))
        recs = np.concatenate(parts, dtype=MP_DTYPE) if len(parts) > 1 else parts[0].copy()
        for vc, cr in grants:
            self.ledger.returned(vc, cr)
        seq = self.next_seq
        self._stamp(recs, seq, grants)
        self.next_seq += len(recs)
        self.inflight.append(_Sent(seq, recs, self.xmit_count, now))
        self.xmit_count += 1
        if self.rtx_deadline is None:
            self.rtx_deadline = now + self.rto
        self.counters["tx_mps"] += len(recs)
        return self._sequenced_datagram(seq, recs)

    def datagrams(self, now: float) -> list[bytes]:
        """Everything that should be sent now."""
        out, self._control_out = self._control_out, []
        if self.state is LinkState.RESETTING:
            if now >= self.reset_due:
                out.append(self._control_datagram(MpType.RESET, dst_nonce=0))
                self.reset_due = now + self.timers.reset_interval
                self.counters["tx_reset"] += 1
        else:
            ack_due = self.ack_due is not None and now >= self.ack_due
            if not any(self.ledger.pending):
                self.credit_due = None
            elif self.credit_due is None:
                self.credit_due = now + self.timers.ack_delay
            credit_due = self.credit_due is not None and (ack_due or now >= self.credit_due)
            out += self._resend(lambda e: e.lost, "fast_rtx_mps")  # holes the SACKs revealed
            while True:
                dgram = self._build_batch(now, force_credit=credit_due and any(self.ledger.pending))
                if dgram is None:
                    break
                out.append(dgram)
                ack_due = False
            if not any(self.ledger.pending):
                self.credit_due = None
            if out:
                self._acked_out()
            if (self.sack_due and self.buffered) or (
                    not out and (ack_due or now >= self.last_sent + self.timers.keepalive)):
                out.append(self._control_datagram(MpType.NULL))
                self._acked_out()
            self.sack_due = False
        if out:
            self.last_sent = now
        return out

    def _acked_out(self) -> None:
        self.ack_due = None
        self.unacked_rx = 0

    # --- timers -----------------------------------------------------------------
    def timer(self) -> float:
        """The next time ``handle_timer`` must run."""
        if self.state is LinkState.RESETTING:
            return self.reset_due
        t = min(self.last_sent + self.timers.keepalive, self.last_heard + self.timers.dead_interval)
        for due in (self.ack_due, self.credit_due, self.rtx_deadline):
            if due is not None:
                t = min(t, due)
        return t

    def handle_timer(self, now: float) -> list[bytes]:
        """Run due timers; returns retransmissions (call ``datagrams`` too)."""
        if self.state is LinkState.RESETTING:
            return []
        if now >= self.last_heard + self.timers.dead_interval:
            self._fail("silent", now)
            return []
        if self.rtx_deadline is None or now < self.rtx_deadline:
            return []
        self.rtx_count += 1
        if self.rtx_count > self.timers.rtx_limit:
            self._fail("rtx_limit", now)
            return []
        # back off: a peer that is late (not scheduled, behind on its input) is not
        # flooded with the whole window every rtx_timeout, nor reset in 180 ms
        # The first timeout came after the adaptive RTO; more without progress mean a
        # late or gone peer: they back off from rtx_timeout as before
        backoff = self.timers.rtx_timeout * (1 << min(self.rtx_count, 30))
        self.rtx_deadline = now + max(self.rto, min(backoff, self.timers.rtx_timeout_max))
        # The first timeout resends the oldest datagram the peer lacks (a late ack, a
        # loaded host, costs one datagram); more resend all it holds neither in
        # sequence nor out of order
        head = next((e for e in self.inflight if not e.sacked), None)
        out = self._resend((lambda e: e is head) if self.rtx_count == 1 else (lambda e: not e.sacked),
                           "timeout_rtx_mps")
        if out:
            self._acked_out()
            self.last_sent = now
        return out

    def _resend(self, which: Callable[[_Sent], bool], counter: str) -> list[bytes]:
        out = []
        for e in self.inflight:
            if which(e):
                self._stamp_rseq(e.recs)
                out.append(self._sequenced_datagram(e.seq, e.recs))
                e.lost, e.sent, e.xmit = False, -1.0, self.xmit_count
                self.xmit_count += 1
                self.counters["rtx_mps"] += len(e.recs)
                self.counters[counter] += len(e.recs)
        return out

    def _stamp_rseq(self, recs: np.ndarray) -> None:
        _fastpath.stamp(recs, (self.expected - 1) & 0xFF)  # RSEQ only, LCRC fixed in place

    def status(self) -> dict[str, object]:
        return {
            "state": self.state.value,
            "credits_tx": list(self.ledger.tx),
            "credits_in_use": [b - o for b, o in zip(self.buffers, self.ledger.rx_outstanding)],
            "credits_pending_return": list(self.ledger.pending),
            "queued_mps": [q.count for q in self.queues],
            "inflight_mps": self.next_seq - self.base,
            "counters": dict(self.counters),
        }
