"""The BTE (block transfer engine, spec §1.4, §1.7): what this node starts.

One 16-entry TID table per node; each transaction has a timer.  On a timeout the
request is sent again once on the same fabric, then on the other (the path state
machines of both hear about it).  Reads, writes, BARRIERs (path probes) and blocks:
a block of any length goes as <= 64-byte WRITEs (never across a 4 KiB page), up to
16 in flight, and its doorbell WRITE leaves only when every data WRITE is ACKed; a
NAK or a WRITE that times out on both fabrics aborts the block (no doorbell).
Sans-IO: every call takes ``now``; datagrams to send collect in ``out``."""

from __future__ import annotations

import struct
import zlib
from collections import Counter, deque
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import TypedDict, Unpack

from .codec import Packet, encode_datagram, max_data
from .constants import (DOORBELL_BYTES, PAGE_BYTES, PENDING_OPS, RESPONSE_TIMEOUT_S, RETRIES_SAME_FABRIC,
                        TID_COUNT, FABRIC_NAMES, Fabric, TType)
from .paths import Path, State

TX_KEYS = tuple(f"tx_{n}" for n in FABRIC_NAMES)
_DOORBELL = struct.Struct(">IIII")  # address, length, seq, crc32 (project choice, §1.8)


def doorbell(address: int, length: int, seq: int, crc: int) -> bytes:
    return _DOORBELL.pack(address, length, seq & 0xFFFFFFFF, crc)


def parse_doorbell(data: bytes) -> tuple[int, int, int, int] | None:
    return _DOORBELL.unpack(data) if len(data) == DOORBELL_BYTES else None


@dataclass(eq=False)
class Op:
    """One request of the host: a read, a write, a block, or a BARRIER on one fabric."""

    kind: str
    peer: int
    address: int
    data: bytes = b""
    length: int = 0
    fabric: int | None = None  # a BARRIER's fabric; for the others, the one preferred
    doorbell: int | None = None  # a block's doorbell address
    bell_data: bytes | None = None  # what the doorbell WRITE carries (default: address, length, seq, crc32)
    seq: int = 0
    on_done: Callable[[Op], None] | None = None
    done: bool = False
    error: str | None = None
    result: bytes | None = None
    started: float = 0.0
    finished: float = 0.0
    next_off: int = 0
    inflight: int = 0
    acked: int = 0
    rang: bool = False  # the doorbell was sent
    packets: Counter[str] = field(default_factory=Counter)  # by fabric name

    def finish(self, now: float, error: str | None = None, result: bytes | None = None) -> None:
        if self.done:
            return
        self.done, self.error, self.result, self.finished = True, error, result, now
        if self.on_done is not None:
            self.on_done(self)


class OpOptions(TypedDict, total=False):
    """The optional fields of an :class:`Op` that :meth:`Bte.read`, ``write`` and ``block`` pass on."""

    fabric: int | None
    bell_data: bytes | None
    on_done: Callable[[Op], None] | None


@dataclass(eq=False)
class Txn:
    tid: int
    op: Op
    ttype: int
    address: int
    data: bytes
    length: int
    fabric: int
    deadline: float
    tries_here: int = 1
    switched: bool = False
    is_doorbell: bool = False


class Bte:
    def __init__(self, my_id: int, peers: list[int], *, ii: bool = False, timeout: float = RESPONSE_TIMEOUT_S,
                 now: float = 0.0) -> None:
        self.id = my_id
        self.ii = ii
        self.chunk = max_data(ii)
        self.timeout = timeout
        self.slots: list[Txn | None] = [None] * TID_COUNT
        self.quarantine = [0.0] * TID_COUNT  # a TID whose request was re-sent rests a while before reuse
        self.ready: deque[Op] = deque()
        self.paths: dict[tuple[int, int], Path] = {(p, f): Path(p, f, now) for p in peers for f in (Fabric.X, Fabric.Y)}
        self.soonest = float("inf")  # the earliest deadline set since the driver last asked (timer_moved)
        for path in self.paths.values():
            path.on_due = self._moved
        self.toggle: dict[int, int] = {p: Fabric.X for p in peers}
        self.out: list[tuple[int, bytes]] = []
        self.counters: Counter[str] = Counter()
        self.seq = 0
        self.in_use = 0
        self.high_water = 0  # most TIDs ever in use at once (with lent_busy: a single op's in the engine)
        # a compiled engine that takes whole blocks and single reads and writes (servernet.fastnode):
        # offload(op, now) is True when it took one; the TIDs lent to it (a bit each) are not this
        # BTE's meanwhile
        self.offload: Callable[[Op, float], bool] | None = None
        self.lent = 0
        self.lent_busy = 0  # lent TIDs that a single READ or WRITE holds in the engine
        self.reclaim: Callable[[], None] | None = None  # asks it for a TID back (requests wait here)

    # --- the host's requests ------------------------------------------------------------------
    def submit(self, op: Op, now: float) -> Op:
        if (op.peer, Fabric.X) not in self.paths:
            op.finish(now, "unknown_peer")
            return op
        if not self._fits(op):
            self.counters["refused_length"] += 1
            op.finish(now, "length")
            return op
        if len(self.ready) >= PENDING_OPS and op.kind != "barrier":  # probes: at most one per path
            self.counters["refused_queue_full"] += 1
            op.finish(now, "queue_full")
            return op
        if op.kind == "block":
            self.seq += 1
            op.seq = self.seq
        op.started = now
        if op.kind == "barrier":
            self.ready.appendleft(op)
        else:
            self.ready.append(op)
        self.pump(now)
        return op

    def _fits(self, op: Op) -> bool:
        """What the packet format can carry: one packet for a read or write, a 32-bit
        range for a block, whole 8-byte units in ServerNet II mode."""
        if op.kind == "barrier":
            return True
        n = op.length if op.kind == "read" else len(op.data)
        if op.address + n > 1 << 32:
            return False
        if op.kind == "read" and not 1 <= n <= self.chunk:
            return False
        if op.kind == "write" and n > self.chunk:
            return False
        if op.kind == "block" and (not n or op.doorbell is None):
            return False
        return not (self.ii and (op.address % 8 or n % 8))

    def read(self, peer: int, address: int, length: int, now: float, **kw: Unpack[OpOptions]) -> Op:
        return self.submit(Op("read", peer, address, length=length, **kw), now)

    def write(self, peer: int, address: int, data: bytes, now: float, **kw: Unpack[OpOptions]) -> Op:
        return self.submit(Op("write", peer, address, bytes(data), **kw), now)

    def block(self, peer: int, address: int, data: bytes, bell: int, now: float, **kw: Unpack[OpOptions]) -> Op:
        return self.submit(Op("block", peer, address, bytes(data), len(data), doorbell=bell, **kw), now)

    # --- fabric choice --------------------------------------------------------------------------
    def reachable(self, peer: int) -> bool:
        """A transaction to this peer could go now (a path UP or SUSPECT on either fabric)."""
        return self.paths[peer, Fabric.X].usable or self.paths[peer, Fabric.Y].usable

    def choose(self, peer: int, prefer: int | None = None) -> int | None:
        """The preferred fabric if its path is UP; else UP paths first, alternating X/Y per
        transaction when both are; else a SUSPECT one."""
        if prefer is not None and self.paths[peer, prefer].state is State.UP:
            return prefer
        px, py = self.paths[peer, Fabric.X], self.paths[peer, Fabric.Y]
        if px.state is State.UP:
            if py.state is not State.UP:
                return Fabric.X
            f = self.toggle[peer]
            self.toggle[peer] = 1 - f
            return f
        if py.state is State.UP:
            return Fabric.Y
        return Fabric.X if px.usable else Fabric.Y if py.usable else None

    # --- issuing ---------------------------------------------------------------------------------
    def _next(self, op: Op) -> tuple[int, int, bytes, int, bool] | None:
        """(ttype, address, data, length, is_doorbell) of the op's next transaction, or None."""
        if op.kind == "read":
            return (TType.READ, op.address, b"", op.length, False) if not op.inflight else None
        if op.kind == "barrier":
            return (TType.BARRIER, 0, b"", 0, False) if not op.inflight else None
        if op.kind == "write":
            return (TType.WRITE, op.address, op.data, 0, False) if not op.inflight else None
        # a block: data WRITEs, then the doorbell once every one is ACKed
        if op.next_off < len(op.data):
            addr = op.address + op.next_off
            n = min(self.chunk, len(op.data) - op.next_off, PAGE_BYTES - (addr % PAGE_BYTES))
            data = op.data[op.next_off:op.next_off + n]
            op.next_off += n
            return TType.WRITE, addr, data, 0, False
        if op.inflight or op.rang or op.doorbell is None:  # (submit refused a block without one)
            return None
        op.rang = True
        return TType.WRITE, op.doorbell, self.bell_of(op), 0, True

    @staticmethod
    def bell_of(op: Op) -> bytes:
        """What a block's doorbell WRITE carries."""
        return op.bell_data if op.bell_data is not None else doorbell(op.address, len(op.data), op.seq,
                                                                      zlib.crc32(op.data))

    def _free_tid(self, now: float) -> int | None:
        for tid, slot in enumerate(self.slots):
            if slot is None and self.quarantine[tid] <= now and not self.lent >> tid & 1:
                return tid
        return None

    def free_tids(self, now: float) -> list[int]:
        return [t for t, slot in enumerate(self.slots)
                if slot is None and self.quarantine[t] <= now and not self.lent >> t & 1]

    def pump(self, now: float) -> None:
        while self.ready:
            tid = self._free_tid(now)
            if tid is None:
                if self.lent and self.reclaim is not None:
                    self.reclaim()  # a probe or a single write does not wait for a whole block
                return
            op = self.ready.popleft()
            if op.done:
                continue
            if (op.kind != "barrier" and not op.next_off and not op.inflight and self.offload is not None
                    and self.offload(op, now)):
                continue
            nxt = self._next(op)
            if nxt is None:
                continue
            fabric = op.fabric if op.kind == "barrier" else self.choose(op.peer, op.fabric)
            if fabric is None:
                self.counters["no_path"] += 1
                op.finish(now, "no_path")
                continue
            ttype, address, data, length, bell = nxt
            txn = Txn(tid, op, ttype, address, data, length, fabric, now + self.timeout, is_doorbell=bell)
            self.slots[tid] = txn
            self.in_use += 1
            self.high_water = max(self.high_water, self.in_use + self.lent_busy)
            op.inflight += 1
            self._send(txn)
            if op.kind == "block" and not op.rang:
                self.ready.append(op)  # more to issue: round robin with the other ops

    def _moved(self, when: float) -> None:
        if when < self.soonest:
            self.soonest = when

    def timer_moved(self, before: float) -> bool:
        """A deadline earlier than ``before`` was set since the last call (cheap: the
        driver asks after every batch instead of computing next_deadline)."""
        moved, self.soonest = self.soonest < before, float("inf")
        return moved

    def _send(self, txn: Txn) -> None:
        self.out.append((txn.fabric, encode_datagram(txn.op.peer, self.id, txn.ttype, False, txn.tid, txn.fabric, False,
                                              txn.address, txn.data, txn.length, self.ii)))
        txn.op.packets[FABRIC_NAMES[txn.fabric]] += 1
        if txn.deadline < self.soonest:
            self.soonest = txn.deadline
        self.counters[TX_KEYS[txn.fabric]] += 1

    def _release(self, txn: Txn, now: float) -> None:
        self.slots[txn.tid] = None
        self.in_use -= 1
        txn.op.inflight -= 1
        if txn.tries_here > 1 or txn.switched:
            self.quarantine[txn.tid] = now + self.timeout  # a late answer to the first try must find no one
            self._moved(now + self.timeout)

    # --- responses -----------------------------------------------------------------------------
    def on_response(self, pkt: Packet, fabric: int, now: float) -> None:
        txn = self.slots[pkt.tid]
        if txn is None or txn.op.peer != pkt.sid or txn.ttype != pkt.ttype or (
                pkt.ttype == TType.READ and pkt.ack and len(pkt.data) != txn.length):
            self.counters["drop_unexpected_response"] += 1
            return
        self._release(txn, now)
        op = txn.op
        path = self.paths[op.peer, fabric]
        if op.kind == "barrier":
            self.paths[op.peer, txn.fabric].on_barrier(pkt.ack, now)  # a BARRIER goes on its op's fabric
            op.finish(now, None if pkt.ack else "nak")
        else:
            path.on_ack(now)
            if not pkt.ack:
                self.counters["nak"] += 1
                op.finish(now, "nak")
            elif op.kind == "read":
                op.finish(now, result=pkt.data)
            elif op.kind == "write":
                op.finish(now)
            else:
                op.acked += 1
                if txn.is_doorbell:
                    op.finish(now)
                elif op.next_off >= len(op.data) and not op.inflight and not op.done:
                    self.ready.append(op)  # every data WRITE ACKed: the doorbell may go
        self.pump(now)

    # --- timers ----------------------------------------------------------------------------------
    def next_deadline(self) -> float:
        times = [t.deadline for t in self.slots if t is not None]
        times += [p.barrier_due for p in self.paths.values() if p.barrier_due is not None]
        if self.ready:
            times += [q for q in self.quarantine if q]
        return min(times, default=float("inf"))

    def tick(self, now: float) -> None:
        for tid, until in enumerate(self.quarantine):
            if until and until <= now:
                self.quarantine[tid] = 0.0  # rested: next_deadline must not name a time already past
        for txn in list(self.slots):
            if txn is not None and txn.deadline <= now:
                self._expire(txn, now)
        for path in self.paths.values():
            if path.barrier_due is not None and path.barrier_due <= now and not path.barrier_out:
                path.barrier_sent(now)
                self.counters["barriers"] += 1
                self.submit(Op("barrier", path.peer, 0, fabric=path.fabric), now)
        self.pump(now)

    def _expire(self, txn: Txn, now: float) -> None:
        op = txn.op
        self.counters[f"timeout_{FABRIC_NAMES[txn.fabric]}"] += 1
        if op.kind == "barrier":
            self._release(txn, now)
            self.paths[op.peer, txn.fabric].on_barrier(False, now)  # a BARRIER goes on its op's fabric
            op.finish(now, "timeout")
            return
        path = self.paths[op.peer, txn.fabric]
        path.on_timeout(now)
        if op.done:  # e.g. a block aborted by a NAK meanwhile
            self._release(txn, now)
            return
        if txn.tries_here <= RETRIES_SAME_FABRIC and path.usable:
            txn.tries_here += 1
            self.counters["retries"] += 1
        else:
            other = self.paths[op.peer, 1 - txn.fabric]
            if txn.switched or not other.usable:
                self._release(txn, now)
                op.finish(now, "timeout")
                return
            txn.fabric, txn.switched, txn.tries_here = other.fabric, True, 1
            self.counters["failovers"] += 1
        txn.deadline = now + self.timeout
        self._send(txn)
