"""The AVT (access validation and translation, spec §1.4-1.5): what this node lets
other nodes do to its memory.  Windows are runs of 4 KiB AVT pages (address =
``page << 12 | offset``, project choice) with a source list, R/W permission, the
fabrics allowed, an interrupt flag, and optionally a translation per source (each
source reaches memory of its own at the same addresses, as the AVT table kept for
each source device allows [SDM 2-14]); a write to an interrupt page also goes onto
the bounded interrupt queue (the doorbell).  Invalid access is answered with a NAK
and counted by reason."""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from .constants import AVT_ENTRIES, INTERRUPT_QUEUE, PAGE_BYTES, PAGE_SHIFT


@dataclass
class Window:
    name: str
    page: int  # first AVT index
    pages: int
    access: str  # "r", "w" or "rw"
    sources: frozenset[int] | None = None  # SIDs allowed; None: every configured peer
    paths: frozenset[int] = frozenset({0, 1})
    interrupt: bool = False
    per_source: bool = False  # each source sees its own memory at these addresses (AVT translation per source)
    memory: bytearray = field(default_factory=bytearray)
    by_source: dict[int, bytearray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (0 <= self.page and self.pages >= 1 and self.page + self.pages <= AVT_ENTRIES):
            raise ValueError(f"window {self.name!r}: pages {self.page}+{self.pages} are outside the AVT")
        if self.access not in ("r", "w", "rw"):
            raise ValueError(f"window {self.name!r}: access {self.access!r} is not r, w or rw")
        if not self.memory and not self.per_source:
            self.memory = bytearray(self.pages * PAGE_BYTES)

    def memory_of(self, sid: int) -> bytearray:
        """The memory a source's access reaches (its own, for a per-source window)."""
        if not self.per_source:
            return self.memory
        mem = self.by_source.get(sid)
        if mem is None:  # sources are configured peers only: bounded
            mem = self.by_source[sid] = bytearray(self.size)
        return mem

    @property
    def base(self) -> int:
        return self.page << PAGE_SHIFT

    @property
    def size(self) -> int:
        return self.pages * PAGE_BYTES


@dataclass(frozen=True)
class Interrupt:
    source: int
    address: int
    fabric: int
    data: bytes


class Avt:
    def __init__(self, windows: list[Window], peers: frozenset[int], queue_limit: int = INTERRUPT_QUEUE) -> None:
        self.windows = sorted(windows, key=lambda w: w.page)
        self.peers = peers
        self.by_page: dict[int, Window] = {}
        for w in self.windows:
            for p in range(w.page, w.page + w.pages):
                if p in self.by_page:
                    raise ValueError(f"window {w.name!r} overlaps {self.by_page[p].name!r} at page {p:#x}")
                self.by_page[p] = w
        self.queue: deque[Interrupt] = deque()
        self.queue_limit = queue_limit
        self.counters: Counter[str] = Counter()

    def find(self, address: int, length: int) -> tuple[Window, int] | None:
        """The window holding [address, address + length) and the offset in it."""
        w = self.by_page.get(address >> PAGE_SHIFT)
        if w is None:
            return None
        off = address - w.base
        return (w, off) if off + length <= w.size else None

    def check(self, sid: int, fabric: int, address: int, length: int, write: bool) -> tuple[Window, int] | str:
        """(window, offset) for a valid access, else the NAK reason."""
        if sid not in self.peers:
            return "source"
        w = self.by_page.get(address >> PAGE_SHIFT)
        if w is None:
            return "bad_address"
        if w.sources is not None and sid not in w.sources:
            return "source"
        if fabric not in w.paths:
            return "path"
        if ("w" if write else "r") not in w.access:
            return "permission"
        off = address - w.base
        if off + length > w.size:
            return "bounds"
        if write and w.interrupt and len(self.queue) >= self.queue_limit:
            return "interrupt_queue_full"
        return w, off

    def read(self, sid: int, fabric: int, address: int, length: int) -> bytes | None:
        """The data of a valid read, or None (a NAK, counted)."""
        r = self.check(sid, fabric, address, length, False)
        if isinstance(r, str):
            self.counters[f"nak_{r}"] += 1
            return None
        w, off = r
        self.counters["reads"] += 1
        return bytes(w.memory_of(sid)[off:off + length])

    def write(self, sid: int, fabric: int, address: int, data: bytes) -> Interrupt | bool:
        """False for an invalid write (a NAK, counted); the Interrupt queued by a write to an
        interrupt page; True for any other valid write."""
        r = self.check(sid, fabric, address, len(data), True)
        if isinstance(r, str):
            self.counters[f"nak_{r}"] += 1
            return False
        w, off = r
        w.memory_of(sid)[off:off + len(data)] = data
        self.counters["writes"] += 1
        if not w.interrupt:
            return True
        irq = Interrupt(sid, address, fabric, bytes(data))
        self.queue.append(irq)
        self.counters["interrupts"] += 1
        return irq

    def pop_interrupts(self, n: int) -> list[Interrupt]:
        return [self.queue.popleft() for _ in range(min(n, len(self.queue)))]
