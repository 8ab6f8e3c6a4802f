"""Sans-IO Scheduled Transfer endpoint (spec st.md §3): virtual connections,
slots, RTS/CTS/DATA writes, RTR reads, persistent regions (RMR/MRA, PUT, GET,
FETCHOP/FOC), RS/RSR, END/END_ACK, RD/DA/DC, every timeout.

Peers are GSN ULAs (the driver resolves IP addresses).  Transfers and regions are
buffer objects handed in by the driver (bytearrays, or stpd.membuf.FileBuffer for files and shared memory):
the core reads and writes them directly and never touches a socket or a clock.
``outgoing()`` yields ``(ula, vc, header_bytes, payload)`` with payload a
memoryview (or bytes) that follows the header in one GSN Message.
"""

from __future__ import annotations

import enum
import itertools
import random
import struct
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from daemons.wire.buffers import Bytes
from daemons.wire.errors import DecodeError, RemoteProtocolError

from . import constants as K
from .constants import NO_ID, Flag, Function, Op, Reason
from .drops import BadOp, Drop
from .membuf import BufferGone, FileBuffer, FileSlice
from .states import TRANSFER_MACHINE, VC_MACHINE, State, VcEvent, XEvent, XState
from .wire import Header, decode, decode_options, encode_options, error_code_option, reason_of

if TYPE_CHECKING:
    from typing_extensions import Buffer

View: TypeAlias = "memoryview | FileBuffer"  # what a transfer or region reads and writes
Out: TypeAlias = "tuple[bytes, int, bytes, Buffer | FileSlice]"  # (peer ULA, VC, header, payload) to send


@dataclass(frozen=True)
class Params:
    bufsize: int = K.BUFSIZE
    max_stu: int = K.MAX_STU
    max_block: int = K.MAX_BLOCK
    slots: int = K.SLOTS
    cts_req: int = K.CTS_REQ
    data_vc: int = 3


@dataclass(frozen=True)
class Timers:
    rc_retry: float = K.RC_RETRY
    rc_tries: int = K.RC_TRIES
    teardown: float = K.TEARDOWN_RETRY
    teardown_tries: int = K.TEARDOWN_TRIES
    tx: float = K.TX_TIMEOUT
    rx: float = K.RX_TIMEOUT
    slot_wait: float = K.SLOT_WAIT
    foc: float = K.FOC_TIMEOUT
    foc_tries: int = K.FOC_TRIES
    end: float = K.END_RETRY
    end_tries: int = K.END_TRIES


SLOT_RS_EVERY = 1.0  # [PC] slot wait: RS type 1 each second
_TX_COUNTER = {op: f"tx_{op.name}" for op in Op}  # per-op counter names, built once (the data path counts every op)
_RX_COUNTER = {op: f"rx_{op.name}" for op in Op}


def _view(buf: Buffer | FileBuffer) -> View:
    """A plain buffer as a byte memoryview; a FileBuffer (read and written through its
    descriptor, see stpd.membuf) as it is.  Every access to a FileBuffer may raise
    BufferGone, which fails that one transfer or op."""
    return buf if isinstance(buf, FileBuffer) else memoryview(buf).cast("B")


# --- events for the driver ----------------------------------------------------------------
@dataclass(frozen=True)
class Connected:
    vc: int


@dataclass(frozen=True)
class Accepted:
    vc: int
    uport: int
    peer: bytes


@dataclass(frozen=True)
class Closed:
    vc: int
    reason: str


@dataclass(frozen=True)
class Incoming:
    """A peer wants to write ``t_len`` bytes; post a receive to accept it."""

    vc: int
    t_len: int


@dataclass(frozen=True)
class ReadRequested:
    vc: int
    rid: int
    t_len: int


@dataclass(frozen=True)
class TransferDone:
    vc: int
    xid: int
    ok: bool
    nbytes: int
    reason: str = ""
    incoming: bool = False
    buf: object = field(default=None, compare=False, repr=False)  # the transfer's buffer (the driver's key)


@dataclass(frozen=True)
class RegionReady:
    vc: int
    gid: int  # the request_region() id
    rid: int
    size: int
    ok: bool
    reason: str = ""


@dataclass(frozen=True)
class OpDone:
    """PUT acknowledged, GET data arrived (``data``) or FETCHOP value (``value``)."""

    vc: int
    gid: int
    ok: bool
    data: bytes = b""
    value: int | None = None
    reason: str = ""


@dataclass(frozen=True)
class StatusReply:
    vc: int
    slots: int
    b_seq: int


# --- state ---------------------------------------------------------------------------------
@dataclass(eq=False)
class Transfer:
    xid: int  # our id
    vc: Vc
    buf: View
    t_len: int
    peer_id: int = NO_ID
    blocksize: int = 0
    granted: int = 0  # CTSs sent (receiver) / blocks done
    outstanding: int = 0  # CTSs not yet filled (receiver)
    done_bytes: int = 0
    block_bytes: dict[int, int] = field(default_factory=dict)
    highest_block: int = -1
    deadline: float = 0.0
    send_state: bool = True
    sending: bool = True
    state: XState = XState.OPEN
    cts_req: int = 1


@dataclass(eq=False)
class Region:
    rid: int
    buf: View

    def word(self, off: int) -> tuple[int, int]:
        """The identity of an 8-byte word.  Regions start at their buffer object's
        start, so regions exposing the same memory object share their words."""
        return id(self.buf.obj), off


@dataclass(eq=False)
class Lock:
    vc: Vc
    region: Region
    off: int
    gid: int
    function: int
    deadline: float
    tries: int
    value: bytes


class OpKind(enum.StrEnum):
    """An op awaiting the peer's answer (its timeout is counted as <kind>_timeout)."""

    RMR = "rmr"
    PUT = "put"
    GET = "get"
    FETCHOP = "fetchop"

    @property
    def timeout_counter(self) -> str:
        return f"{self.value}_timeout"


@dataclass(eq=False)
class Vc:
    vid: int
    peer: bytes
    local_port: int
    local_key: int
    state: State
    uport: int = 0
    peer_port: int = 0
    peer_key: int = 0
    peer_slots: int = K.SLOTS  # slots we may still use at the peer
    peer_bufsize: int = K.BUFSIZE
    peer_max_stu: int = K.MAX_STU
    our_slots_left: int = K.SLOTS  # credit the peer still holds with us
    freed: int = 0  # slots consumed since our last RSR
    sync: int = 0
    tries: int = 0
    deadline: float = 0.0
    held: deque[tuple[Header, Buffer | FileSlice, int]] = field(default_factory=deque)  # ops waiting for a peer slot
    rs_out: float | None = None  # when our outstanding RS (type 1) was sent
    tx: dict[int, Transfer] = field(default_factory=dict)  # our id -> Transfer (we send)
    rx: dict[int, Transfer] = field(default_factory=dict)  # our id -> Transfer (we receive)
    posted: deque[View] = field(default_factory=deque)  # receive buffers waiting for an RTS
    paused: deque[Header] = field(default_factory=deque)  # RTS headers waiting for a receive
    regions: dict[int, Region] = field(default_factory=dict)  # rid -> Region (ours, exposed to the peer)
    exposed: deque[View] = field(default_factory=deque)  # buffers offered for the next RMR
    remote_regions: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)  # rid -> (mx, bufx, offset, size)
    # gid -> (kind, deadline, header, tries) awaiting answer
    ops: dict[int, tuple[OpKind, float, Header | None, int]] = field(default_factory=dict)
    done_gids: dict[int, Header] = field(default_factory=dict)  # gid -> FOC header, for duplicate DATA
    ends: dict[tuple[int, int], tuple[float, int]] = field(default_factory=dict)  # (d_id, s_id) -> (deadline, tries)
    rc_key: tuple[bytes, int, int] | tuple[()] = ()


class StCore:
    def __init__(self, now: float, *, params: Params = Params(), timers: Timers = Timers(),
                 rng: random.Random | None = None, defer_file_reads: bool = False) -> None:
        """``defer_file_reads``: a DATA whose STU comes from a FileBuffer carries a
        FileSlice, which the driver reads when the Message can leave (then calls
        ``source_failed`` if that read fails) instead of bytes read at the CTS."""
        self.p = params
        self.defer_file_reads = defer_file_reads
        self.t = timers
        self.rng = rng or random.Random()
        self.now = now
        self.vcs: dict[int, Vc] = {}
        self.by_port: dict[int, Vc] = {}
        self.listeners: set[int] = set()
        self.rc_seen: dict[tuple[bytes, int, int], Vc] = {}  # (peer, I_Port, I_Key) -> VC, duplicate RC
        self.counters: Counter[str] = Counter()
        self._out: list[Out] = []
        self._events: list[Any] = []
        self._ids = itertools.count(1)
        self.locks: dict[tuple[int, int], Lock] = {}  # FETCHOP word -> the op holding it
        self.lock_waiting: dict[tuple[int, int], deque[tuple[Vc, Region, Header]]] = {}  # word -> (vc, region, header) queued
        self._next_port = 1
        self._handlers = {op: m for op in Op if (m := getattr(self, f"_on_{op.name.lower()}", None)) is not None}
        self._armed = float("inf")  # the deadline the driver last read (timers_changed)

    @property
    def timers_changed(self) -> bool:
        """Whether a deadline earlier than the one the driver last read appeared
        (daemons.runtime.corerunner: feeding a DATA then costs no wake-up of the timer
        task; a deadline that moved later is found when the earlier one fires)."""
        return self.timer() < self._armed

    @timers_changed.setter
    def timers_changed(self, changed: bool) -> None:
        self._armed = float("inf") if changed else self.timer()

    # --- plumbing ------------------------------------------------------------------------------
    def outgoing(self) -> list[Out]:
        out, self._out = self._out, []
        return out

    def events(self) -> list[Any]:
        ev, self._events = self._events, []
        return ev

    def _id(self) -> int:
        """Ids for VCs, transfers, regions and ops: never 0 nor 0xFFFFFFFF."""
        return next(self._ids) % 0xFFFFFFFE + 1

    def _port(self) -> int:
        for _ in range(65535):
            port = self._next_port
            self._next_port = self._next_port % 65535 + 1
            if port not in self.by_port:
                return port
        raise RuntimeError("no free ST port")

    def _key(self) -> int:
        return self.rng.getrandbits(32) or 1

    def _emit(self, vc: Vc, h: Header, payload: Buffer | FileSlice = b"", *, dc: int = 0, slot: bool = True) -> None:
        """Send an op on VC ``vc``; ops that take a peer slot wait while none is left."""
        if slot and vc.peer_slots != K.SLOTS_OFF and h.op not in K.NO_SLOT_OPS and not h.flags & Flag.SILENT:
            if vc.peer_slots <= 0:
                vc.held.append((h, payload, dc))
                self.counters["tx_held_no_slot"] += 1
                self._ask_slots(vc)
                return
            vc.peer_slots -= 1
            if vc.peer_slots <= self.p.slots // 2:
                self._ask_slots(vc)
        if h.op in (Op.DATA, Op.RS):
            vc.sync = (vc.sync + 1) & 0xFFFF
        self._out.append((vc.peer, dc, h.encode(), payload))
        self.counters[_TX_COUNTER[h.op]] += 1

    def _ask_slots(self, vc: Vc) -> None:
        if vc.rs_out is None and VC_MACHINE.allows(vc.state, VcEvent.USE):
            vc.rs_out = self.now
            self._emit(vc, self._hdr(vc, Op.RS, d_id=NO_ID, sync=vc.sync), slot=False)

    def _hdr(self, vc: Vc, op: Op, **kw: Any) -> Header:
        return Header(op, kw.pop("flags", Flag.INTERRUPT), d_port=vc.peer_port, s_port=vc.local_port,
                      d_key=vc.peer_key, **kw)

    # --- connections ------------------------------------------------------------------------------
    def listen(self, uport: int) -> None:
        self.listeners.add(uport)

    def unlisten(self, uport: int) -> None:
        self.listeners.discard(uport)

    def connect(self, peer: bytes, uport: int, now: float) -> int:
        self.now = now
        vc = self._new_vc(peer, State.RC_SENT)
        vc.uport = uport
        vc.deadline = now + self.t.rc_retry
        vc.tries = 1
        self._send_rc(vc)
        return vc.vid

    def _new_vc(self, peer: bytes, state: State) -> Vc:
        vc = Vc(self._id(), peer, self._port(), self._key(), state, our_slots_left=self.p.slots)
        self.vcs[vc.vid] = vc
        self.by_port[vc.local_port] = vc
        return vc

    def _send_rc(self, vc: Vc) -> None:
        h = Header(Op.RC, Flag.INTERRUPT | Flag.OUT_OF_ORDER, param=self.p.slots, d_port=0, s_port=vc.local_port,
                   mx=0, bufx=self.p.bufsize, offset=vc.local_key, sync=self.p.max_stu,
                   d_id=vc.uport, s_id=0)
        self._out.append((vc.peer, 0, h.encode(), b""))
        self.counters["tx_RC"] += 1

    def close(self, vid: int, now: float) -> None:
        self.now = now
        vc = self.vcs.get(vid)
        if vc is None:
            return
        was, vc.state = vc.state, VC_MACHINE.next(vc.state, VcEvent.CLOSE)
        if vc.state is State.CLOSED:
            self._free(vc, "closed before connected")
            return
        if vc.state is was:
            return  # already closing
        self._abort_all(vc, "connection closing")
        vc.tries, vc.deadline = 1, now + self.t.teardown
        self._emit(vc, self._hdr(vc, Op.RD, offset=vc.local_key))

    def _move(self, vc: Vc, event: VcEvent) -> State:
        """Move ``vc`` along VC_MACHINE (raises on an undefined pair)."""
        vc.state = VC_MACHINE.next(vc.state, event)
        return vc.state

    def _free(self, vc: Vc, reason: str) -> None:
        """Forget a VC that VC_MACHINE moved to CLOSED."""
        self._abort_all(vc, reason)
        self.vcs.pop(vc.vid, None)
        self.by_port.pop(vc.local_port, None)
        if vc.rc_key:
            self.rc_seen.pop(vc.rc_key, None)
        self._events.append(Closed(vc.vid, reason))

    def _abort_all(self, vc: Vc, reason: str) -> None:
        for tab in (vc.tx, vc.rx):
            for x in list(tab.values()):
                self._finish(x, False, reason)
        for gid in list(vc.ops):
            kind, *_ = vc.ops.pop(gid)
            self._events.append(OpDone(vc.vid, gid, False, reason=reason))
        vc.regions.clear()
        vc.remote_regions.clear()
        vc.posted.clear()
        vc.paused.clear()
        vc.held.clear()
        vc.done_gids.clear()
        vc.ends.clear()

    # --- receive ------------------------------------------------------------------------------------
    def receive(self, src: bytes, packet: Bytes, now: float) -> None:
        self.now = now
        try:
            h, rest = decode(packet)
        except DecodeError as exc:
            self.counters[BadOp.of(exc)] += 1
            return
        self.counters[_RX_COUNTER[h.op]] += 1
        if h.op is Op.RC:
            self._on_rc(src, h)
            return
        vc = self.by_port.get(h.d_port)
        if vc is None:
            self.counters[Drop.UNKNOWN_PORT] += 1
            return
        if h.op is Op.CA:
            self._on_ca(vc, src, h, rest)
            return
        if src != vc.peer or h.s_port != vc.peer_port or h.d_key != vc.local_key:
            self.counters[Drop.BAD_TUPLE] += 1  # wrong peer, port or key
            return
        if h.op not in K.NO_SLOT_OPS and not (h.op is Op.DATA and h.flags & Flag.SILENT) and \
                vc.our_slots_left != K.SLOTS_OFF:
            if vc.our_slots_left <= 0:
                self.counters[Drop.SLOT_OVERRUN] += 1
                return
            vc.our_slots_left -= 1
            vc.freed += 1  # processed at once: the slot is free again
        handler = self._handlers.get(h.op)
        if handler is None:
            self.counters[f"rx_ignored_{h.op.name}"] += 1
            return
        try:
            handler(vc, h, rest)
        except RemoteProtocolError:
            self.counters[Drop.OUT_OF_STATE] += 1  # RD, DA or DC the VC's state does not allow
            return
        if h.flags & Flag.SEND_STATE and h.op not in (Op.DATA, Op.RS, Op.RSR):
            self._rsr(vc, h, 2)

    def _on_rc(self, src: bytes, h: Header) -> None:
        key = (src, h.s_port, h.offset)
        vc = self.rc_seen.get(key)
        if vc is not None:  # duplicate RC: the same CA again
            self.counters["rx_duplicate_RC"] += 1
            self._send_ca(vc)
            return
        if h.d_id not in self.listeners:
            self.counters["rc_refused_no_listener"] += 1
            ca = Header(Op.CA, Flag.INTERRUPT | Flag.REJECT, d_port=h.s_port, d_key=h.offset, d_id=h.s_id,
                        s_id=h.d_id)
            self._out.append((src, 0, ca.encode(), encode_options([error_code_option(Reason.NO_LISTENER)])))
            return
        vc = self._new_vc(src, State.CONNECTED)
        vc.uport, vc.peer_port, vc.peer_key = h.d_id, h.s_port, h.offset
        vc.peer_slots, vc.peer_bufsize, vc.peer_max_stu = h.param, h.bufx, h.sync
        vc.rc_key = key
        self.rc_seen[key] = vc
        self._send_ca(vc)
        self._events.append(Accepted(vc.vid, vc.uport, src))

    def _send_ca(self, vc: Vc) -> None:
        ca = Header(Op.CA, Flag.INTERRUPT | Flag.OUT_OF_ORDER, param=self.p.slots, d_port=vc.peer_port,
                    s_port=vc.local_port, d_key=vc.peer_key, bufx=self.p.bufsize, offset=vc.local_key,
                    sync=self.p.max_stu, d_id=0, s_id=vc.uport)
        self._out.append((vc.peer, 0, ca.encode(), b""))
        self.counters["tx_CA"] += 1

    def _on_ca(self, vc: Vc, src: bytes, h: Header, rest: Bytes) -> None:
        if src != vc.peer or h.d_key != vc.local_key:
            self.counters[Drop.STRAY_CA] += 1
            return
        try:
            self._move(vc, VcEvent.CA_REJECT if h.flags & Flag.REJECT else VcEvent.CA)
        except RemoteProtocolError:
            self.counters[Drop.STRAY_CA] += 1
            return
        if vc.state is State.CLOSED:
            reason = reason_of(decode_options(rest)) if rest else None
            name = Reason(reason).name if reason is not None and reason in Reason._value2member_map_ else reason
            self._free(vc, f"refused ({name})")
            return
        vc.peer_port, vc.peer_key = h.s_port, h.offset
        vc.peer_slots, vc.peer_bufsize, vc.peer_max_stu = h.param, h.bufx, h.sync
        vc.our_slots_left = self.p.slots
        self._events.append(Connected(vc.vid))

    def _on_rd(self, vc: Vc, h: Header, rest: Bytes) -> None:
        self._move(vc, VcEvent.RD)
        self._abort_all(vc, "peer closed the connection")
        vc.tries, vc.deadline = 1, self.now + self.t.teardown
        self._emit(vc, self._hdr(vc, Op.DA, offset=vc.local_key), slot=False)

    def _on_da(self, vc: Vc, h: Header, rest: Bytes) -> None:
        self._move(vc, VcEvent.DA)
        self._emit(vc, self._hdr(vc, Op.DC, offset=vc.local_key), slot=False)
        self._free(vc, "closed")

    def _on_dc(self, vc: Vc, h: Header, rest: Bytes) -> None:
        self._move(vc, VcEvent.DC)
        self._free(vc, "closed")

    def _on_nop(self, vc: Vc, h: Header, rest: Bytes) -> None:
        pass

    # --- slots and status ---------------------------------------------------------------------------
    def _on_rs(self, vc: Vc, h: Header, rest: Bytes) -> None:
        kind = 1 if h.d_id == NO_ID else (2 if h.b_num == NO_ID else 3)
        self._rsr(vc, h, kind)

    def _rsr(self, vc: Vc, h: Header, kind: int) -> None:
        credit, vc.freed = vc.freed, 0
        vc.our_slots_left += credit
        b_seq, b_num, d_id, s_id = NO_ID, NO_ID, NO_ID, h.d_id
        x = vc.rx.get(h.d_id) if kind != 1 else None
        if x is None and kind != 1:
            x = next((t for t in vc.rx.values() if t.peer_id == h.s_id), None)
        if x is not None:
            b_seq = x.highest_block if x.highest_block >= 0 else NO_ID
            d_id, s_id = x.peer_id, x.xid
            if kind == 3:
                b_num = h.b_num if x.block_bytes.get(h.b_num) == self._block_len(x, h.b_num) else NO_ID
        elif kind == 1:
            d_id = NO_ID
        rsr = self._hdr(vc, Op.RSR, param=credit, offset=b_seq & 0xFFFFFFFF, sync=h.sync, b_num=b_num,
                        d_id=d_id, s_id=s_id)
        self._emit(vc, rsr, slot=False)

    def _on_rsr(self, vc: Vc, h: Header, rest: Bytes) -> None:
        if h.param != K.SLOTS_OFF:
            vc.peer_slots += h.param
        vc.rs_out = None
        while vc.held and vc.peer_slots > 0:
            hh, payload, dc = vc.held.popleft()
            self._emit(vc, hh, payload, dc=dc)
        x = vc.tx.get(h.d_id)
        if x is not None and x.sending:
            x.deadline = self.now + self.t.tx
            complete = x.t_len == 0 or (h.offset != NO_ID and h.offset >= self._nblocks(x) - 1)
            if complete and x.done_bytes >= x.t_len:
                self._finish(x, True)
        op = vc.ops.get(h.d_id)
        if op is not None and op[0] is OpKind.PUT:
            vc.ops.pop(h.d_id)
            self._events.append(OpDone(vc.vid, h.d_id, True))
        if h.d_id == NO_ID or x is None:
            self._events.append(StatusReply(vc.vid, vc.peer_slots, h.offset))

    def status(self, vid: int, now: float) -> bool:
        self.now = now
        vc = self.vcs.get(vid)
        if vc is None or not VC_MACHINE.allows(vc.state, VcEvent.USE):
            return False
        self._emit(vc, self._hdr(vc, Op.RS, d_id=NO_ID, sync=vc.sync), slot=False)
        return True

    # --- single-use writes: RTS -> CTS* -> DATA* -------------------------------------------------------
    def send(self, vid: int, buf: Buffer | FileBuffer, now: float, *, reply_to: int = NO_ID, dc: int | None = None) -> int | None:
        """Write ``buf`` to the peer (which must post a receive); returns the transfer id."""
        self.now = now
        vc = self.vcs.get(vid)
        if vc is None or not VC_MACHINE.allows(vc.state, VcEvent.USE) or len(vc.tx) >= K.MAX_TRANSFERS:
            return None
        mv = _view(buf)
        x = Transfer(self._id(), vc, mv, len(mv), deadline=now + self.t.tx)
        vc.tx[x.xid] = x
        rts = self._hdr(vc, Op.RTS, flags=Flag.INTERRUPT | Flag.SEND_STATE, param=self.p.cts_req,
                        mx=self.p.max_block, d_id=reply_to, s_id=x.xid).with_t_len(x.t_len)
        self._emit(vc, Header(**{**rts.__dict__, "dc": dc if dc is not None else self.p.data_vc}))
        return x.xid

    def post_receive(self, vid: int, buf: Buffer | FileBuffer, now: float) -> bool:
        """Offer a receive buffer for the next (or a paused) incoming write."""
        self.now = now
        vc = self.vcs.get(vid)
        if vc is None or not VC_MACHINE.allows(vc.state, VcEvent.USE):
            return False
        vc.posted.append(_view(buf))
        if vc.paused:
            self._accept_rts(vc, vc.paused.popleft())
        return True

    def unpost(self, vid: int, buf: object) -> bool:
        """Withdraw a receive buffer that no RTS has taken yet (its owner went away)."""
        vc = self.vcs.get(vid)
        if vc is None:
            return False
        for b in list(vc.posted):
            if b is buf or (isinstance(b, memoryview) and b.obj is buf):
                vc.posted.remove(b)
                return True
        return False

    def _on_rts(self, vc: Vc, h: Header, rest: Bytes) -> None:
        if h.d_id != NO_ID and h.d_id in vc.rx:  # answer to our RTR
            x = vc.rx[h.d_id]
            if h.t_len > len(x.buf):
                self._ra(vc, h, True, Reason.TOO_LONG)
                return
            self._start_receive(vc, x, h)
            return
        if not vc.posted:
            vc.paused.append(h)
            self._ra(vc, h, False)
            self._events.append(Incoming(vc.vid, h.t_len))
            return
        self._accept_rts(vc, h)

    def _accept_rts(self, vc: Vc, h: Header) -> None:
        buf = vc.posted.popleft()
        if h.t_len > len(buf) or len(vc.rx) >= K.MAX_TRANSFERS:
            reason = Reason.TOO_LONG if h.t_len > len(buf) else Reason.NO_RESOURCES
            self._ra(vc, h, True, reason)
            # the posted buffer was this RTS's: its owner learns the write was refused
            self._events.append(TransferDone(vc.vid, 0, False, 0, reason.name.lower(), True, buf))
            return
        x = Transfer(self._id(), vc, buf, h.t_len, sending=False)
        vc.rx[x.xid] = x
        self._start_receive(vc, x, h)

    def _start_receive(self, vc: Vc, x: Transfer, h: Header) -> None:
        x.peer_id, x.t_len = h.s_id, h.t_len
        x.blocksize = min(h.mx or self.p.max_block, self.p.max_block)
        x.send_state = bool(h.flags & Flag.SEND_STATE)
        x.deadline = self.now + self.t.rx
        if x.t_len == 0:
            self._rsr(vc, Header(Op.RS, d_id=x.xid), 2)
            self._finish(x, True)
            return
        self._grant(x, max(1, h.param))

    def _nblocks(self, x: Transfer) -> int:
        return max(1, -(-x.t_len // (1 << x.blocksize))) if x.blocksize else 1

    def _block_len(self, x: Transfer, b: int) -> int:
        size = 1 << x.blocksize
        return max(0, min(x.t_len, (b + 1) * size) - b * size)

    def _grant(self, x: Transfer, cts_req: int) -> None:
        x.cts_req = cts_req
        while x.outstanding < cts_req and x.granted < self._nblocks(x):
            b = x.granted
            if isinstance(x.buf, FileBuffer):  # memory in place before the CTS [SGI-GSN]
                try:
                    x.buf.reserve(b << x.blocksize, (b << x.blocksize) + self._block_len(x, b))
                except BufferGone as exc:
                    self.counters["rx_buffer_gone"] += 1
                    self._finish(x, False, f"destination {exc}")
                    return
            x.granted += 1
            x.outstanding += 1
            cts = self._hdr(x.vc, Op.CTS, param=x.blocksize, mx=0, bufx=(b << x.blocksize) >> self.p.bufsize,
                            offset=(b << x.blocksize) & ((1 << self.p.bufsize) - 1), sync=0, b_num=b,
                            d_id=x.peer_id, s_id=x.xid)
            self._emit(x.vc, cts)

    def _on_cts(self, vc: Vc, h: Header, rest: Bytes) -> None:
        x = vc.tx.get(h.d_id)
        if x is None:
            self.counters[Drop.CTS_UNKNOWN_ID] += 1
            return
        x.peer_id, x.blocksize = h.s_id, h.param
        x.deadline = self.now + self.t.tx
        start = h.b_num << h.param
        end = min(x.t_len, start + (1 << h.param))
        if start >= x.t_len and x.t_len:
            self.counters[Drop.CTS_BEYOND_T_LEN] += 1
            return
        dc = self.p.data_vc
        stu = min(1 << min(vc.peer_max_stu, vc.peer_bufsize, self.p.max_stu), K.VC_MAX_ST_PAYLOAD[dc],
                  K.VC_CREDIT_STU[dc])
        n = 0
        pos = start
        while pos < end:
            boundary = ((pos >> vc.peer_bufsize) + 1) << vc.peer_bufsize  # never cross a buffer
            stop = min(end, pos + stu, boundary)
            last = stop >= end
            try:
                payload: Buffer | FileSlice = (
                    FileSlice(x.buf, pos, stop, x) if self.defer_file_reads and isinstance(x.buf, FileBuffer)
                    else x.buf[pos:stop])
            except BufferGone as exc:
                self.counters["tx_buffer_gone"] += 1
                self._finish(x, False, f"source {exc}")
                return
            x.done_bytes += stop - pos
            final = last and x.done_bytes >= x.t_len
            flags = Flag.INTERRUPT | (Flag.LAST if last else 0) | (Flag.SEND_STATE if final and x.send_state else 0)
            d = self._hdr(vc, Op.DATA, flags=flags, dc=dc, param=n, mx=0, bufx=pos >> vc.peer_bufsize,
                          offset=pos & ((1 << vc.peer_bufsize) - 1), sync=vc.sync, b_num=h.b_num,
                          d_id=x.peer_id, s_id=x.xid)
            self._emit(vc, d, payload, dc=dc)
            n += 1
            pos = stop
            if last:
                break
        if x.done_bytes >= x.t_len and not x.send_state:
            self._finish(x, True)

    def sending(self, sl: FileSlice) -> bool:
        """Whether the transfer a deferred STU belongs to is still sending (the driver
        skips the STUs of one that ended)."""
        x = sl.owner
        return isinstance(x, Transfer) and x.vc.tx.get(x.xid) is x

    def source_failed(self, sl: FileSlice, reason: str, now: float) -> None:
        """The driver could not read a deferred STU: its transfer fails (END to the peer)."""
        self.now = now
        if self.sending(sl):
            assert isinstance(sl.owner, Transfer)
            self.counters["tx_buffer_gone"] += 1
            self._finish(sl.owner, False, f"source {reason}")

    def _on_data(self, vc: Vc, h: Header, rest: Bytes) -> None:
        if h.d_id in vc.regions:
            self._on_put(vc, h, rest)
            return
        op = vc.ops.get(h.d_id)
        if op is not None or h.d_id in vc.done_gids:
            self._on_get_data(vc, h, rest)
            return
        x = vc.rx.get(h.d_id)
        if x is None:
            self.counters[Drop.DATA_UNKNOWN_ID] += 1
            return
        pos = (h.bufx << self.p.bufsize) + h.offset
        b0, b1 = h.b_num << x.blocksize, (h.b_num + 1) << x.blocksize
        if not (b0 <= pos and pos + len(rest) <= min(b1, x.t_len)):
            self.counters[Drop.DATA_OUT_OF_BLOCK] += 1
            return
        try:
            x.buf[pos : pos + len(rest)] = rest
        except BufferGone as exc:
            self.counters["rx_buffer_gone"] += 1
            self._finish(x, False, f"destination {exc}")
            return
        x.done_bytes += len(rest)
        x.deadline = self.now + self.t.rx
        got = x.block_bytes.get(h.b_num, 0) + len(rest)
        x.block_bytes[h.b_num] = got
        if got >= self._block_len(x, h.b_num):
            x.outstanding -= 1
            while x.block_bytes.get(x.highest_block + 1, 0) >= self._block_len(x, x.highest_block + 1) and \
                    x.highest_block + 1 < self._nblocks(x):
                x.highest_block += 1
            self._grant(x, x.cts_req)
        if h.flags & Flag.SEND_STATE:
            self._rsr(vc, Header(Op.RS, d_id=x.xid, sync=h.sync, b_num=NO_ID), 2)
        if x.done_bytes >= x.t_len:
            self._finish(x, True)

    def _finish(self, x: Transfer, ok: bool, reason: str = "", *, by_peer: bool = False) -> None:
        vc = x.vc
        tab = vc.tx if x.sending else vc.rx
        if tab.pop(x.xid, None) is None:
            return
        x.state = TRANSFER_MACHINE.next(
            x.state, XEvent.COMPLETE if ok else XEvent.PEER_END if by_peer else XEvent.FAIL)
        if x.state is XState.FAILED and VC_MACHINE.allows(vc.state, VcEvent.USE):
            d_id, s_id = (x.peer_id, x.xid)
            vc.ends[(d_id, s_id)] = (self.now + self.t.end, 1)
            self._emit(vc, self._hdr(vc, Op.END, d_id=d_id, s_id=s_id))
        self._events.append(TransferDone(vc.vid, x.xid, ok, x.done_bytes if ok else 0, reason, not x.sending, x.buf))

    def _ra(self, vc: Vc, h: Header, reject: bool, reason: Reason | None = None) -> None:
        flags = Flag.INTERRUPT | (Flag.REJECT if reject else 0)
        opts = encode_options([error_code_option(reason)]) if reason else b""
        self._emit(vc, self._hdr(vc, Op.RA, flags=flags, d_id=h.s_id), opts)

    def _on_ra(self, vc: Vc, h: Header, rest: Bytes) -> None:
        reason = reason_of(decode_options(rest)) if rest else None
        why = Reason(reason).name.lower() if reason is not None and reason in Reason._value2member_map_ else "refused"
        if h.flags & Flag.REJECT:
            x = vc.tx.get(h.d_id) or vc.rx.get(h.d_id)
            if x is not None:
                self._finish(x, False, why, by_peer=True)
            elif h.d_id in vc.ops:
                kind = vc.ops.pop(h.d_id)[0]
                if kind is OpKind.RMR:
                    self._events.append(RegionReady(vc.vid, h.d_id, 0, 0, False, why))
                else:
                    self._events.append(OpDone(vc.vid, h.d_id, False, reason=why))
        else:
            x = vc.tx.get(h.d_id) or vc.rx.get(h.d_id)
            if x is not None:
                x.deadline = self.now + self.t.tx  # paused: the peer is waiting for a buffer

    # --- reads: RTR -> RTS ... ---------------------------------------------------------------------------
    def read(self, vid: int, buf: Buffer | FileBuffer, t_len: int, now: float) -> int | None:
        """Ask the peer to send ``t_len`` bytes into ``buf``; returns the transfer id."""
        self.now = now
        vc = self.vcs.get(vid)
        view = _view(buf)
        if vc is None or not VC_MACHINE.allows(vc.state, VcEvent.USE) or t_len > len(view):
            return None
        x = Transfer(self._id(), vc, view, t_len, sending=False, deadline=now + self.t.rx)
        vc.rx[x.xid] = x
        self._emit(vc, self._hdr(vc, Op.RTR, s_id=x.xid).with_t_len(t_len))
        return x.xid

    def _on_rtr(self, vc: Vc, h: Header, rest: Bytes) -> None:
        self._ra(vc, h, False)
        self._events.append(ReadRequested(vc.vid, h.s_id, h.t_len))

    # --- persistent memory ---------------------------------------------------------------------------------
    def expose(self, vid: int, buf: Buffer | FileBuffer) -> bool:
        """Offer ``buf`` as the region for the peer's next RMR."""
        vc = self.vcs.get(vid)
        if vc is None:
            return False
        vc.exposed.append(_view(buf))
        return True

    def request_region(self, vid: int, size: int, now: float) -> int | None:
        self.now = now
        vc = self.vcs.get(vid)
        if vc is None or not VC_MACHINE.allows(vc.state, VcEvent.USE):
            return None
        gid = self._id()
        vc.ops[gid] = (OpKind.RMR, now + self.t.tx, None, 1)
        self._emit(vc, self._hdr(vc, Op.RMR, s_id=gid).with_t_len(size))
        return gid

    def _on_rmr(self, vc: Vc, h: Header, rest: Bytes) -> None:
        if not vc.exposed or len(vc.exposed[0]) < h.t_len:
            self._ra(vc, h, True, Reason.NO_RESOURCES if not vc.exposed else Reason.OUT_OF_BOUNDS)
            return
        reg = Region(self._id(), vc.exposed.popleft())
        vc.regions[reg.rid] = reg
        mra = self._hdr(vc, Op.MRA, mx=0, bufx=0, offset=0, d_id=h.s_id, s_id=reg.rid).with_t_len(len(reg.buf))
        self._emit(vc, mra)

    def _on_mra(self, vc: Vc, h: Header, rest: Bytes) -> None:
        if vc.ops.pop(h.d_id, None) is None:
            self.counters[Drop.MRA_UNKNOWN] += 1
            return
        vc.remote_regions[h.s_id] = (h.mx, h.bufx, h.offset, h.t_len)
        self._events.append(RegionReady(vc.vid, h.d_id, h.s_id, h.t_len, True))

    def _region_pos(self, vc: Vc, rid: int, offset: int, n: int) -> int | None:
        r = vc.remote_regions.get(rid)
        if r is None or offset < 0 or offset + n > r[3]:
            return None
        return offset

    def put(self, vid: int, rid: int, offset: int, data: Buffer, now: float, *, ack: bool = True) -> int | None:
        """One DATA into the peer's region; with ``ack`` an RSR confirms it (OpDone)."""
        self.now = now
        vc = self.vcs.get(vid)
        data = memoryview(data).cast("B")
        if vc is None or not VC_MACHINE.allows(vc.state, VcEvent.USE) or self._region_pos(vc, rid, offset, len(data)) is None:
            return None
        gid = self._id()
        if ack:
            vc.ops[gid] = (OpKind.PUT, now + self.t.tx, None, 1)
        flags = Flag.INTERRUPT | Flag.LAST | (Flag.SEND_STATE if ack else 0)
        d = self._hdr(vc, Op.DATA, flags=flags, bufx=offset >> 32, offset=offset & 0xFFFFFFFF, sync=vc.sync,
                      d_id=rid, s_id=gid)
        self._emit(vc, Header(**{**d.__dict__, "dc": self.p.data_vc}), memoryview(data), dc=self.p.data_vc)
        return gid

    def _on_put(self, vc: Vc, h: Header, rest: Bytes) -> None:
        reg = vc.regions[h.d_id]
        off = (h.bufx << 32) | h.offset
        if off + len(rest) > len(reg.buf):
            self.counters[Drop.PUT_OUT_OF_BOUNDS] += 1
            return
        try:
            reg.buf[off : off + len(rest)] = rest
        except BufferGone:
            self.counters["rx_PUT_region_gone"] += 1
            if h.flags & Flag.SEND_STATE:
                self._ra(vc, h, True, Reason.OUT_OF_BOUNDS)
            return
        if h.flags & Flag.SEND_STATE:
            self._emit(vc, self._hdr(vc, Op.RSR, param=0, offset=NO_ID, sync=h.sync, b_num=NO_ID, d_id=h.s_id,
                                     s_id=h.d_id), slot=False)

    def get(self, vid: int, rid: int, offset: int, length: int, now: float, function: int = Function.GET) -> int | None:
        """GET ``length`` bytes (≤ 65535) or a FETCHOP (function 1-3, 8 bytes) from the peer's region."""
        self.now = now
        vc = self.vcs.get(vid)
        if function != Function.GET:
            length = 8
        if vc is None or not VC_MACHINE.allows(vc.state, VcEvent.USE) or not 0 < length < 65536 or \
                self._region_pos(vc, rid, offset, length) is None:
            return None
        gid = self._id()
        h = self._hdr(vc, Op.GET, function=function, param=length, bufx=offset >> 32, offset=offset & 0xFFFFFFFF,
                      d_id=rid, s_id=gid)
        vc.ops[gid] = (OpKind.FETCHOP if function else OpKind.GET, now + self.t.tx, h, 1)
        self._emit(vc, h)
        return gid

    def fetchop(self, vid: int, rid: int, offset: int, function: int, now: float) -> int | None:
        return self.get(vid, rid, offset, 8, now, function)

    def _on_get(self, vc: Vc, h: Header, rest: Bytes) -> None:
        reg = vc.regions.get(h.d_id)
        off = (h.bufx << 32) | h.offset
        if reg is None:
            self._ra(vc, h, True, Reason.UNKNOWN_ID)
            return
        if h.function == Function.COMPLETE:
            self._on_foc(vc, reg, off, h)
            return
        if off + h.param > len(reg.buf):
            self._ra(vc, h, True, Reason.OUT_OF_BOUNDS)
            return
        if h.function == Function.GET:
            try:
                data = bytes(reg.buf[off : off + h.param])
            except BufferGone:
                self.counters["rx_GET_region_gone"] += 1
                self._ra(vc, h, True, Reason.OUT_OF_BOUNDS)
                return
            self._data_to(vc, h.s_id, data)
            return
        word = reg.word(off)
        held = self.locks.get(word)
        if held is not None:  # a FETCHOP on a locked word waits its turn
            if held.vc is vc and held.gid == h.s_id:
                return  # duplicate of the op holding the lock
            self.lock_waiting.setdefault(word, deque()).append((vc, reg, h))
            return
        self._fetchop_start(vc, reg, off, h)

    def _fetchop_start(self, vc: Vc, reg: Region, off: int, h: Header) -> bool:
        try:
            value = bytes(reg.buf[off : off + 8])
        except BufferGone:
            self.counters["rx_FETCHOP_region_gone"] += 1
            self._ra(vc, h, True, Reason.OUT_OF_BOUNDS)
            return False
        self.locks[reg.word(off)] = Lock(vc, reg, off, h.s_id, h.function, self.now + self.t.foc, 1, value)
        self._data_to(vc, h.s_id, value)
        return True

    def _unlock(self, word: tuple[int, int]) -> None:
        del self.locks[word]
        q = self.lock_waiting.get(word)
        while q:
            vc, reg, h = q.popleft()
            if vc.vid in self.vcs and reg.rid in vc.regions and \
                    self._fetchop_start(vc, reg, (h.bufx << 32) | h.offset, h):
                break
        if q is not None and not q:
            del self.lock_waiting[word]

    def _on_foc(self, vc: Vc, reg: Region, off: int, h: Header) -> None:
        word = reg.word(off)
        lock = self.locks.get(word)
        if lock is None or lock.vc is not vc or lock.gid != h.s_id:
            self.counters[Drop.FOC_STALE] += 1
            return
        try:
            (value,) = struct.unpack(">Q", reg.buf[off : off + 8])
            value = {Function.INCREMENT: value + 1, Function.DECREMENT: value - 1,
                     Function.CLEAR: 0}[Function(lock.function)] % (1 << 64)
            reg.buf[off : off + 8] = struct.pack(">Q", value)
        except BufferGone:
            self.counters["rx_FOC_region_gone"] += 1  # the word stays as it was
        self._unlock(word)

    def _data_to(self, vc: Vc, gid: int, data: bytes) -> None:
        d = self._hdr(vc, Op.DATA, flags=Flag.INTERRUPT | Flag.LAST, sync=vc.sync, d_id=gid, s_id=0)
        self._emit(vc, d, data)

    def _on_get_data(self, vc: Vc, h: Header, rest: Bytes) -> None:
        gid = h.d_id
        if gid in vc.done_gids:  # our FOC was lost or late: send it again
            self._emit(vc, vc.done_gids[gid])
            return
        kind, _deadline, req, _tries = vc.ops.pop(gid)
        if kind is OpKind.FETCHOP:
            foc = Header(**{**req.__dict__, "function": Function.COMPLETE})
            vc.done_gids[gid] = foc
            if len(vc.done_gids) > 1024:
                vc.done_gids.pop(next(iter(vc.done_gids)))
            self._emit(vc, foc)
            self._events.append(OpDone(vc.vid, gid, True, value=struct.unpack(">Q", rest[:8])[0]))
        else:
            self._events.append(OpDone(vc.vid, gid, True, data=bytes(rest)))

    # --- END -------------------------------------------------------------------------------------------
    def end(self, vid: int, xid: int, now: float) -> bool:
        """Abort a transfer or release a remote region; the VC stays."""
        self.now = now
        vc = self.vcs.get(vid)
        if vc is None:
            return False
        x = vc.tx.get(xid) or vc.rx.get(xid)
        if x is not None:
            self._finish(x, False, "ended locally")
            return True
        if xid in vc.remote_regions:
            del vc.remote_regions[xid]
            vc.ends[(xid, 0)] = (now + self.t.end, 1)
            self._emit(vc, self._hdr(vc, Op.END, d_id=xid, s_id=0))
            return True
        return False

    def _on_end(self, vc: Vc, h: Header, rest: Bytes) -> None:
        x = vc.rx.get(h.d_id) or vc.tx.get(h.d_id)
        if x is not None:
            self._finish(x, False, "ended by peer", by_peer=True)
        vc.regions.pop(h.d_id, None)
        self._emit(vc, self._hdr(vc, Op.END_ACK, d_id=h.s_id, s_id=h.d_id))

    def _on_end_ack(self, vc: Vc, h: Header, rest: Bytes) -> None:
        vc.ends.pop((h.s_id, h.d_id), None)

    # --- timers -----------------------------------------------------------------------------------------
    def timer(self) -> float:
        t = self.now + 3600.0
        for vc in self.vcs.values():
            if vc.state in (State.RC_SENT, State.RD_SENT, State.DA_SENT):
                t = min(t, vc.deadline)
            for x in itertools.chain(vc.tx.values(), vc.rx.values()):
                t = min(t, x.deadline)
            for _, deadline, *_ in vc.ops.values():
                t = min(t, deadline)
            for deadline, _ in vc.ends.values():
                t = min(t, deadline)
            if vc.rs_out is not None:
                t = min(t, vc.rs_out + SLOT_RS_EVERY)
        for lock in self.locks.values():
            t = min(t, lock.deadline)
        return t

    def handle_timer(self, now: float) -> None:
        self.now = now
        for vc in list(self.vcs.values()):
            self._vc_timer(vc, now)
        for word, lock in list(self.locks.items()):
            if now < lock.deadline:
                continue
            if lock.tries >= self.t.foc_tries or lock.vc.vid not in self.vcs:  # give up: word unchanged
                self.counters["fetchop_abandoned"] += 1
                self._unlock(word)
            else:
                lock.tries += 1
                lock.deadline = now + self.t.foc
                self._data_to(lock.vc, lock.gid, lock.value)
                self.counters["fetchop_data_resent"] += 1

    def _vc_timer(self, vc: Vc, now: float) -> None:
        if vc.state is not State.CONNECTED and now >= vc.deadline:
            if vc.state is State.RC_SENT:
                if vc.tries >= self.t.rc_tries:
                    self._move(vc, VcEvent.GIVE_UP)
                    self._free(vc, "connect timed out")
                    return
                vc.tries += 1
                vc.deadline = now + self.t.rc_retry
                self._send_rc(vc)
            elif vc.tries >= self.t.teardown_tries:
                self._move(vc, VcEvent.GIVE_UP)
                self._free(vc, "teardown timed out")
                return
            else:
                vc.tries += 1
                vc.deadline = now + self.t.teardown
                op = Op.RD if vc.state is State.RD_SENT else Op.DA
                self._emit(vc, self._hdr(vc, op, offset=vc.local_key), slot=False)
            return
        if vc.rs_out is not None and now >= vc.rs_out + SLOT_RS_EVERY:
            self.counters["slot_wait_rs_resent"] += 1  # no RSR yet: ask again every second
            vc.rs_out = now
            self._emit(vc, self._hdr(vc, Op.RS, d_id=NO_ID, sync=vc.sync), slot=False)
        for x in list(itertools.chain(vc.tx.values(), vc.rx.values())):
            if now >= x.deadline:
                self.counters["transfer_timeout"] += 1
                self._finish(x, False, "timed out (peer silent)")
        for gid, (kind, deadline, _req, _tries) in list(vc.ops.items()):
            if now >= deadline:
                vc.ops.pop(gid)
                self.counters[kind.timeout_counter] += 1
                if kind is OpKind.RMR:
                    self._events.append(RegionReady(vc.vid, gid, 0, 0, False, "timed out"))
                else:
                    self._events.append(OpDone(vc.vid, gid, False, reason="timed out"))
        for key, (deadline, tries) in list(vc.ends.items()):
            if now >= deadline:
                if tries >= self.t.end_tries:
                    del vc.ends[key]
                else:
                    vc.ends[key] = (now + self.t.end, tries + 1)
                    self._emit(vc, self._hdr(vc, Op.END, d_id=key[0], s_id=key[1]))

    # --- status ---------------------------------------------------------------------------------------------
    def status_table(self) -> list[dict[str, Any]]:
        from daemons.wire.ula import format_ula

        return [{"vc": vc.vid, "peer": format_ula(vc.peer), "state": vc.state.value, "uport": vc.uport,
                 "local_port": vc.local_port, "peer_port": vc.peer_port, "peer_slots": vc.peer_slots,
                 "our_slots_left": vc.our_slots_left, "sending": len(vc.tx), "receiving": len(vc.rx),
                 "regions": len(vc.regions), "remote_regions": len(vc.remote_regions), "pending_ops": len(vc.ops),
                 "region_ids": sorted(vc.remote_regions),
                 "transfers": [{"xid": x.xid, "dir": "tx" if x.sending else "rx", "t_len": x.t_len,
                                "done": x.done_bytes} for x in itertools.chain(vc.tx.values(), vc.rx.values())]}
                for vc in self.vcs.values()]
