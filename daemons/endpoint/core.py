"""Sans-IO GSN endpoint: one port, its link, its ULA, Admin and Message delivery.

Fed by the driver with datagrams and time; produces datagrams (through its
:class:`~daemons.link.link.Link`) and events for the upper layers (ULP socket,
TAP bridge).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from .. import constants as C
from ..constants import ADMIN_RETRY_S, AdminCmd, AdminStatus, ElementType, MpType
from ..link.clink import CLink, UlpClosed, UlpFrameIn
from ..link.link import LinkDown, LinkUp, Received, Timers
from ..link.reassembly import AdminIn, Delivered, Reassembler
from ..wire.admin import Admin, i_am_args, parse_i_am
from ..wire.buffers import Bytes
from ..wire.errors import DecodeError
from ..wire.message import Message, max_payload, single_records



@dataclass(frozen=True)
class UlaChanged:
    ula: bytes | None


@dataclass(frozen=True)
class MessageIn:
    message: Message


@dataclass(frozen=True)
class AdminResponse:
    admin: Admin


@dataclass(frozen=True)
class LinkState:
    up: bool
    reason: str = ""


Event: TypeAlias = LinkState | UlaChanged | MessageIn | AdminResponse | UlpFrameIn | UlpClosed
"""What :meth:`Endpoint.events` hands up."""


def merged(counters: Mapping[str, int], more: Mapping[str, int] | None) -> dict[str, int]:
    """Python-path counters plus the data plane's of the same names."""
    out = Counter(counters)
    out.update(more or {})
    return dict(out)


class Endpoint:
    def __init__(
        self,
        cable_id: int,
        now: float,
        *,
        ula: bytes | None = None,
        buffers: tuple[int, ...] = C.VC_BUFFER_MPS,
        timers: Timers = Timers(),
        rng: random.Random | None = None,
        max_payload: int | None = None,
        aliases: tuple[bytes, ...] = (),
        window: int = C.SEQ_WINDOW_MPS,
    ) -> None:
        self.rng = rng or random.Random()
        self.link = CLink(cable_id, now, buffers=buffers, timers=timers, rng=self.rng, window=window)
        self.reasm = Reassembler(max_payload)
        self.configured_ula = ula
        # Further ULAs this port answers to (a port may have several, spec §5); the
        # well-known HARP server address reaches only the port the switch maps it to.
        self.aliases = frozenset(aliases) | {C.ULA_BROADCAST, C.ULA_HARP_SERVER}
        self.ula: bytes | None = None
        self.neighbour: str = "unknown"  # "switch" | "endpoint" once I_AM arrives
        self.counters: Counter[str] = Counter()
        # Messages and payload bytes per VC, each way (gsnctl show, metrics)
        self.per_vc: dict[str, list[int]] = {k: [0] * C.NUM_VCS for k in ("tx_messages", "tx_bytes", "rx_messages", "rx_bytes")}
        self._events: list[Event] = []
        self._acquiring: Admin | None = None
        self._acquire_due: float | None = None
        # Credits withheld per VC while the upper layer cannot take Messages (hold()).
        self.holding = [False] * C.NUM_VCS
        self.withheld = [0] * C.NUM_VCS

    # --- events -----------------------------------------------------------------
    def events(self) -> list[Event]:
        ev, self._events = self._events, []
        return ev

    def _set_ula(self, ula: bytes | None) -> None:
        if ula != self.ula:
            self.ula = ula
            self._events.append(UlaChanged(ula))

    def process(self, now: float) -> None:
        """Consume the link's events (call after ``receive`` or timers)."""
        for ev in self.link.events():
            if isinstance(ev, Received):
                for out in self.reasm.feed(ev.vc, ev.recs):
                    if isinstance(out, Delivered):
                        self._deliver(out.message)
                    else:
                        self._admin_in(out, now)
                if self.holding[ev.vc]:
                    self.withheld[ev.vc] += len(ev.recs)
                else:
                    self.link.release(ev.vc, len(ev.recs))
            elif isinstance(ev, Delivered):  # reassembled by the data plane (its credits are its own)
                self._deliver(ev.message)
            elif isinstance(ev, AdminIn):
                self._admin_in(ev, now)
            elif isinstance(ev, (UlpFrameIn, UlpClosed)):  # the data plane read a ULP client: gsnd's
                self._events.append(ev)
            elif isinstance(ev, LinkUp):
                self.reasm.reset()
                self.withheld = [0] * C.NUM_VCS  # the link reset took the buffers back
                self._events.append(LinkState(True))
                self._start_discovery(now)
            elif isinstance(ev, LinkDown):
                self.reasm.reset()
                self.withheld = [0] * C.NUM_VCS
                self.neighbour = "unknown"
                self._acquiring = None
                self._events.append(LinkState(False, ev.reason))

    def hold(self, vc: int, on: bool) -> None:
        """While on, micropackets received on ``vc`` keep their receive buffer (no
        credit goes back to the peer); off returns everything withheld.  Turning it
        on also takes back the credits released but not yet sent, so called right
        after ``process`` it covers the micropackets process just delivered."""
        if on and not self.holding[vc]:
            self.withheld[vc] += self.link.reclaim(vc, self.link.ledger.pending[vc])
        self.holding[vc] = on
        if self.link.dp_vc >= 0:  # the data plane withholds what it reassembles while held
            self.withheld[vc] += self.link.dp_hold(vc, on)
        if not on and self.withheld[vc]:
            self.link.release(vc, self.withheld[vc])
            self.counters[f"credits_withheld_vc{vc}_mps"] += self.withheld[vc]
            self.withheld[vc] = 0

    # --- sending ----------------------------------------------------------------
    def send(self, vc: int, d_ula: bytes, ethertype: int, payload: Bytes) -> bool:
        """Queue a Message; False (and counted) when it cannot be sent now."""
        if not self.link.up:
            self.counters["tx_drop_link_down"] += 1
            return False
        if self.ula is None:
            self.counters["tx_drop_no_ula"] += 1
            return False
        if len(payload) > max_payload(vc):
            self.counters[f"tx_drop_vc{vc}_limit"] += 1
            return False
        self.link.enqueue_message(vc, d_ula, self.ula, ethertype, payload)  # encoded in C (CLink)
        self.counters["tx_messages"] += 1
        self.per_vc["tx_messages"][vc] += 1
        self.per_vc["tx_bytes"][vc] += len(payload)
        return True

    def _deliver(self, msg: Message) -> None:
        if msg.d_ula != self.ula and msg.d_ula not in self.aliases:
            self.counters["rx_drop_not_for_us"] += 1
            return
        self.counters["rx_messages"] += 1
        self.per_vc["rx_messages"][msg.vc] += 1
        self.per_vc["rx_bytes"][msg.vc] += len(msg.payload)
        self._events.append(MessageIn(msg))

    # --- Admin --------------------------------------------------------------------
    def send_admin(self, admin: Admin, vc: int) -> None:
        self.link.enqueue(vc, single_records(vc, MpType.ADMIN, admin.encode()))
        self.counters["tx_admin"] += 1

    def admin_request(self, command: int, args: bytes = b"", *, hops: int = 1,
                      route: Sequence[int] = ()) -> Admin:
        """Originate a request (``hops`` >= 1: 1 = the element across the link; ``route``:
        the output port at each multi-port switch); the response arrives as an
        AdminResponse event."""
        if not 1 <= hops <= 255:
            raise ValueError(f"hop count {hops} outside 1..255 (hop 0 is answered by answer_local)")
        if len(route) > C.ADMIN_ROUTE_SLOTS or any(not 0 <= p < C.ADMIN_ROUTE_UNUSED for p in route):
            raise ValueError(f"route: at most {C.ADMIN_ROUTE_SLOTS} ports, each 0..{C.ADMIN_ROUTE_UNUSED - 1}")
        slots = tuple(route) + (C.ADMIN_ROUTE_UNUSED,) * (C.ADMIN_ROUTE_SLOTS - len(route))
        # Leaving the host, the request passes its own adapter (hop 0 = own adapter).
        req = Admin(command, xid=self.rng.getrandbits(32), hop_count=hops - 1, init_hops=hops, route=slots,
                    args=bytes(args).ljust(16, b"\0"))
        self.send_admin(req, C.VC_ADMIN_REQUEST)
        return req

    def _start_discovery(self, now: float) -> None:
        self._acquiring = self.admin_request(AdminCmd.WHAT_ARE_YOU)
        self._acquire_due = now + ADMIN_RETRY_S

    def timer(self) -> float:
        return min(self.link.timer(), self.own_timer())

    def own_timer(self) -> float:
        """The next deadline besides the link's (the ULA acquisition's retry)."""
        if self._acquiring is not None and self._acquire_due is not None:
            return self._acquire_due
        return float("inf")

    def handle_timer(self, now: float) -> list[bytes]:
        out = self.link.handle_timer(now)
        if self._acquiring is not None and self._acquire_due is not None and now >= self._acquire_due:
            self.counters["admin_retry"] += 1
            cmd = self._acquiring.command
            self._acquiring = self.admin_request(cmd, self._acquiring.args)
            self._acquire_due = now + ADMIN_RETRY_S
        self.process(now)
        return out

    def _admin_in(self, ev: AdminIn, now: float) -> None:
        try:
            adm = Admin.decode(ev.data)
        except DecodeError as exc:
            self.counters[f"admin_bad_{exc.field}"] += 1
            return
        if adm.is_response:
            self._admin_response(adm, now)
        elif adm.hop_count > 0:
            self.counters["admin_for_host_side_dropped"] += 1
        else:
            self._admin_request_in(adm, now)

    def _admin_request_in(self, adm: Admin, now: float) -> None:
        self.counters["rx_admin_request"] += 1
        if adm.command == AdminCmd.INITIALIZE and self.neighbour == "switch":
            # "initialize yourself" from our switch (it took a new element address):
            # ask it again for a ULA, as after a link reset
            self.counters["initialized_by_switch"] += 1
            self.send_admin(adm.response(AdminCmd.INITIALIZE_DONE,
                                         i_am_args(ElementType.ENDPOINT, 1, self.ula or C.ULA_NONE)),
                            C.VC_ADMIN_RESPONSE)
            self._start_discovery(now)
            return
        self.send_admin(self._answer(adm), C.VC_ADMIN_RESPONSE)

    def _answer(self, adm: Admin) -> Admin:
        ula = self.ula or C.ULA_NONE
        if adm.command == AdminCmd.WHAT_ARE_YOU:
            return adm.response(AdminCmd.I_AM, i_am_args(ElementType.ENDPOINT, 1, ula))
        if adm.command == AdminCmd.ARE_YOU_THERE:
            return adm.response(AdminCmd.I_AM_HERE)
        self.counters["admin_invalid"] += 1
        return adm.invalid()

    def answer_local(self, command: int, args: bytes = b"") -> Admin:
        """A hop-0 request from this host: its own adapter (this element) answers,
        nothing goes on the cable (spec §4.3 rule 1: hop 0 = own adapter)."""
        if len(args) > 16:
            raise ValueError("admin args are at most 16 bytes")
        self.counters["admin_local_request"] += 1
        return self._answer(Admin(command, xid=self.rng.getrandbits(32), args=bytes(args).ljust(16, b"\0")))

    def _admin_response(self, adm: Admin, now: float) -> None:
        acq = self._acquiring
        if acq is not None and adm.xid == acq.xid:
            self._acquisition_step(adm, now)
        else:
            self._events.append(AdminResponse(adm))

    def _acquisition_step(self, adm: Admin, now: float) -> None:
        if adm.command == AdminCmd.I_AM:
            etype, _ports, _ula = parse_i_am(adm.args)
            if etype == ElementType.SWITCH:
                self.neighbour = "switch"
                self._acquiring = self.admin_request(AdminCmd.ASSIGN_ULA, self.ula or C.ULA_NONE)
                self._acquire_due = now + ADMIN_RETRY_S
                return
            self.neighbour = "endpoint"
            self._acquiring = None
            if self.configured_ula is None:
                self.counters["no_ula_for_back_to_back"] += 1
            self._set_ula(self.configured_ula)
        elif adm.command == AdminCmd.HERE_IS_ULA and adm.status == AdminStatus.OK:
            ula = bytes(adm.args[:6])
            if ula[0] & 1 or ula == C.ULA_NONE:
                # A port's ULA is an individual address (spec §5): a group or zero one
                # cannot be used (the kernel refuses it as the TAP's MAC).  Keep asking.
                self.counters["admin_bad_assigned_ula"] += 1
                return
            self._acquiring = None
            self._set_ula(ula)
        else:
            self.counters["admin_unexpected_response"] += 1

    def per_vc_totals(self, dp: Mapping[str, Mapping[str, int]] | None = None) -> dict[str, list[int]]:
        """Messages and bytes per VC, the data plane's included (the TAP's IP on VC1, the
        ULP clients' on any VC); ``dp``: its counters when already taken."""
        if dp is None:
            dp = self.dp_counters()
        out = {k: list(v) for k, v in self.per_vc.items()}
        from_c = dp.get("per_vc") or {}
        for k in out:
            for vc in range(C.NUM_VCS):
                out[k][vc] += from_c.get(f"{k}_vc{vc}", 0)
        return out

    def status(self) -> dict[str, object]:
        from ..wire.ula import format_ula

        dp = self.dp_counters()
        return {
            "kind": "gsnd",
            "ula": format_ula(self.ula) if self.ula else None,
            "neighbour": self.neighbour,
            "link": self.link.status(),
            "reassembly": merged(self.reasm.counters, dp.get("reassembly")),
            "counters": merged(self.counters, dp.get("gsnd")),
            "per_vc": self.per_vc_totals(dp),
        }

    def dp_counters(self) -> dict[str, dict[str, int]]:
        """The data plane's counters by group (ip, gsnd, tap, cable, reassembly), or {}."""
        return self.link.dp_counters() if self.link.dp_vc >= 0 else {}
