"""An end node whose per-packet work is compiled (servernet/_snetnode.c) beside its
Python core (:class:`~servernet.endpoint.Endpoint`), which stays the oracle and does
everything else.

The engine answers the peers' WRITEs, READs and BARRIERs to plain and per-source windows
(into each source's own memory, shared with the Python AVT), and runs
whole blocks: the BTE offloads a block with every TID it has free; the engine sends
its data WRITEs on UP paths and gives TIDs back when no block needs them.  A single
WRITE or READ goes the same way (a block of one packet, on one lent TID) while no block
holds TIDs here, so its time is request to ACK in the engine, not to the trio pass
that hears of it.  What the engine keeps for Python comes back from ``take`` as
events, in order: a block done (every data WRITE ACKed: the BTE sends the doorbell; a
single WRITE or READ ends, at the ACK's time), a block handed back (a NAK, a
timeout, or no UP path: its WRITEs in flight become the BTE's, which retries and fails
over as before), an ACK on a path that is not UP, TIDs returned, and datagrams the
engine does not handle (odd or bad packets, interrupt windows, DIAG,
requests on a HARD_DOWN path, responses to the BTE's own TIDs).

``clock`` is the engine's clock when it differs from the core's (the driver's
CLOCK_MONOTONIC against trio's); None: the same (sans-IO use and tests)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from ._snetnode import Engine
from .bte import Op, Txn
from .constants import FABRIC_NAMES, Fabric, TType
from .endpoint import Endpoint
from .paths import State

STATE_CODES = {State.UP: 0, State.SUSPECT: 1, State.HARD_DOWN: 2, State.PROBING: 3}


class FastNode:
    def __init__(self, core: Endpoint, clock: Callable[[], float] | None = None) -> None:
        self.core = core
        self.clock = clock
        peers = sorted(core.peers)  # the engine's peer order: a per-source window's memories follow it
        self.engine = Engine(core.id, peers, core.ii, core.bte.timeout)
        self.engine.set_windows([
            (w.page, w.pages, ("r" in w.access) | ("w" in w.access) << 1, sum(1 << f for f in w.paths),
             w.interrupt, None if w.sources is None else sorted(w.sources),
             None if w.interrupt else [w.memory_of(p) for p in peers] if w.per_source else w.memory)
            for w in core.avt.windows])
        self.blocks: dict[int, Op] = {}
        self.bells: dict[int, bytes] = {}  # the doorbell bytes of each block here
        self.keys = 0
        self.pushed: dict[tuple[int, int], State] = {}
        self.sync_paths()
        core.bte.offload = self._offload
        core.bte.reclaim = self.engine.want

    def engine_now(self, now: float) -> float:
        return now if self.clock is None else self.clock()

    def sync_paths(self) -> None:
        """Tell the engine of every path state that changed since last time."""
        for (peer, fabric), path in self.core.bte.paths.items():
            if self.pushed.get((peer, fabric)) is not path.state:
                self.pushed[peer, fabric] = path.state
                self.engine.set_path(peer, fabric, STATE_CODES[path.state])

    def _offload(self, op: Op, now: float) -> bool:
        bte = self.core.bte
        single = op.kind != "block"
        if single and (bte.lent or bte.out or op.kind not in ("read", "write") or not (op.length or op.data)):
            return False  # one at a time, while no block holds TIDs here and nothing waits to leave before it
        paths = (bte.paths[op.peer, Fabric.X], bte.paths[op.peer, Fabric.Y])
        if not any(p.state is State.UP for p in paths) or (self.core.ii and (op.address % 8 or len(op.data) % 8)):
            return False
        self.sync_paths()
        self.keys += 1
        t = self.engine_now(now)
        prefer = -1 if op.fabric is None else op.fabric
        bell = None
        if op.kind == "read":
            started = self.engine.start_read(self.keys, op.peer, op.address, op.length, prefer, bte.toggle[op.peer], t)
        elif op.kind == "write":
            started = self.engine.start_block(self.keys, op.peer, op.address, op.data, prefer, bte.toggle[op.peer], t)
        else:
            bell = bte.bell_of(op)
            started = self.engine.start_block(self.keys, op.peer, op.address, op.data, prefer, bte.toggle[op.peer], t,
                                              op.doorbell, bell)
        if not started:
            return False
        self.blocks[self.keys] = op
        if bell is not None:
            self.bells[self.keys] = bell
        if single:
            bte.choose(op.peer, op.fabric)  # the X/Y turn the engine just took, taken here too
        tids = bte.free_tids(now)[:1] if single else bte.free_tids(now)
        for tid in tids:
            bte.lent |= 1 << tid
        if single:
            bte.lent_busy += 1
            bte.high_water = max(bte.high_water, bte.in_use + bte.lent_busy)
        self.engine.lend(tids, t)
        return True

    def poll(self, now: float) -> None:
        """Take the engine's events and apply them to the core (then its timers and pump)."""
        events = self.engine.take(self.engine_now(now))
        if events:
            self.apply(events, now)

    def apply(self, events: list, now: float) -> None:
        core, bte = self.core, self.core.bte
        offset = 0.0 if self.clock is None else now - self.clock()
        handed_back = False
        for ev in events:
            kind = ev[0]
            if kind == "rx":
                core.receive(ev[1], ev[2], now)
            elif kind == "tids":
                for tid in ev[1]:
                    bte.lent &= ~(1 << tid)
            elif kind == "ack":
                bte.paths[ev[1], ev[2]].on_ack(now)
            elif kind == "done":
                _, key, px, py, toggle, when, result = ev
                op = self.blocks.pop(key)
                self.bells.pop(key, None)
                bte.lent_busy -= op.kind != "block"
                self._count(op, px, py, toggle)
                op.next_off = len(op.data)
                op.acked += px + py
                op.rang = op.kind == "block"
                op.finish(when + offset, result=result)  # at its last ACK (a block's: the doorbell's), not this pass
            else:  # "back"
                _, key, nak, next_off, acked, px, py, toggle, txns = ev
                op = self.blocks.pop(key)
                bell = self.bells.pop(key, None)
                bte.lent_busy -= op.kind != "block"
                self._count(op, px, py, toggle)
                op.next_off, op.acked = next_off, op.acked + acked
                for tid, fabric, address, off, n, deadline, is_bell in txns:
                    bte.lent &= ~(1 << tid)
                    if op.kind == "read":
                        txn = Txn(tid, op, TType.READ, address, b"", n, fabric, deadline + offset)
                    else:
                        data = bell if is_bell and bell is not None else op.data[off:off + n]
                        txn = Txn(tid, op, TType.WRITE, address, data, 0, fabric, deadline + offset,
                                  is_doorbell=bool(is_bell))
                        op.rang |= bool(is_bell)
                    bte.slots[tid] = txn
                    bte.in_use += 1
                    op.inflight += 1
                    bte._moved(deadline + offset)
                bte.high_water = max(bte.high_water, bte.in_use)
                if nak:
                    op.finish(now, "nak")
                elif op.next_off < len(op.data) or not op.inflight:
                    bte.ready.append(op)
                handed_back = True
        if handed_back:
            core.tick(now)  # the WRITE that timed out is the BTE's to retry now
        else:
            bte.pump(now)
        self.sync_paths()

    def _count(self, op: Op, px: int, py: int, toggle: int) -> None:
        for name, n in zip(FABRIC_NAMES, (px, py)):
            if n:
                op.packets[name] += n
        if op.kind == "block":  # a single op's one turn was taken when it started (the BTE has sent since)
            self.core.bte.toggle[op.peer] = toggle

    def counters(self) -> dict[str, Counter[str]]:
        """The core's counters with the engine's added, by group: node, avt, bte."""
        c = self.engine.counters()
        return {"node": self.core.counters + Counter(c["node"]), "avt": self.core.avt.counters + Counter(c["avt"]),
                "bte": self.core.bte.counters + Counter(c["bte"])}
