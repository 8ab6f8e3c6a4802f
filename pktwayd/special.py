"""MessageWay's special packet types [M:L91-97] on a node: memory write and read (a
"memory board"), and the embedded packet (L3 to an intermediate node, L2 routing from
there).  Bodies (PC, the text gives no layout): WRITE = address (8 bytes, big-endian)
then the bytes to write; READ = address (8) and byte count (8), answered by a WRITE of
that address carrying the bytes; EMBEDDED = a whole PacketWay packet (its L2RHs, EEP
header ... TAIL).  A node's memory is a bounded bytearray; every refusal is counted."""

from __future__ import annotations

import struct
from collections import Counter

from daemons.wire.buffers import Bytes
from daemons.wire.errors import DecodeError

from .constants import MEMORY_READ_MAX, PT
from .eep import Packet, decode


def write_body(addr: int, data: Bytes) -> bytes:
    return struct.pack(">Q", addr) + bytes(data)


def read_body(addr: int, count: int) -> bytes:
    return struct.pack(">QQ", addr, count)


def parse_write(data: bytes) -> tuple[int, bytes]:
    if len(data) < 8:
        raise DecodeError("WRITE", len(data), "no 8-byte address")
    return struct.unpack_from(">Q", data)[0], bytes(data[8:])


def parse_read(data: bytes) -> tuple[int, int]:
    if len(data) != 16:
        raise DecodeError("READ", len(data), "not an 8-byte address and an 8-byte count")
    return struct.unpack(">QQ", data)


def embed(inner: Packet, dt: int, sa: int) -> Packet:
    """``inner`` (with its L2RHs) inside an EMBEDDED packet for the intermediate ``dt``."""
    return Packet(dt=dt, sa=sa, pt=PT.EMBEDDED, data=inner.encode())


def unwrap(pkt: Packet) -> Packet:
    """The packet an EMBEDDED packet carries; DecodeError if it is not one."""
    return decode(pkt.data)


class Memory:
    """A memory board's answers: ``handle(pkt)`` applies a WRITE, answers a READ with a
    WRITE back to its source (None: nothing to send)."""

    def __init__(self, size: int, me: int) -> None:
        self.mem = bytearray(size)
        self.me = me
        self.counters: Counter[str] = Counter()

    def handle(self, pkt: Packet) -> Packet | None:
        c = self.counters
        try:
            if pkt.pt == PT.MEMORY_WRITE:
                addr, data = parse_write(pkt.data)
                if addr + len(data) > len(self.mem):
                    c["write_out_of_range"] += 1
                    return None
                self.mem[addr : addr + len(data)] = data
                c["writes"] += 1
                return None
            addr, count = parse_read(pkt.data)
        except DecodeError as exc:
            c[f"malformed_{exc.field}"] += 1
            return None
        if count > MEMORY_READ_MAX or addr + count > len(self.mem):
            c["read_out_of_range"] += 1
            return None
        if not 1 <= pkt.sa < 0x7FFFFE:
            c["read_no_source"] += 1
            return None
        c["reads"] += 1
        return Packet(dt=pkt.sa, sa=self.me, pt=PT.MEMORY_WRITE, data=write_body(addr, self.mem[addr : addr + count]))
