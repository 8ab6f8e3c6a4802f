"""A ServerNet end node's sans-IO core: the receive checks (spec §1.4 table: drop and
count, or NAK), the AVT answering other nodes' requests, the BTE running this node's
own, and doorbell checking for blocks.  ``receive`` and ``tick`` take ``now``;
datagrams to send collect in ``out`` as (fabric, datagram)."""

from __future__ import annotations

import zlib
from collections import Counter, deque
from collections.abc import Callable

from daemons.wire.buffers import Bytes
from daemons.wire.errors import DecodeError

from .avt import Avt, Interrupt
from .bte import Bte, parse_doorbell
from .codec import Packet, decode, encode_datagram, envelope, open_envelope
from .constants import (ENVELOPE_BYTES, FABRIC_NAMES, INTERRUPT_QUEUE, MAX_DATAGRAM, MAX_DATAGRAM_II,
                        RESPONSE_TIMEOUT_S, Fabric, TType)

RX_KEYS = tuple(f"rx_{n}" for n in FABRIC_NAMES)


class Endpoint:
    def __init__(self, my_id: int, peers: list[int], avt: Avt, *, ii: bool = False,
                 timeout: float = RESPONSE_TIMEOUT_S, now: float = 0.0,
                 on_interrupt: Callable[[Interrupt, float], bool] | None = None) -> None:
        self.id = my_id
        self.ii = ii
        self.peers = frozenset(peers)
        self.avt = avt
        self.bte = Bte(my_id, peers, ii=ii, timeout=timeout, now=now)
        self.out = self.bte.out  # one list: responses and requests in the order made
        self.counters: Counter[str] = Counter()
        self.blocks: deque[dict] = deque(maxlen=INTERRUPT_QUEUE)  # the last doorbells checked
        self.on_interrupt = on_interrupt  # True: it took the interrupt off the queue's tail
        self.on_tick: Callable[[float], None] | None = None  # host code's timers (PacketWay's credits)
        self.heads = tuple(envelope(b"", f, ii=ii) for f in (Fabric.X, Fabric.Y))  # right fabric, mode, no TPB
        self.max_datagram = MAX_DATAGRAM_II if ii else MAX_DATAGRAM

    def _drop(self, reason: str) -> None:
        self.counters[f"drop_{reason}"] += 1

    def receive(self, fabric: Fabric, datagram: bytes, now: float) -> None:
        packet: Bytes
        if datagram[:ENVELOPE_BYTES] == self.heads[fabric] and len(datagram) <= self.max_datagram:
            packet = memoryview(datagram)[ENVELOPE_BYTES:]  # the usual envelope: no need to open it
        else:
            try:
                env = open_envelope(datagram)
            except DecodeError as exc:
                self._drop("bad_envelope" if exc.field == "envelope" else exc.field)
                return
            if env.fabric != fabric:
                self._drop("wrong_fabric")
                return
            if env.tpb:
                self._drop("tpb")  # a router saw a bad CRC
                return
            if env.ii != self.ii:
                self._drop("mode")
                return
            packet = env.packet
        try:
            pkt = decode(packet, self.ii)
        except DecodeError as exc:
            self._drop(exc.field)  # crc, len, ttype, short, ack
            return
        if pkt.did != self.id:
            self._drop("bad_did")
            return
        if pkt.sid not in self.peers:
            self._drop("bad_sid")
            return
        if pkt.path != fabric:
            self._drop("path_bit")
            return
        self.counters[RX_KEYS[fabric]] += 1
        if pkt.rsp:
            self.bte.on_response(pkt, fabric, now)
        else:
            self.bte.paths[pkt.sid, fabric].heard(now)
            self._serve(pkt, fabric, now)

    def _respond(self, req: Packet, fabric: Fabric, ack: bool, data: bytes = b"") -> None:
        self.out.append((fabric, encode_datagram(req.sid, self.id, req.ttype, True, req.tid, fabric, ack, None, data, 0,
                                          self.ii)))
        self.counters["ack" if ack else "nak"] += 1

    def _serve(self, pkt: Packet, fabric: Fabric, now: float) -> None:
        address = pkt.address  # decode gives every read and write request its address
        if pkt.ttype == TType.READ and address is not None:
            data = self.avt.read(pkt.sid, fabric, address, pkt.length)
            self._respond(pkt, fabric, data is not None, data or b"")
        elif pkt.ttype == TType.WRITE and address is not None:
            r = self.avt.write(pkt.sid, fabric, address, pkt.data)
            self._respond(pkt, fabric, r is not False)
            if isinstance(r, Interrupt):
                self._interrupt(r, now)
        elif pkt.ttype == TType.BARRIER:
            self._respond(pkt, fabric, True)
        else:
            self.counters["diag_rx"] += 1  # DIAG/STATUS: no response

    def _interrupt(self, irq: Interrupt, now: float) -> None:
        """Host code (PacketWay's ring) may take the interrupt; otherwise a 16-byte doorbell
        names a block just written here: check it against memory."""
        if self.on_interrupt is not None and self.on_interrupt(irq, now):
            self.avt.queue.pop()
            return
        desc = parse_doorbell(irq.data)
        if desc is not None:
            address, length, seq, crc = desc
            where = self.avt.find(address, length)
            intact = where is not None and zlib.crc32(
                where[0].memory_of(irq.source)[where[1]:where[1] + length]) == crc
            block = {"source": irq.source, "address": address, "length": length, "seq": seq, "crc32": crc,
                     "intact": intact}
            self.blocks.append(block)
            self.counters["blocks_intact" if intact else "blocks_corrupt"] += 1

    def tick(self, now: float) -> None:
        self.bte.tick(now)
        if self.on_tick is not None:
            self.on_tick(now)

    def next_deadline(self) -> float:
        return self.bte.next_deadline()

    def timer_moved(self, before: float) -> bool:
        return self.bte.timer_moved(before)

    def paths_status(self, now: float) -> dict:
        return {f"{p:#07x}": {Fabric(f).name: self.bte.paths[p, f].status(now) for f in (Fabric.X, Fabric.Y)}
                for p in sorted(self.peers)}
