"""The per-(peer, fabric) path state machine (spec §1.6, project choice):

    UP --timeout--> SUSPECT --any ACK--> UP
    SUSPECT --more than 40 consecutive timeouts, or a BARRIER NAKed/timed out--> HARD_DOWN
    HARD_DOWN --every 1 s, send a BARRIER--> PROBING --3 BARRIER ACKs in a row--> UP
    (a request from the peer on a HARD_DOWN path's fabric brings its next BARRIER forward)
    PROBING --BARRIER NAKed/timed out--> HARD_DOWN

A path going SUSPECT asks for a BARRIER at once, so a dead fabric is found hard down
without waiting for 40 data timeouts.  Sans-IO: times are passed in."""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable

from .constants import HARD_DOWN_TIMEOUTS, PROBE_ACKS_UP, PROBE_INTERVAL_S


class State(enum.Enum):
    UP = "UP"
    SUSPECT = "SUSPECT"
    HARD_DOWN = "HARD_DOWN"
    PROBING = "PROBING"


class Path:
    def __init__(self, peer: int, fabric: int, now: float = 0.0) -> None:
        self.peer, self.fabric = peer, fabric
        self.state = State.UP
        self.timeouts = 0  # consecutive
        self.probe_acks = 0
        self.on_due: Callable[[float], None] | None = None  # told of every new BARRIER time (the BTE's timer)
        self._due: float | None = None
        self.barrier_out = False
        self.since = now
        self.counters: Counter[str] = Counter()

    @property
    def barrier_due(self) -> float | None:
        """When to send the next BARRIER (None: none wanted)."""
        return self._due

    @barrier_due.setter
    def barrier_due(self, when: float | None) -> None:
        self._due = when
        if when is not None and self.on_due is not None:
            self.on_due(when)

    @property
    def usable(self) -> bool:
        return self.state in (State.UP, State.SUSPECT)

    def _to(self, state: State, now: float) -> None:
        if state is not self.state:
            self.counters[f"to_{state.value.lower()}"] += 1
            self.state, self.since = state, now

    def on_ack(self, now: float) -> None:
        """A data transaction on this path was answered (ACK or NAK: the packet got there)."""
        self.timeouts = 0
        if self.state is State.SUSPECT:
            self._to(State.UP, now)
            self.barrier_due = None

    def on_timeout(self, now: float) -> None:
        """A data transaction on this path timed out."""
        self.counters["timeouts"] += 1
        if self.state is State.UP:
            self.timeouts = 1
            self._to(State.SUSPECT, now)
            if not self.barrier_out:
                self.barrier_due = now
        elif self.state is State.SUSPECT:
            self.timeouts += 1
            if self.timeouts > HARD_DOWN_TIMEOUTS:
                self._hard_down(now)

    def _hard_down(self, now: float) -> None:
        self._to(State.HARD_DOWN, now)
        self.probe_acks = 0
        self.barrier_due = now + PROBE_INTERVAL_S

    def heard(self, now: float) -> None:
        """The peer's request arrived on this fabric ("fabric auto up" [SCM 8-18]): a
        HARD_DOWN path is probed now rather than at the next 1 s tick."""
        if self.state is State.HARD_DOWN and not self.barrier_out and (self.barrier_due or 0) > now:
            self.counters["probe_early"] += 1
            self.barrier_due = now

    def barrier_sent(self, now: float) -> None:
        self.barrier_out, self.barrier_due = True, None
        if self.state is State.HARD_DOWN:
            self._to(State.PROBING, now)

    def on_barrier(self, ok: bool, now: float) -> None:
        """The outstanding BARRIER was ACKed (ok) or NAKed/timed out."""
        self.barrier_out = False
        if not ok:
            self.counters["barrier_failed"] += 1
            self._hard_down(now)
            return
        self.counters["barrier_acked"] += 1
        if self.state is State.PROBING:
            self.probe_acks += 1
            if self.probe_acks >= PROBE_ACKS_UP:
                self.timeouts = 0
                self._to(State.UP, now)
            else:
                self.barrier_due = now
        elif self.state is State.SUSPECT:
            self.timeouts = 0
            self._to(State.UP, now)

    def status(self, now: float) -> dict[str, object]:
        return {"state": self.state.value, "for_s": round(now - self.since, 3), "timeouts": self.timeouts,
                "probe_acks": self.probe_acks, "counters": dict(self.counters)}
