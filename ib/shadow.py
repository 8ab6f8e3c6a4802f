"""The shadow-ARP state machine (spec 2.8, the emulation's merged table), sans-IO.

Entries are keyed by the 20-byte hardware address; PathRecord queries go by GID (one
query serves every entry with that GID).  States: PENDING (query out, at most 3
frames queued), RESOLVED (path stored, frames go out at once), STALE (after an SM
reregister, or when the kernel probes the address: the next frame re-queries).  A
failed query deletes the GID's entries and drops their queues; an entry idle for 60 s
is reaped.
"""

from __future__ import annotations

import enum
from collections import Counter, deque
from dataclasses import dataclass, field

from .addr import HwAddr
from .constants import MAX_NEIGHS, NEIGH_IDLE_S, NEIGH_QUEUE_MAX
from .sa import PathRecord


class State(enum.Enum):
    PENDING = "pending"
    RESOLVED = "resolved"
    STALE = "stale"


@dataclass
class Neigh:
    hw: HwAddr
    state: State
    used: float
    queue: deque = field(default_factory=deque)
    path: PathRecord | None = None


Send = tuple[PathRecord, HwAddr, bytes]  # (path, destination, IPoIB payload)


class ShadowArp:
    def __init__(self, counters: Counter | None = None) -> None:
        self.neighs: dict[bytes, Neigh] = {}
        self.counters: Counter[str] = Counter() if counters is None else counters
        self._queries: list[bytes] = []  # GIDs to ask the SA about
        self._asking: set[bytes] = set()
        self.version = 0  # moves whenever an entry enters or leaves RESOLVED (ib.fastpath mirrors those)

    def _entry(self, key: bytes, now: float) -> Neigh | None:
        n = self.neighs.get(key)
        if n is None:
            hw = HwAddr.unpack(key)
            if len(self.neighs) >= MAX_NEIGHS:
                self.counters["drop_neigh_table_full"] += 1
                return None
            n = self.neighs[key] = Neigh(hw, State.PENDING, now)
            self._ask(hw.gid)
        return n

    def _ask(self, gid: bytes) -> None:
        if gid not in self._asking:
            self._asking.add(gid)
            self._queries.append(gid)

    def learn(self, hw: HwAddr, now: float) -> None:
        """An ARP reply or neighbour advertisement taught ``hw``: resolve it ahead of use."""
        self._entry(hw.pack(), now)

    def send(self, hw: bytes, payload: bytes, now: float) -> list[Send]:
        """Frames to send now for ``payload`` to the 20-byte address ``hw``."""
        n = self._entry(hw, now)
        if n is None:
            return []
        n.used = now
        if n.state is State.RESOLVED and n.path is not None:  # a RESOLVED entry holds its path
            return [(n.path, n.hw, payload)]
        if n.state is State.STALE:
            n.state = State.PENDING
            self.version += 1
            self._ask(n.hw.gid)
        if len(n.queue) >= NEIGH_QUEUE_MAX:
            self.counters["drop_neigh_queue_full"] += 1
            return []
        n.queue.append(payload)
        self.counters["neigh_queued"] += 1
        return []

    def take_queries(self) -> list[bytes]:
        q, self._queries = self._queries, []
        return q

    def resolved(self, gid: bytes, path: PathRecord, now: float) -> list[Send]:
        """The PathRecord for ``gid`` arrived: every entry with it is RESOLVED, queues flushed in order."""
        self._asking.discard(gid)
        self.version += 1
        out: list[Send] = []
        for n in self.neighs.values():
            if n.hw.gid == gid:
                n.path, n.state = path, State.RESOLVED
                while n.queue:
                    out.append((path, n.hw, n.queue.popleft()))
        self.counters["paths_resolved"] += 1
        return out

    def failed(self, gid: bytes) -> int:
        """The query for ``gid`` failed: delete its entries and drop their frames; returns how many."""
        self._asking.discard(gid)
        self.version += 1
        dropped = 0
        for key, n in list(self.neighs.items()):
            if n.hw.gid == gid:
                dropped += len(n.queue)
                del self.neighs[key]
        self.counters["drop_path_failed"] += dropped
        self.counters["paths_failed"] += 1
        return dropped

    def refresh(self, hw: bytes) -> None:
        """The kernel probes ``hw`` (a unicast ARP request or neighbour solicitation):
        the seed's rule keeps us in step with its neighbour cache by querying the path
        again with this frame."""
        n = self.neighs.get(hw)
        if n is not None and n.state is State.RESOLVED:
            n.state = State.STALE
            self.version += 1
            self.counters["neigh_refreshed"] += 1

    def invalidate(self) -> None:
        """SM reregister / LID change: every address handle is invalid; the next frame re-queries."""
        for n in self.neighs.values():
            if n.state is State.RESOLVED:
                n.state = State.STALE
        self.version += 1
        self.counters["paths_requery"] += 1

    def reap(self, now: float) -> None:
        for key, n in list(self.neighs.items()):
            if now - n.used >= NEIGH_IDLE_S and n.state is not State.PENDING:
                del self.neighs[key]
                self.version += 1
                self.counters["neigh_reaped"] += 1

    def next_reap(self) -> float:
        return min((n.used + NEIGH_IDLE_S for n in self.neighs.values()), default=float("inf"))

    def table(self) -> list[dict]:
        return [{"hwaddr": n.hw.text(), "qpn": n.hw.qpn, "lid": n.path.dlid if n.path else None,
                 "state": n.state.value, "queued": len(n.queue)} for n in self.neighs.values()]
