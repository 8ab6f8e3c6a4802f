"""Switch core (sans-IO): forwards UD packets between its cables, unicast by DLID
through the linear forwarding table and multicast by MLID through the multicast
table, both programmed by the SM; learns its neighbours from cable hellos and reports
them to the SM.  Time is injected; the driver moves the bytes."""

from __future__ import annotations

from collections import Counter
from typing import Literal, TypeAlias

from . import mgmt, nodeinfo, packet
from .constants import (LID_MCAST_MAX, LID_MCAST_MIN, LID_PERMISSIVE, LINK_DEAD_S, LINK_HELLO_S, SWITCH_REPORT_S)
from .mgmt import PEER_SWITCH, Kind

Out: TypeAlias = tuple[Literal["cable"], int, bytes] | tuple[Literal["sm"], bytes]
"""What :meth:`SwitchCore.outgoing` hands the driver: a datagram for a cable port or for the SM."""


class SwitchCore:
    def __init__(self, guid: int, ports: list[int], now: float = 0.0) -> None:
        self.guid = guid
        self.ports = sorted(ports)
        self.lft: dict[int, int] = {}
        self.mft: dict[int, int] = {}
        self.lft_version = self.mft_version = 0
        self.neighbours: dict[int, tuple[int, int, int, float]] = {}  # port -> (guid, peer port, kind, last seen)
        self.counters: Counter[str] = Counter()
        self.sm_epoch = 0
        self._out: list[Out] = []
        self._next_hello = now
        self._next_report = now
        self.timers_changed = True  # see daemons.runtime.corerunner

    # --- data plane ---------------------------------------------------------------
    def on_cable(self, port: int, data: bytes, now: float) -> list[tuple[int, bytes]]:
        """Where a datagram received on ``port`` goes: [(out port, bytes)]."""
        dlid = packet.peek_dlid(data)
        if dlid < 0:
            self.counters["drop_runt"] += 1
            return []
        if dlid == LID_PERMISSIVE:
            self._hello(port, data, now)
            return []
        if LID_MCAST_MIN <= dlid <= LID_MCAST_MAX:
            mask = self.mft.get(dlid)
            if mask is None:
                self.counters["drop_no_mft_entry"] += 1
                return []
            outs = [(p, data) for p in self.ports if mask >> p & 1 and p != port]
            self.counters["mcast_in"] += 1
            self.counters["mcast_copies"] += len(outs)
            return outs
        out = self.lft.get(dlid)
        if out is None:
            self.counters["drop_unrouted_lid"] += 1
            return []
        if out == port:
            self.counters["drop_hairpin"] += 1
            return []
        self.counters["ucast_forwarded"] += 1
        return [(out, data)]

    def _hello(self, port: int, data: bytes, now: float) -> None:
        try:
            kind, guid, peer_port = nodeinfo.parse_hello(packet.decode(data))
        except ValueError:
            self.counters["drop_bad_hello"] += 1
            return
        self.counters["hello_in"] += 1
        old = self.neighbours.get(port)
        if old is None or old[:3] != (guid, peer_port, kind):
            self._next_report = now  # a new neighbour: tell the SM at once
            self.timers_changed = True
        self.neighbours[port] = (guid, peer_port, kind, now)

    # --- management ------------------------------------------------------------------
    def on_sm(self, data: bytes) -> None:
        try:
            m = mgmt.decode(data)
            if m.kind == Kind.SET_LFT:
                self.lft_version, table = mgmt.decode_lft(m.body)
                self.lft = {lid: p for lid, p in table.items() if p in self.ports}
            elif m.kind == Kind.SET_MFT:
                self.mft_version, table = mgmt.decode_mft(m.body)
                self.mft = dict(table)
            else:
                self.counters["drop_sm_unexpected_kind"] += 1
                return
        except mgmt.MgmtError as exc:
            self.counters[f"drop_sm_{exc.reason}"] += 1
            return
        self.sm_epoch = m.epoch
        self.counters["sm_tables_in"] += 1

    def report(self) -> bytes:
        ports = tuple((p, g, pp, k) for p, (g, pp, k, _) in sorted(self.neighbours.items()))
        body = mgmt.SwitchReport(self.guid, self.lft_version, self.mft_version, ports).encode()
        return mgmt.Mgmt(Kind.SWITCH_REPORT, epoch=self.sm_epoch, body=body).encode()

    # --- timers ------------------------------------------------------------------------
    def timer(self) -> float:
        return min(self._next_hello, self._next_report)

    def handle_timer(self, now: float) -> None:
        if now >= self._next_hello:
            self._next_hello = now + LINK_HELLO_S
            for p in self.ports:
                self._out.append(("cable", p, nodeinfo.hello(PEER_SWITCH, self.guid, p)))
            for p, (_, _, _, seen) in list(self.neighbours.items()):
                if now - seen > LINK_DEAD_S:
                    del self.neighbours[p]
                    self.counters["neighbour_lost"] += 1
        if now >= self._next_report:
            self._next_report = now + SWITCH_REPORT_S
            self._out.append(("sm", self.report()))

    def outgoing(self) -> list[Out]:
        out, self._out = self._out, []
        return out

    def events(self) -> list[object]:
        return []  # none: everything it says goes out as datagrams

    def status(self) -> dict[str, object]:
        return {"guid": f"{self.guid:#018x}", "ports": self.ports,
                "neighbours": {str(p): {"guid": f"{g:#018x}", "port": pp, "kind": "switch" if k == PEER_SWITCH else "ca"}
                               for p, (g, pp, k, _) in sorted(self.neighbours.items())},
                "lft_version": self.lft_version, "mft_version": self.mft_version,
                "lft": {str(lid): p for lid, p in sorted(self.lft.items())},
                "mft": {f"{lid:#06x}": [p for p in self.ports if m >> p & 1] for lid, m in sorted(self.mft.items())},
                "counters": dict(self.counters)}
