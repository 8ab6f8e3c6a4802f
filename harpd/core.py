"""Sans-IO HARP (RFC 2835 §5): client and server for the LISes of one GSN port.

Fed HARP payloads (``receive``), resolution requests (``resolve``) and the time;
produces HARP payloads to send (``outgoing``) and events for the kernel
neighbour table (``events``).  One instance serves one interface; each LIS is an
IPv4 or IPv6 prefix with this host's address in it (an interface with an IPv6 LIS
also gets the link-local LIS fe80::/64, see harpd.options).
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

from daemons.constants import ULA_BROADCAST, ULA_HARP_SERVER, ULA_NONE
from daemons.wire.errors import DecodeError, LocalProtocolError, RemoteProtocolError

from . import constants as K
from .constants import Op
from .drops import BadHarp, Drop, Removal
from .states import PHASE_MACHINE, REVAL_MACHINE, Phase, PhaseEvent, Reval, RevalEvent
from .wire import Address, Harp, decode, nak

Network = IPv4Network | IPv6Network
ZERO = IPv4Address(0)
ZERO6 = IPv6Address(0)


@dataclass(frozen=True)
class Timers:
    registration_retry: float = K.REGISTRATION_RETRY
    probe_count: int = K.PROBE_COUNT
    probe_interval: float = K.PROBE_INTERVAL
    reregister: float = K.REREGISTER
    client_lifetime: float = K.CLIENT_ENTRY_LIFETIME
    revalidate_at: float = K.REVALIDATE_AT
    server_lifetime: float = K.SERVER_ENTRY_LIFETIME
    resolve_retry: float = K.RESOLVE_RETRY
    resolve_attempts: int = K.RESOLVE_ATTEMPTS
    negative_cache: float = K.NEGATIVE_CACHE

    def scaled(self, factor: float) -> Timers:
        """All durations multiplied by ``factor`` (for short test runs)."""
        durations = {k: v * factor for k, v in vars(self).items() if isinstance(v, float)}
        return replace(self, **durations)  # type: ignore[arg-type]  # only the float fields are in it


@dataclass(frozen=True)
class Resolved:
    ip: Address
    ula: bytes
    static: bool = False


@dataclass(frozen=True)
class Unresolved:
    ip: Address
    reason: str


@dataclass(frozen=True)
class Gone:
    ip: Address
    reason: str


@dataclass(frozen=True)
class PhaseChanged:
    lis: Network
    phase: Phase


@dataclass(slots=True)
class Entry:
    ula: bytes
    static: bool
    validated: float
    used: float = 0.0
    reval: Reval = Reval.NONE  # harpd.states.REVAL_MACHINE
    asked_at: float = 0.0


@dataclass(slots=True)
class _Pending:
    attempts: int
    next_try: float
    raw: bytes = b""


@dataclass
class _Server:
    address: bytes  # HRAL entry
    responsive: bool = False
    real_ula: bytes | None = None  # the port that answers for it
    next_register: float = 0.0
    awaiting_since: float | None = None
    unanswered: list[float] = field(default_factory=list)  # times of unanswered HARP_REQUESTs


@dataclass
class LisConfig:
    network: Network
    role: str = "auto"  # auto | client | server
    servers: list[bytes] = field(default_factory=lambda: [ULA_HARP_SERVER])
    statics: dict[Address, bytes] = field(default_factory=dict)


class Lis:
    def __init__(self, cfg: LisConfig, timers: Timers) -> None:
        self.cfg = cfg
        self.net = cfg.network
        self.t = timers
        self.ip: Address | None = None
        self.zero = ZERO if self.net.version == 4 else ZERO6  # "unknown" in ar$tpa
        self.phase = Phase.DOWN
        self.probes = 0
        self.next_probe = 0.0
        self.servers = [_Server(a) for a in cfg.servers]
        self.serving: set[bytes] = set()  # server addresses this port answers for
        self.server_table: dict[Address, Entry] = {}
        self.cache: dict[Address, Entry] = {}
        self.pending: dict[Address, _Pending] = {}
        self.negative: dict[Address, float] = {}
        # Deadline heap over the tables: (time, seq, "srv" | "cache" | "neg", ip), at most one
        # live item per entry (``due`` holds its time).  A refresh only moves a deadline
        # later, so it pushes nothing: the live item comes up early and is rescheduled
        # then.  Items superseded by an earlier deadline are skipped when they come up,
        # and the heap is compacted when they outnumber the live ones.
        self.deadlines: list[tuple[float, int, str, Address]] = []
        self.due: dict[tuple[str, Address], float] = {}
        self._seq = itertools.count()
        for ip, ula in cfg.statics.items():
            self.cache[ip] = Entry(ula, True, 0.0)
            self.server_table[ip] = Entry(ula, True, 0.0)  # served, and never taken over

    def cache_deadline(self, e: Entry) -> float | None:
        if e.static:
            return None
        end = e.validated + self.t.client_lifetime
        if e.reval in (Reval.ASK_SERVER, Reval.ASK_HOST):
            return min(end, e.asked_at + self.t.resolve_retry * self.t.resolve_attempts)
        if e.reval is Reval.LETTING_EXPIRE:
            return end
        return e.validated + self.t.revalidate_at

    def schedule(self, kind: str, ip: Address, t: float) -> None:
        """Make sure a heap item for (kind, ip) comes up no later than ``t``."""
        cur = self.due.get((kind, ip))
        if cur is not None and cur <= t:
            return  # the live item comes up first and reschedules
        self.due[(kind, ip)] = t
        heapq.heappush(self.deadlines, (t, next(self._seq), kind, ip))
        if len(self.deadlines) > 2 * len(self.due) + K.DEADLINE_HEAP_SLACK:
            self.deadlines = [d for d in self.deadlines if self.due.get((d[2], d[3])) == d[0]]
            heapq.heapify(self.deadlines)

    def pop_due(self, now: float) -> tuple[str, Address] | None:
        """The next (kind, ip) whose live heap item is due, removing it; None when none is."""
        while self.deadlines and self.deadlines[0][0] <= now:
            t, _, kind, ip = heapq.heappop(self.deadlines)
            if self.due.get((kind, ip)) == t:
                del self.due[(kind, ip)]
                return kind, ip
        return None

    def schedule_cache(self, ip: Address) -> None:
        e = self.cache.get(ip)
        t = self.cache_deadline(e) if e is not None else None
        if t is not None:
            self.schedule("cache", ip, t)

    def schedule_server(self, ip: Address) -> None:
        e = self.server_table.get(ip)
        if e is not None and not e.static:
            self.schedule("srv", ip, e.validated + self.t.server_lifetime)

    @property
    def addr(self) -> Address:
        """This host's address in the LIS (only sent from while the LIS is up)."""
        if self.ip is None:
            raise LocalProtocolError("harp lis", self.phase.name, "SEND_WITHOUT_ADDRESS")
        return self.ip

    @property
    def is_server(self) -> bool:
        return self.cfg.role == "server" or bool(self.serving)

    def is_server_ula(self, ula: bytes) -> bool:
        """``ula`` (a Message's S_ULA) is one of this LIS's HARP servers: a configured
        HRAL address or the port that answered our registration there."""
        return ula != ULA_BROADCAST and any(ula in (s.address, s.real_ula) for s in self.servers)

    def authority(self) -> tuple[bytes, _Server | None] | None:
        if self.phase is Phase.OPER_BCAST:
            return ULA_BROADCAST, None
        for s in self.servers:
            if s.responsive:
                return s.address, s
        return None


class HarpCore:
    def __init__(self, lises: list[LisConfig], now: float, timers: Timers = Timers()) -> None:
        self.t = timers
        self.lis = [Lis(c, timers) for c in lises]
        self.ula: bytes | None = None
        self.counters: Counter[str] = Counter()
        self._out: list[tuple[bytes, bytes]] = []
        self._events: list[Any] = []
        self.now = now

    # --- plumbing -----------------------------------------------------------------
    @property
    def port_ula(self) -> bytes:
        """The port's ULA (only sent from while the port is up)."""
        if self.ula is None:
            raise LocalProtocolError("harp port", "DOWN", "SEND_WITHOUT_ULA")
        return self.ula

    def outgoing(self) -> list[tuple[bytes, bytes]]:
        out, self._out = self._out, []
        return out

    def events(self) -> list[Any]:
        ev, self._events = self._events, []
        return ev

    def _send(self, d_ula: bytes, msg: Harp | bytes) -> None:
        self._out.append((d_ula, msg if isinstance(msg, bytes) else msg.encode()))
        self.counters["tx"] += 1

    def _phase(self, lis: Lis, event: PhaseEvent, now: float) -> None:
        """Move ``lis`` along PHASE_MACHINE; a change is an event for the driver."""
        phase = PHASE_MACHINE.next(lis.phase, event)
        if lis.phase is not phase:
            lis.phase = phase
            self._events.append(PhaseChanged(lis.net, phase))

    def lis_for(self, ip: Address) -> Lis | None:
        for lis in self.lis:
            if ip in lis.net:
                return lis
        return None

    # --- configuration from the host -----------------------------------------------
    def set_port(self, ula: bytes | None, addresses: list[Address], now: float) -> None:
        """The port's ULA and IP addresses changed (link up/down, ip addr add/del)."""
        changed_ula = ula != self.ula
        self.ula = ula
        for lis in self.lis:
            ip = next((a for a in addresses if a in lis.net), None)
            if ula is None or ip is None:
                lis.ip = ip
                self._phase(lis, PhaseEvent.PORT_DOWN, now)
                continue
            if changed_ula or ip != lis.ip or lis.phase is Phase.DOWN:
                lis.ip = ip
                self._start(lis, now)
            for sip, e in lis.cache.items():
                if e.static:
                    self._events.append(Resolved(sip, e.ula, True))

    def _start(self, lis: Lis, now: float) -> None:
        lis.probes = 0
        lis.next_probe = now
        for s in lis.servers:
            s.responsive, s.real_ula, s.next_register, s.awaiting_since = False, None, now, None
        lis.serving.clear()
        if lis.cfg.role == "server":
            lis.serving.update(lis.cfg.servers)
        self._phase(lis, PhaseEvent.START, now)

    # --- timers -----------------------------------------------------------------------
    def timer(self) -> float:
        t = self.now + 3600.0
        for lis in self.lis:
            if lis.phase is Phase.PROBE:
                t = min(t, lis.next_probe)
            if lis.phase in (Phase.REGISTER, Phase.OPER_SERVER):
                for s in lis.servers:
                    t = min(t, s.next_register)
                    if s.awaiting_since is not None:
                        t = min(t, s.awaiting_since + lis.t.registration_retry)
            for p in lis.pending.values():
                t = min(t, p.next_try)
            if lis.deadlines:
                t = min(t, lis.deadlines[0][0])
        return t

    def handle_timer(self, now: float) -> None:
        self.now = now
        for lis in self.lis:
            self._probe_timer(lis, now)
            self._register_timer(lis, now)
            self._resolve_timer(lis, now)
            self._cache_timer(lis, now)

    def _probe_timer(self, lis: Lis, now: float) -> None:
        if lis.phase is not Phase.PROBE or now < lis.next_probe:
            return
        if lis.probes < lis.t.probe_count:
            lis.probes += 1
            self._send(ULA_BROADCAST, Harp(Op.INHARP_REQUEST, lis.addr, lis.zero, self.port_ula, ULA_BROADCAST))
            lis.next_probe = now + lis.t.probe_interval
        else:
            self.counters["probe_not_echoed"] += 1
            self._phase(lis, PhaseEvent.PROBES_UNANSWERED, now)
            for s in lis.servers:
                s.next_register = now

    def _register_timer(self, lis: Lis, now: float) -> None:
        if lis.phase not in (Phase.REGISTER, Phase.OPER_SERVER):
            return
        for s in lis.servers:
            if s.awaiting_since is not None and now >= s.awaiting_since + lis.t.registration_retry:
                s.awaiting_since = None
                if s.responsive:  # silent at (re)registration: no longer used
                    self.counters["server_silent_dropped"] += 1
                    self._server_down(lis, s, now)
            if now >= s.next_register:
                self._send(s.address, Harp(Op.INHARP_REQUEST, lis.addr, lis.zero, self.port_ula, s.address))
                s.awaiting_since = now
                s.next_register = now + (lis.t.reregister if s.responsive else lis.t.registration_retry)

    def _server_down(self, lis: Lis, s: _Server, now: float) -> None:
        s.responsive = False
        s.real_ula = None
        s.next_register = now + lis.t.registration_retry
        if lis.phase is Phase.OPER_SERVER and lis.authority() is None:
            self._phase(lis, PhaseEvent.SERVERS_LOST, now)

    def _resolve_timer(self, lis: Lis, now: float) -> None:
        for ip, p in list(lis.pending.items()):
            if now < p.next_try:
                continue
            if p.attempts >= lis.t.resolve_attempts:
                del lis.pending[ip]
                self._negative(lis, ip, now)
                self.counters["resolve_timeout"] += 1
                self._events.append(Unresolved(ip, "no answer"))
                auth = lis.authority()
                if auth and auth[1] is not None:
                    s = auth[1]
                    s.unanswered = [t for t in s.unanswered if t > now - K.SERVER_DEAD_WINDOW] + [now]
                    if len(s.unanswered) >= K.SERVER_DEAD_UNANSWERED:
                        self.counters["server_dead_unanswered"] += 1
                        self._server_down(lis, s, now)
                continue
            self._ask(lis, ip, p, now)

    def _ask(self, lis: Lis, ip: Address, p: _Pending, now: float) -> None:
        auth = lis.authority()
        if auth is None:
            p.next_try = now + lis.t.resolve_retry
            return
        p.attempts += 1
        p.next_try = now + lis.t.resolve_retry
        self._send(auth[0], Harp(Op.HARP_REQUEST, lis.addr, ip, self.port_ula, ULA_NONE))

    def _negative(self, lis: Lis, ip: Address, now: float) -> None:
        lis.negative[ip] = now + lis.t.negative_cache
        lis.schedule("neg", ip, lis.negative[ip])

    def _cache_timer(self, lis: Lis, now: float) -> None:
        while (item := lis.pop_due(now)) is not None:
            kind, ip = item
            if kind == "neg":
                until = lis.negative.get(ip)
                if until is not None and until <= now:
                    del lis.negative[ip]
                elif until is not None:
                    lis.schedule("neg", ip, until)
                continue
            if kind == "srv":
                e = lis.server_table.get(ip)
                if e is None or e.static:
                    continue
                if now >= e.validated + lis.t.server_lifetime:
                    del lis.server_table[ip]
                    self.counters["server_entry_expired"] += 1
                else:
                    lis.schedule_server(ip)  # refreshed since: its deadline moved on
                continue
            e = lis.cache.get(ip)
            due = lis.cache_deadline(e) if e is not None else None
            if due is None:
                continue
            if due > now:
                lis.schedule_cache(ip)  # the entry moved on
                continue
            assert e is not None  # a due time comes from an entry
            self._cache_entry_due(lis, ip, e, now)
            lis.schedule_cache(ip)

    def _cache_entry_due(self, lis: Lis, ip: Address, e: Entry, now: float) -> None:
        if now >= e.validated + lis.t.client_lifetime:
            self._forget(lis, ip, Removal.EXPIRED)
        elif e.reval is Reval.ASK_HOST:
            self._forget(lis, ip, Removal.UNANSWERED)
        elif e.reval is Reval.NONE and now > e.used + lis.t.client_lifetime:
            e.reval = REVAL_MACHINE.next(e.reval, RevalEvent.DUE_UNUSED)  # not in use: let it expire
        else:
            e.reval, e.asked_at = REVAL_MACHINE.next(e.reval, RevalEvent.DUE), now
            if e.reval is Reval.ASK_HOST:  # server silent: ask the host itself
                self._send(e.ula, Harp(Op.INHARP_REQUEST, lis.addr, lis.zero, self.port_ula, e.ula))
                return
            auth = lis.authority()
            if auth is not None:
                self._send(auth[0], Harp(Op.HARP_REQUEST, lis.addr, ip, self.port_ula, ULA_NONE))

    def _forget(self, lis: Lis, ip: Address, reason: Removal) -> None:
        del lis.cache[ip]
        self.counters[reason.counter] += 1
        self._events.append(Gone(ip, reason))

    # --- resolution requests from the host ---------------------------------------------
    def resolve(self, ip: Address, now: float) -> None:
        """The kernel needs ``ip``: answer from the cache or ask the authority."""
        self.now = now
        lis = self.lis_for(ip)
        if lis is None or lis.phase is Phase.DOWN:
            self.counters["resolve_outside_lis"] += 1
            self._events.append(Unresolved(ip, "not in a LIS of this port"))
            return
        e = lis.cache.get(ip)
        if e is not None:
            e.used = now
            self._events.append(Resolved(ip, e.ula, e.static))
            return
        if lis.negative.get(ip, 0) > now:
            self.counters["resolve_negative_cached"] += 1
            self._events.append(Unresolved(ip, "negative cache"))
            return
        if ip in lis.pending:
            return
        p = lis.pending[ip] = _Pending(0, now)
        self._ask(lis, ip, p, now)

    # --- static entries ---------------------------------------------------------------
    def set_static(self, ip: Address, ula: bytes) -> bool:
        lis = self.lis_for(ip)
        if lis is None:
            return False
        lis.cache[ip] = Entry(ula, True, self.now)
        lis.server_table[ip] = Entry(ula, True, self.now)
        lis.negative.pop(ip, None)
        self._events.append(Resolved(ip, ula, True))
        return True

    def delete(self, ip: Address) -> bool:
        lis = self.lis_for(ip)
        if lis is None:
            return False
        found = lis.cache.pop(ip, None) is not None
        found = lis.server_table.pop(ip, None) is not None or found
        if found:
            self._events.append(Gone(ip, "deleted"))
        return found

    # --- receive ---------------------------------------------------------------------------
    def receive(self, src_ula: bytes, payload: bytes, now: float) -> None:
        self.now = now
        if self.ula is None:
            self.counters[Drop.PORT_DOWN] += 1
            return
        try:
            msg = decode(payload)
        except DecodeError as exc:
            self.counters[BadHarp.of(exc)] += 1
            return
        if msg.op in (Op.HARP_REPLY, Op.INHARP_REPLY):
            lis = self.lis_for(msg.tpa) or self.lis_for(msg.rpa)
        else:
            lis = self.lis_for(msg.rpa) or self.lis_for(msg.tpa)
        if lis is None or lis.phase is Phase.DOWN or lis.ip is None:
            self.counters[Drop.OUTSIDE_LIS] += 1
            return
        self.counters[f"rx_{msg.op.name.lower()}"] += 1
        if msg.is_request and msg.rula != src_ula:
            # the sender fields of a request are learnt (server table, self-detection,
            # the reply's destination): only a port speaking for itself is heard
            self.counters[Drop.SPOOFED_SHA] += 1
            return
        if msg.op is Op.INHARP_REQUEST and msg.rula == self.ula and msg.rpa == lis.ip:
            self._own_request_back(lis, msg, now)
            if not lis.is_server:
                return
        if lis.is_server and (msg.op is Op.HARP_REQUEST or (
                msg.op is Op.INHARP_REQUEST and (msg.tula in lis.serving or msg.tula == self.ula))):
            self._serve(lis, msg, src_ula, payload, now)
            return
        if msg.op is Op.HARP_REQUEST:
            self._answer_request(lis, msg)
        elif msg.op is Op.INHARP_REQUEST:
            if msg.tula == self.ula:
                self._send(msg.rula, msg.reply(lis.addr, self.port_ula, Op.INHARP_REPLY))
            if lis.phase is Phase.OPER_BCAST:  # with a server, only the server validates entries
                self._refresh_known(lis, msg.rpa, msg.rula, now)
        elif msg.op is Op.INHARP_REPLY:
            try:
                self._inharp_reply(lis, msg, src_ula, now)
            except RemoteProtocolError:  # a registration answer the LIS's phase does not allow
                self.counters[Drop.OUT_OF_STATE] += 1
        elif msg.op is Op.HARP_REPLY:
            self._harp_reply(lis, msg, src_ula, now)
        elif msg.op is Op.HARP_NAK:
            self._harp_nak(lis, msg, src_ula, now)

    def _own_request_back(self, lis: Lis, msg: Harp, now: float) -> None:
        if msg.tula == ULA_BROADCAST:
            if lis.phase is Phase.PROBE:
                self._phase(lis, PhaseEvent.BROADCAST_ECHO, now)  # the fabric broadcasts: plain ARP from now on
            return
        if lis.cfg.role in ("auto", "server") and msg.tula not in lis.serving:
            lis.serving.add(msg.tula)  # we are the HARP server behind this address
            self.counters["server_self_detected"] += 1

    def _refresh_known(self, lis: Lis, ip: Address, ula: bytes, now: float) -> None:
        e = lis.cache.get(ip)
        if e is not None and not e.static and e.ula == ula:
            e.validated = now
            lis.schedule_cache(ip)

    # client: answer requests that target us
    def _answer_request(self, lis: Lis, msg: Harp) -> None:
        if msg.tpa == lis.ip:
            self._send(msg.rula, msg.reply(lis.addr, self.port_ula, Op.HARP_REPLY))

    def _inharp_reply(self, lis: Lis, msg: Harp, src_ula: bytes, now: float) -> None:
        if msg.tula != self.ula or msg.tpa != lis.ip:
            self.counters[Drop.REPLY_NOT_FOR_US] += 1
            return
        for s in lis.servers:
            if s.address == msg.rula and s.awaiting_since is not None:  # answer to a registration
                if s.real_ula is not None and src_ula != s.real_ula:
                    # the port behind this server address is known: nobody else answers for it
                    # (should the address move to another port, the silent registration drops
                    # the server and the next one learns the new port)
                    self.counters[Drop.REPLY_NOT_FROM_SERVER] += 1
                    return
                self._phase(lis, PhaseEvent.REGISTERED, now)  # first: raises when not allowed
                s.awaiting_since = None
                s.unanswered.clear()
                s.real_ula = src_ula
                s.next_register = now + lis.t.reregister
                if not s.responsive:
                    s.responsive = True
                    self.counters["server_registered"] += 1
                return
        e = lis.cache.get(msg.rpa)  # answer to a direct revalidation, from the host asked
        if e is None or not e.ula == msg.rula == src_ula:
            self.counters[Drop.REPLY_UNSOLICITED] += 1
            return
        try:
            e.reval = REVAL_MACHINE.next(e.reval, RevalEvent.HOST_ANSWERED)
        except RemoteProtocolError:  # we did not ask that host
            self.counters[Drop.REPLY_UNSOLICITED] += 1
            return
        e.validated = now
        lis.schedule_cache(msg.rpa)
        self._events.append(Resolved(msg.rpa, e.ula))

    def _trusted_answer(self, lis: Lis, msg: Harp, src_ula: bytes) -> bool:
        """A HARP_REPLY or HARP_NAK comes from whom we asked: one of our servers, or
        (broadcast fabric, no server) the host answering for itself."""
        if lis.is_server_ula(src_ula):
            return True
        return lis.phase is Phase.OPER_BCAST and msg.op is Op.HARP_REPLY and msg.rula == src_ula

    def _outstanding(self, lis: Lis, ip: Address) -> bool:
        """A HARP_REQUEST for ``ip`` is outstanding: a resolution or a revalidation."""
        e = lis.cache.get(ip)
        return ip in lis.pending or (e is not None and e.reval is Reval.ASK_SERVER)

    def _harp_reply(self, lis: Lis, msg: Harp, src_ula: bytes, now: float) -> None:
        if msg.tula != self.ula or msg.tpa != lis.ip:
            self.counters[Drop.REPLY_NOT_FOR_US] += 1
            return
        ip = msg.rpa
        if not self._trusted_answer(lis, msg, src_ula):
            self.counters[Drop.REPLY_NOT_FROM_SERVER] += 1
            return
        if not self._outstanding(lis, ip):
            self.counters[Drop.REPLY_UNSOLICITED] += 1
            return
        lis.pending.pop(ip, None)
        e = lis.cache.get(ip)
        if e is not None and e.static:
            return
        auth = lis.authority()
        if auth and auth[1] is not None and src_ula in (auth[1].real_ula, auth[1].address):
            auth[1].unanswered.clear()
            auth[1].next_register = now + lis.t.reregister  # a REQUEST/REPLY exchange refreshes registration
        lis.cache[ip] = Entry(msg.rula, False, now, used=e.used if e else now)
        lis.schedule_cache(ip)
        lis.negative.pop(ip, None)
        self._events.append(Resolved(ip, msg.rula))

    def _harp_nak(self, lis: Lis, msg: Harp, src_ula: bytes, now: float) -> None:
        if msg.rula != self.ula or msg.rpa != lis.ip:
            self.counters[Drop.NAK_NOT_FOR_US] += 1
            return
        ip = msg.tpa
        if ip == lis.zero:  # our registration echoed back refused (a static entry, a live one)
            s = next((s for s in lis.servers if s.address == msg.tula and s.awaiting_since is not None), None)
            if s is None:
                self.counters[Drop.NAK_UNSOLICITED] += 1
            elif s.real_ula not in (None, src_ula):
                self.counters[Drop.NAK_NOT_FROM_SERVER] += 1
            else:
                self.counters["registration_refused"] += 1  # retried; the operator has to look
            return
        if not self._trusted_answer(lis, msg, src_ula):
            self.counters[Drop.NAK_NOT_FROM_SERVER] += 1
            return
        if not self._outstanding(lis, ip):
            self.counters[Drop.NAK_UNSOLICITED] += 1
            return
        if lis.pending.pop(ip, None) is not None:
            self._negative(lis, ip, now)
            self._events.append(Unresolved(ip, "NAK"))
        e = lis.cache.get(ip)
        if e is not None and not e.static:
            self._forget(lis, ip, Removal.NAK)

    # --- server ---------------------------------------------------------------------------
    def _serve(self, lis: Lis, msg: Harp, src_ula: bytes, raw: bytes, now: float) -> None:
        if msg.rpa not in lis.net or msg.rpa == lis.zero:
            self.counters[Drop.REQUESTER_OUTSIDE_LIS] += 1
            return
        if not self._register(lis, msg.rpa, msg.rula, now):
            self._send(msg.rula, nak(raw))  # to the sender itself (ar$sha = S_ULA)
            return
        if msg.op is Op.INHARP_REQUEST:
            self.counters["server_registrations"] += 1
            answer_ula = msg.tula if msg.tula in lis.serving else self.port_ula
            self._send(msg.rula, msg.reply(lis.addr, answer_ula, Op.INHARP_REPLY))
            return
        target = msg.tpa
        if target == lis.ip:
            self._send(msg.rula, msg.reply(target, self.port_ula, Op.HARP_REPLY))
            self.counters["server_replies"] += 1
        elif (e := lis.server_table.get(target)) is not None:
            self._send(msg.rula, msg.reply(target, e.ula, Op.HARP_REPLY))
            self.counters["server_replies"] += 1
        else:
            self._send(msg.rula, nak(raw))
            self.counters["server_naks"] += 1

    def _register(self, lis: Lis, ip: Address, ula: bytes, now: float) -> bool:
        """RFC 2835 §5.4 registration; an unexpired IP is never taken over by another ULA,
        a static one never (harpd.options or gsnarp -s: the answer to squatting)."""
        e = lis.server_table.get(ip)
        if e is None:
            lis.server_table[ip] = Entry(ula, False, now)  # cases 4 and 5
            lis.schedule_server(ip)
            return True
        if e.ula == ula:
            if not e.static:
                e.validated = now  # case 1
                lis.schedule_server(ip)
            return True
        if e.static:
            self.counters["server_static_conflict"] += 1
        else:
            self.counters["server_takeover_refused"] += 1  # cases 2 and 3 while the entry lives
        return False

    # --- status -------------------------------------------------------------------------------
    def table(self, now: float) -> list[dict[str, Any]]:
        from daemons.wire.ula import format_ula

        rows = []
        for lis in self.lis:
            seen = set()
            for source, tab in (("server", lis.server_table), ("cache", lis.cache)):
                for ip, e in sorted(tab.items()):
                    if ip in seen:
                        continue
                    seen.add(ip)
                    rows.append({"ip": str(ip), "ula": format_ula(e.ula), "lis": str(lis.net),
                                 "kind": "static" if e.static else "dynamic", "table": source,
                                 "age": None if e.static else round(now - e.validated, 1)})
        return rows

    def status(self) -> list[dict[str, Any]]:
        from daemons.wire.ula import format_ula

        return [{"lis": str(lis.net), "ip": str(lis.ip) if lis.ip else None, "phase": lis.phase.value,
                 "server": lis.is_server, "serving": [format_ula(a) for a in sorted(lis.serving)],
                 "servers": [{"address": format_ula(s.address), "responsive": s.responsive} for s in lis.servers]}
                for lis in self.lis]
