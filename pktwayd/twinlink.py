"""The inter-SAN link between two half-routers in different processes: a GSN cable
(the project's UDP cable: shim, go-back-N, credits, keepalive), back-to-back, on
which every PacketWay packet is one Message with EtherType 0x88B6.  Packets up to
the VC1 limit travel on VC1, larger ones on VC3; the cable keeps them in order
per VC, loses none, and says when the twin has gone."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import trio

from daemons.constants import ULA_BROADCAST, ULP_MAX_PAYLOAD
from daemons.endpoint.core import Endpoint, LinkState, MessageIn, UlaChanged
from daemons.io.runner import LinkRunner, cable_window
from daemons.io.udp import UdpTransport
from daemons.wire.message import max_payload

from .constants import ETHERTYPE_PKTWAY, TWIN_HIGH_WATER_MPS

TWIN_ULA_PREFIX = bytes((0x02, 0x50, 0x57))  # "PW": locally administered, the twin link only


def twin_ula(addr: int) -> bytes:
    return TWIN_ULA_PREFIX + addr.to_bytes(3, "big")


class TwinLink:
    def __init__(self, local, peer, my_addr: int, twin_addr: int,
                 on_packet: Callable[[bytes, float], None], on_state: Callable[[bool], None],
                 mtu: int | None = None, on_mtu: Callable[[dict], None] | None = None,
                 key: bytes | None = None) -> None:
        now = trio.current_time()
        cable_id = (min(my_addr, twin_addr) << 8 ^ max(my_addr, twin_addr)) & 0xFFFFFFFF
        self.transport = UdpTransport(local, peer, mtu=mtu, on_mtu=on_mtu, key=key)
        self.ep = Endpoint(cable_id, now, ula=twin_ula(my_addr), max_payload=ULP_MAX_PAYLOAD,
                           window=cable_window(self.transport.max_mps))
        self.runner = LinkRunner(self.ep.link, self.transport, self._on_input, self._after,
                                 timer=self.ep.timer, handle_timer=self.ep.handle_timer)
        self.on_packet = on_packet
        self.on_state = on_state
        self.counters: Counter[str] = Counter()

    @property
    def up(self) -> bool:
        return self.ep.link.up and self.ep.ula is not None

    def send(self, raw: bytes) -> bool:
        vc = 1 if len(raw) <= max_payload(1) else 3
        if len(raw) > max_payload(vc):
            self.counters["tx_drop_too_big"] += 1
            return False
        if self.ep.link.queued(vc) > TWIN_HIGH_WATER_MPS:
            self.counters["tx_drop_backlog"] += 1  # a datagram service: shed load, do not queue for ever
            return False
        if not self.ep.send(vc, ULA_BROADCAST, ETHERTYPE_PKTWAY, raw):
            self.counters["tx_drop_link_down"] += 1
            return False
        self.counters["tx_packets"] += 1
        self.runner.flush(trio.current_time())
        return True

    def _on_input(self, now: float) -> None:
        self.ep.process(now)
        for ev in self.ep.events():
            if isinstance(ev, MessageIn):
                if ev.message.ethertype == ETHERTYPE_PKTWAY:
                    self.counters["rx_packets"] += 1
                    self.on_packet(bytes(ev.message.payload), now)
                else:
                    self.counters["rx_drop_ethertype"] += 1
            elif isinstance(ev, LinkState) and not ev.up:
                self.on_state(False)
            elif isinstance(ev, UlaChanged) and ev.ula is not None:  # back-to-back identification done
                self.on_state(True)

    def _after(self, now: float) -> None:
        self.runner.flush(now)

    def status(self) -> dict:
        return {"up": self.up, **self.counters, "cable": self.transport.status(),
                **{f"udp_{k}": v for k, v in self.transport.counters.items()}}

    async def _refresh_mtu(self) -> None:
        while True:
            await trio.sleep(1.0)
            self.transport.refresh_mtu()  # the kernel's path MTU, ICMP-learnt drops included

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._refresh_mtu)
            await self.runner.run()
