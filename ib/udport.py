"""A plain UD port on the fabric for PacketWay (spec 2.12, native mode): it registers
with the SM, says hello on its cable, and sends and receives UD packets whose IPoIB
Type is 0x88B5, addressed by a 5-byte L2RH = DLID u16 + QPN u24 (project choice; the
P_Key is the port's partition, as for an IPoIB interface).

:class:`UdPortCore` is sans-IO; :class:`AsyncIbPort` drives it on trio for a
pktwayd half (the ``send_nowait``/``run`` of pktwayd.udpsan.AsyncSanPort);
:class:`BlockingIbPort` is a node's port (what pktwayd.node.Node uses of UlpClient).
"""

from __future__ import annotations

import select
import time
from collections import Counter, deque

import trio

from daemons.wire.ulp import Frame, Op

from . import mgmt, nodeinfo, packet
from .constants import (CLIENT_KEEPALIVE_S, ETHERTYPE_PACKETWAY_NATIVE, IPOIB_HEADER_BYTES, L2RH_IB_BYTES,
                        LID_MCAST_MIN, LID_PERMISSIVE, LID_UNICAST_MIN, LINK_HELLO_S, PKEY_PARTITION_MASK,
                        QKEY_PACKETWAY, QPN_PACKETWAY, REGISTER_WAIT_S, SA_TIMEOUT_S)
from .mgmt import PEER_CA, Kind, Status
from .partitions import may_talk
from .udp import Udp

HEADER = ETHERTYPE_PACKETWAY_NATIVE.to_bytes(2, "big") + b"\0\0"


def route(lid: int, qpn: int) -> bytes:
    """The L2RH bytes naming (DLID, QPN)."""
    if not LID_UNICAST_MIN <= lid < LID_MCAST_MIN or not 0 <= qpn <= 0xFFFFFF:
        raise ValueError(f"LID {lid} / QPN {qpn} is not a unicast destination")
    return lid.to_bytes(2, "big") + qpn.to_bytes(3, "big")


def parse_route(r: bytes) -> tuple[int, int]:
    if len(r) != L2RH_IB_BYTES:
        raise ValueError(f"an InfiniBand-style L2RH is {L2RH_IB_BYTES} bytes, not {len(r)}")
    return int.from_bytes(r[:2], "big"), int.from_bytes(r[2:], "big")


class UdPortCore:
    def __init__(self, guid: int, pkey: int = 0xFFFF, qpn: int = QPN_PACKETWAY, qkey: int = QKEY_PACKETWAY) -> None:
        self.guid, self.want_pkey, self.qpn, self.qkey = guid, pkey, qpn, qkey
        self.info: mgmt.PortInfo | None = None
        self.epoch = 0
        self.pkey = 0
        self.counters: Counter[str] = Counter()
        self._out: list[tuple[str, bytes]] = []
        self._next_register = 0.0
        self._next_hello = 0.0

    def _registered(self) -> mgmt.PortInfo | None:
        """The SM's answer once it gave this port a LID and the wanted P_Key, else None."""
        return self.info if self.info and self.pkey else None

    @property
    def own_route(self) -> bytes | None:
        info = self._registered()
        return None if info is None else route(info.lid, self.qpn)

    def on_sm(self, data: bytes) -> None:
        try:
            m = mgmt.decode(data)
            if m.kind != Kind.REGISTER_REPLY or m.status != Status.OK:
                self.counters["drop_sm_unexpected"] += 1
                return
            info = mgmt.PortInfo.decode(m.body)
        except mgmt.MgmtError:
            self.counters["drop_sm_malformed"] += 1
            return
        self.info, self.epoch = info, m.epoch
        self.pkey = next((p for p in info.pkeys if p & PKEY_PARTITION_MASK == self.want_pkey & PKEY_PARTITION_MASK), 0)
        if not self.pkey:
            self.counters["pkey_absent"] += 1

    def send(self, l2rh: bytes, payload: bytes) -> None:
        info = self._registered()
        if info is None:
            self.counters["tx_drop_unregistered"] += 1
            return
        try:
            dlid, dqpn = parse_route(bytes(l2rh))
            data = packet.encode(packet.UdPacket(slid=info.lid, dlid=dlid, pkey=self.pkey, dqpn=dqpn,
                                                 sqpn=self.qpn, qkey=self.qkey, payload=HEADER + bytes(payload)))
        except (ValueError, packet.PacketError):
            self.counters["tx_drop_bad_route_or_size"] += 1
            return
        self._out.append(("cable", data))

    def on_cable(self, data: bytes) -> tuple[bytes, bytes] | None:
        """(route back, PacketWay packet) of a datagram for this port, or None (counted)."""
        try:
            p = packet.decode(data)
        except packet.PacketError as exc:
            self.counters[f"rx_drop_{exc.reason}"] += 1
            return None
        c = self.counters
        if p.dlid == LID_PERMISSIVE:
            return None  # the switch's hello
        info = self._registered()
        if info is None or p.dlid != info.lid or p.dqpn != self.qpn:
            c["rx_drop_not_mine"] += 1
        elif not may_talk(p.pkey, self.pkey):
            c["rx_drop_pkey_mismatch"] += 1
        elif p.qkey != self.qkey:
            c["rx_drop_qkey_mismatch"] += 1
        elif p.payload[:IPOIB_HEADER_BYTES] != HEADER:
            c["rx_drop_not_packetway"] += 1
        elif not LID_UNICAST_MIN <= p.slid < LID_MCAST_MIN:
            c["rx_drop_bad_slid"] += 1
        else:
            c["rx_packets"] += 1
            return route(p.slid, p.sqpn), p.payload[IPOIB_HEADER_BYTES:]
        return None

    def timer(self) -> float:
        return min(self._next_register, self._next_hello)

    def handle_timer(self, now: float) -> None:
        if now >= self._next_register:
            self._next_register = now + (CLIENT_KEEPALIVE_S if self.info else SA_TIMEOUT_S)
            body = mgmt.register_body(self.guid, self.guid)
            self._out.append(("sm", mgmt.Mgmt(Kind.REGISTER, 0, self.epoch, body=body).encode()))
        if now >= self._next_hello:
            self._next_hello = now + LINK_HELLO_S
            self._out.append(("cable", nodeinfo.hello(PEER_CA, self.guid, 1)))

    def outgoing(self) -> list[tuple[str, bytes]]:
        out, self._out = self._out, []
        return out


class _Sockets:
    def __init__(self, guid: int, local: tuple, peer: tuple, sm: tuple, pkey: int) -> None:
        self.core = UdPortCore(guid, pkey)
        self.cable = Udp(local, peer)
        self.mgmt = Udp((local[0], 0), sm)

    @property
    def counters(self) -> Counter:
        return self.core.counters + self.cable.counters + self.mgmt.counters

    def flush(self) -> None:
        for where, data in self.core.outgoing():
            (self.cable if where == "cable" else self.mgmt).send(data)

    def close(self) -> None:
        self.cable.close()
        self.mgmt.close()


class AsyncIbPort(_Sockets):
    """A pktwayd half's port: ``run(on_frame, on_status)`` on trio."""

    def send_nowait(self, l2rh: bytes, payload: bytes, *, vc: int = 1, ethertype: int = 0) -> None:
        self.core.send(l2rh, payload)
        self.flush()

    async def run(self, on_frame, on_status) -> None:
        async with trio.open_nursery() as n:
            n.start_soon(self._timers, on_status)
            n.start_soon(self._sm, on_status)
            while True:
                await self.cable.wait_readable()
                for data, _ in self.cable.drain():
                    got = self.core.on_cable(data)
                    if got is not None:
                        on_frame(Frame(Op.RECV, 1, ETHERTYPE_PACKETWAY_NATIVE, got[0], got[1]), trio.current_time())

    async def _sm(self, on_status) -> None:
        while True:
            await self.mgmt.wait_readable()
            before = self.core.own_route
            for data, _ in self.mgmt.drain():
                self.core.on_sm(data)
            if self.core.own_route != before:
                on_status(self.core.own_route)

    async def _timers(self, on_status) -> None:
        while True:
            await trio.sleep_until(self.core.timer())
            self.core.handle_timer(trio.current_time())
            self.flush()


class BlockingIbPort(_Sockets):
    """A PacketWay node's port (blocking): registers with the SM in ``bind``."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self._pending: deque[tuple[bytes, bytes]] = deque()
        self._ethertype = ETHERTYPE_PACKETWAY_NATIVE  # what frames say to the caller (the one it bound)

    def bind(self, ethertype: int) -> Frame:
        self._ethertype = ethertype
        deadline = time.monotonic() + REGISTER_WAIT_S
        while self.core.own_route is None:
            if time.monotonic() > deadline:
                raise TimeoutError("no answer from the subnet manager (or the port is not in the partition)")
            self._pump(0.1)
        return Frame(Op.STATUS, 1, ethertype, self.core.own_route)

    def _pump(self, timeout: float) -> list[tuple[bytes, bytes]]:
        now = time.monotonic()
        if now >= self.core.timer():
            self.core.handle_timer(now)
            self.flush()
        got = []
        for sock, on in ((self.mgmt, None), (self.cable, True)):
            for data, _ in sock.drain():
                if on is None:
                    self.core.on_sm(data)
                else:
                    r = self.core.on_cable(data)
                    if r is not None:
                        got.append(r)
        if not got:
            select.select([self.cable.sock, self.mgmt.sock], [], [], max(0.0, min(timeout, self.core.timer() - now)))
        return got

    def send(self, l2rh: bytes, payload: bytes, *, vc: int = 1, ethertype: int = 0) -> None:
        self.core.send(l2rh, payload)
        self.flush()

    def recv(self, timeout: float | None = None) -> Frame:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._pending:
            left = 1.0 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no packet")
            self._pending.extend(self._pump(min(left, 0.2)))
        back, pkt = self._pending.popleft()
        return Frame(Op.RECV, 1, self._ethertype, back, pkt)
