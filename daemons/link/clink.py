"""The compiled GSN link: :class:`CLink` has exactly the public interface of
:class:`daemons.link.link.Link` and, for the same inputs (rng included), sends the
same bytes, raises the same events and counts the same drops.

The per-micropacket work (shim and LCRC checks, sequence/ack/credit handling, VC
round robin, stamping, the ring of wire-ready datagrams in flight, the out-of-order buffer
and the SACK scoreboard) is in
daemons/_link.c; this module only adapts it (events are the Python classes of
link.py, counters a Counter, ``status()``, a view of the credit ledger).
Link (pure Python + numpy) stays as the test oracle.
"""

from __future__ import annotations

from dataclasses import dataclass

import random
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, TypeAlias

import numpy as np

from .. import _link
from .. import constants as C
from ..wire.buffers import Bytes
from ..wire.micropacket import MP_DTYPE
from ..wire.message import decode_stream
from .link import Event, LinkDown, LinkState, LinkUp, Received, Timers
from .reassembly import AdminIn, Arrival, Delivered

_link.setup(LinkUp, LinkDown, Received, np.frombuffer, MP_DTYPE)


def _delivered(vc: int, stream: bytes, mps: int) -> Delivered:
    """A Message the data plane reassembled and hands up (the C reassembly checked what
    decode_stream checks: M_len against the micropackets and the VC)."""
    return Delivered(decode_stream(vc, stream, mps), mps)


_link.setup_dp(_delivered, AdminIn)

_LEDGER_FIELDS = ("tx", "used", "pending", "rx_outstanding")

# why the compiled loops return to Python: gsnd's dp_run (daemons/_loop.h LOOP_*) and
# gsn-switch's SwitchPlane.run (daemons/_switchrun.h)
IDLE, DEADLINE, EVENTS, CONTROL, TIMER, SEND = range(6)
REASONS = ("idle", "deadline", "events", "control", "timer", "send")


@dataclass(frozen=True)
class UlpFrameIn:
    """A frame gsnd's data plane (daemons/_ulploop.h) read from ULP client ``fd`` and hands to Python (not a SEND
    it queues itself): ``data`` (at most a whole frame and one byte more) of ``size``."""
    fd: int
    data: bytes
    size: int


@dataclass(frozen=True)
class UlpClosed:
    """The data plane saw ULP client ``fd``'s end of the connection."""
    fd: int


CEvent: TypeAlias = Event | Arrival | UlpFrameIn | UlpClosed
"""What :meth:`CLink.events` hands up: Link's events, and with the data plane attached the
Messages and Admin micropackets it reassembled and the ULP client frames it hands to Python."""


class _Counters(Mapping[str, int]):
    """Live, read-only view of the C counters with Counter semantics (a missing
    name reads 0; only non-zero counters are listed)."""

    __slots__ = ("_core",)

    def __init__(self, core: CLink) -> None:
        self._core = core

    def __getitem__(self, name: str) -> int:
        return int(self._core._counter(name))

    def __iter__(self) -> Iterator[str]:
        return iter(self._core._counter_dict())

    def __len__(self) -> int:
        return len(self._core._counter_dict())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._core._counter(name) > 0

    def __pos__(self) -> Counter[str]:
        return Counter(self._core._counter_dict())

    def total(self) -> int:
        return sum(self._core._counter_dict().values())

    def __repr__(self) -> str:
        return f"Counters({self._core._counter_dict()!r})"


class _LedgerList(list[int]):
    """A snapshot of one ledger row; item assignment writes through (test hooks)."""

    __slots__ = ("_core", "_name")
    _core: CLink
    _name: str

    def __setitem__(self, vc: int, value: int) -> None:  # type: ignore[override]  # one VC's count, no slices
        list.__setitem__(self, vc, value)
        self._core._ledger_set(self._name, vc, value)


class _LedgerView:
    """Read-mostly view of the C credit ledger with CreditLedger's attributes."""

    def __init__(self, core: CLink) -> None:
        self._core = core

    def _row(self, i: int) -> list[int]:
        row = _LedgerList(self._core._ledger()[i])
        row._core, row._name = self._core, _LEDGER_FIELDS[i]
        return row

    tx = property(lambda self: self._row(0))
    used = property(lambda self: self._row(1))
    pending = property(lambda self: self._row(2))
    rx_outstanding = property(lambda self: self._row(3))

    @property
    def buffers(self) -> tuple[int, ...]:
        return tuple(self._core._ledger()[4])

    def balanced(self) -> bool:
        tx, used, pending, out, buffers = self._core._ledger()
        return all(u + p + o == b and u >= 0 and p >= 0 and o >= 0 and t >= 0
                   for u, p, o, b, t in zip(used, pending, out, buffers, tx))


class CLink(_link.Core):  # type: ignore[misc]  # the C extension has no stub; CLink's own surface is typed
    if TYPE_CHECKING:  # what _link.Core provides, with Link's signatures (differential tests hold them equal)
        up: bool
        cable_id: int
        max_mps: int
        dp_vc: int  # the VC the data plane reassembles (-1: not attached)

        def receive(self, datagram: Bytes, now: float) -> None: ...
        def datagrams(self, now: float) -> list[bytes]: ...
        def timer(self) -> float: ...
        def handle_timer(self, now: float) -> list[bytes]: ...
        def events(self) -> list[CEvent]: ...
        def enqueue(self, vc: int, recs: np.ndarray) -> None: ...
        def enqueue_message(self, vc: int, d_ula: bytes, s_ula: bytes, ethertype: int, payload: Bytes) -> int: ...
        def queued(self, vc: int) -> int: ...
        def release(self, vc: int, n: int) -> None: ...
        def reclaim(self, vc: int, n: int) -> int: ...
        def dp_counters(self) -> dict[str, dict[str, int]]: ...

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
        self.timers = timers
        self.buffers = tuple(buffers)
        self.window = window
        self.rng = rng or random.Random()
        t = (timers.ack_delay, timers.rtx_timeout, timers.reset_interval, timers.keepalive,
             timers.dead_interval, timers.rtx_limit, timers.rtx_timeout_max, timers.rtx_timeout_min)
        super().__init__(cable_id, now, self.buffers, t, self.rng, window, max_mps)
        self.ledger = _LedgerView(self)
        self.counters = _Counters(self)  # live, like Link.counters (read-only)

    @property
    def state(self) -> LinkState:
        return LinkState.UP if self._state_code else LinkState.RESETTING

    @property
    def credits(self) -> list[int]:
        tx: list[int] = self._ledger()[0]
        return tx

    def status(self) -> dict[str, object]:
        tx, used, pending, out, buffers = self._ledger()
        return {
            "state": self.state.value,
            "credits_tx": tx,
            "credits_in_use": [b - o for b, o in zip(buffers, out)],
            "credits_pending_return": pending,
            "queued_mps": self._queued_all,
            "inflight_mps": self.next_seq - self.base,
            "counters": self._counter_dict(),
        }
