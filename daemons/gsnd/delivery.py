"""Sans-IO, lossless delivery of received Messages to ULP clients.

GSN is flow-controlled end to end: a receiver that cannot take a Message does
not drop it, it stops returning link credits.  A Message for a client whose
socket is full waits in that client's backlog (in order, per client), and while
any backlog holds a Message of VC v the endpoint withholds VC v's credits
(:meth:`Endpoint.hold`), so the sender, and through a switch every hop, is
back-pressured.  Withheld credits bound the backlogs: the peer can send at most
one VC buffer more before it runs dry.

The hold is bounded in time: a client that *reads* nothing for ``hold_s`` while
Messages wait loses its backlog.  Reading is judged by the client's socket, not
by gsnd's sends: with an ``unread(key) -> bytes | None`` probe (the bytes gsnd
put in the socket that the client has not read yet, SIOCOUTQ), a client whose
unread bytes went down since the last look is slow, not stalled, and keeps its
backlog however long it takes; it is also what keeps a gsnd that was itself
not scheduled for a while from blaming a client that read meanwhile.  Without a
probe, a frame taken by the socket is the only sign of reading.  Each lost Message is counted, and a drop
notice is queued for the gsnd that sent it (``take_notices``); from then on the
client is *stalled*: Messages it cannot take at once are dropped (counted,
noticed) instead of held, until it reads again.  Notices are aggregated per
(sender, VC, EtherType, reason) and released at most every ``notice_interval``.

The driver owns the sockets: ``send(key, frame) -> "ok" | "full" | "gone"``.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field
from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING, Generic, TypeVar

from .. import constants as C
from ..wire.message import Message
from ..wire.ulp import DropNotice, DropReason, Frame, Op

if TYPE_CHECKING:
    from ..endpoint.core import Endpoint

K = TypeVar("K", bound=Hashable)  # a client's key (the ULP server's client object)


@dataclass
class _Backlog:
    queue: deque[tuple[int, bytes, int, bytes]] = field(default_factory=deque)  # (vc, s_ula, ethertype, frame)
    since: float = 0.0  # last time the client was seen reading (or the backlog began)
    mark: int | None = None  # unread bytes in its socket when last seen reading
    stalled: bool = False


@dataclass(frozen=True)
class Notice:
    """A drop notice to send to the gsnd at ``ula``."""

    ula: bytes
    notice: DropNotice


class Delivery(Generic[K]):
    def __init__(self, *, hold_s: float = C.ULP_HOLD_S, notice_interval: float = C.ULP_NOTICE_INTERVAL_S,
                 notice_keys: int = C.ULP_NOTICE_KEYS_MAX, unread: Callable[[K], int | None] | None = None) -> None:
        self.hold_s = hold_s
        self.unread = unread
        self.notice_interval = notice_interval
        self.notice_keys = notice_keys
        self.backlogs: dict[K, _Backlog] = {}
        self.waiting = [0] * C.NUM_VCS  # Messages in all backlogs, per VC
        self.counters: Counter[str] = Counter()
        self._notices: dict[tuple[bytes, int, int, DropReason], int] = {}  # (s_ula, vc, ethertype, reason)
        self._notice_due = -math.inf

    # --- clients ------------------------------------------------------------------
    def add(self, key: K) -> None:
        self.backlogs[key] = _Backlog()

    def remove(self, key: K) -> None:
        bl = self.backlogs.pop(key, None)
        if bl is not None:
            self._drop_all(bl, DropReason.CLIENT_GONE)

    def backlog(self, key: K) -> int:
        bl = self.backlogs.get(key)
        return len(bl.queue) if bl else 0

    def held(self) -> list[bool]:
        """Per VC: must the endpoint withhold credits now?"""
        return [n > 0 for n in self.waiting]

    # --- delivery -----------------------------------------------------------------
    def deliver(self, msg: Message, keys: Iterable[K], now: float, send: Callable[[K, bytes], str]) -> None:
        """``msg`` for the clients ``keys`` (those bound to its EtherType)."""
        frame = Frame(Op.RECV, msg.vc, msg.ethertype, msg.s_ula, msg.payload).encode()
        taken = False
        for key in keys:
            bl = self.backlogs.get(key)
            if bl is None:
                continue
            if not bl.queue:
                how = send(key, frame)
                if how == "ok":
                    bl.stalled = False
                    taken = True
                    continue
                if how == "gone":
                    self._dropped(msg.s_ula, msg.vc, msg.ethertype, DropReason.CLIENT_GONE)
                    continue
                if bl.stalled:
                    self._dropped(msg.s_ula, msg.vc, msg.ethertype, DropReason.NOT_READING)
                    continue
                bl.since, bl.mark = now, self._unread(key)
            bl.queue.append((msg.vc, msg.s_ula, msg.ethertype, frame))
            self.waiting[msg.vc] += 1
            self.counters["rx_held"] += 1
            taken = True
        if taken:
            self.counters["rx_messages"] += 1

    def pump(self, key: K, now: float, send: Callable[[K, bytes], str]) -> bool:
        """Hand waiting frames to client ``key`` while it takes them; True when its
        backlog is empty."""
        bl = self.backlogs.get(key)
        if bl is None:
            return True
        q = bl.queue
        took = False
        try:
            while q:
                how = send(key, q[0][3])
                if how == "full":
                    return False
                vc, s_ula, ethertype, _ = q.popleft()
                self.waiting[vc] -= 1
                if how == "ok":
                    took = True
                else:
                    self._dropped(s_ula, vc, ethertype, DropReason.CLIENT_GONE)
            return True
        finally:
            if took:
                bl.since, bl.mark, bl.stalled = now, self._unread(key), False

    def _unread(self, key: K) -> int | None:
        return None if self.unread is None else self.unread(key)

    # --- the bound ---------------------------------------------------------------
    def timer(self) -> float:
        t = math.inf
        for bl in self.backlogs.values():
            if bl.queue:
                t = min(t, bl.since + self.hold_s)
        if self._notices:
            t = min(t, self._notice_due)
        return t

    def handle_timer(self, now: float) -> None:
        for key, bl in self.backlogs.items():
            if bl.queue and now >= bl.since + self.hold_s:
                unread = self._unread(key)
                if unread is not None and bl.mark is not None and unread < bl.mark:
                    # it read, just not enough for a frame to fit: slow, not stalled
                    self.counters["client_slow"] += 1
                    bl.since, bl.mark = now, unread
                    continue
                self.counters["client_stalled"] += 1
                bl.stalled = True
                self._drop_all(bl, DropReason.NOT_READING)

    def _drop_all(self, bl: _Backlog, reason: DropReason) -> None:
        for vc, s_ula, ethertype, _ in bl.queue:
            self.waiting[vc] -= 1
            self._dropped(s_ula, vc, ethertype, reason)
        bl.queue.clear()

    def _dropped(self, s_ula: bytes, vc: int, ethertype: int, reason: DropReason) -> None:
        self.counters[f"rx_dropped_{reason.name.lower()}"] += 1
        key = (s_ula, vc, ethertype, reason)
        if key in self._notices:
            self._notices[key] += 1
        elif len(self._notices) < self.notice_keys:
            self._notices[key] = 1
        else:
            self.counters["notice_table_full"] += 1

    # --- notices -------------------------------------------------------------------
    def take_notices(self, now: float) -> list[Notice]:
        """Drop notices due now (at most one batch per ``notice_interval``)."""
        if not self._notices or now < self._notice_due:
            return []
        out = [Notice(ula, DropNotice(reason, vc, ethertype, min(n, 0xFFFFFFFF)))
               for (ula, vc, ethertype, reason), n in self._notices.items()]
        self._notices.clear()
        self._notice_due = now + self.notice_interval
        self.counters["notices_sent"] += len(out)
        return out


def notice_error(notice: DropNotice, at: bytes) -> Frame:
    """The ERROR frame a sending gsnd gives its clients for a notice from ``at``."""
    from ..wire.ula import format_ula

    why = "the receiving client read nothing" if notice.reason is DropReason.NOT_READING else \
        "the receiving client went away"
    text = f"{notice.count} Message(s) on VC{notice.vc} dropped at {format_ula(at)}: {why}"
    return Frame(Op.ERROR, notice.vc, notice.ethertype, at, text.encode())


def is_notice(msg: Message) -> bool:
    return msg.ethertype == C.ETHERTYPE_OUI_EXTENDED and bytes(msg.payload[:5]) == C.ULP_NOTICE_PROTOCOL


def settle(delivery: Delivery[K], ep: Endpoint, now: float) -> list[Frame]:
    """Glue to a sans-IO :class:`~daemons.endpoint.core.Endpoint` after delivery state
    changed: hold exactly the VCs that have Messages waiting, and send the drop
    notices due.  Returns the ERROR frames for notices about our own Messages
    (gsnd gives them to its clients bound to the frame's EtherType)."""
    for vc, on in enumerate(delivery.held()):
        if ep.holding[vc] != on:
            ep.hold(vc, on)
    local = []
    for n in delivery.take_notices(now):
        if n.ula == ep.ula:
            local.append(notice_error(n.notice, n.ula))
        elif n.ula in (C.ULA_BROADCAST, C.ULA_NONE):
            delivery.counters["notice_bad_source"] += 1
        elif not ep.send(C.ULP_NOTICE_VC, n.ula, C.ETHERTYPE_OUI_EXTENDED, n.notice.encode()):
            delivery.counters["notice_not_sent"] += 1
    return local


def notice_in(delivery: Delivery[K], msg: Message) -> Frame | None:
    """A drop notice that arrived (``is_notice(msg)``): the ERROR frame for our
    clients bound to the dropped Messages' EtherType, or None (counted) if bad."""
    from ..wire.errors import DecodeError

    try:
        notice = DropNotice.decode(msg.payload)
    except DecodeError as exc:
        delivery.counters[f"notice_bad_{exc.field}"] += 1
        return None
    delivery.counters["notices_received"] += 1
    return notice_error(notice, msg.s_ula)
