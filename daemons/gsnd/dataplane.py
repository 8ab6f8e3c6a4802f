"""gsnd's data plane: IP between the TAP and the cable without Python per frame.

The work is in C (daemons/_pump.h, on the CLink): ``tap_pump`` reads frames from the
TAP and queues them as Messages on VC1; ``rx_pump`` receives the cable's datagrams
(UDP GRO), runs the link, reassembles every VC and writes IP frames to the TAP;
``dp_send`` sends the link's datagrams (UDP GSO).  ``dp_run`` (daemons/_loop.h) is the
loop gsnd runs: it polls TAP, cable socket and trio's own epoll descriptor with the GIL
released, pumps and flushes in C, and returns only when Python has work (link events,
a ready control or ULP socket, the retransmission timer, a refused send, the caller's
deadline).  This module is the narrow interface the trio control plane uses: attach,
``run`` (or one call per batch), ``wait_readable`` while idle, the counters.

The ULP clients are served here too (daemons/_ulploop.h; ``ulp_client``/``ulp_forget``
keep its registry): ``dp_run`` reads their sockets and queues their SENDs, and writes
RECV frames to a client that alone binds a Message's EtherType; other frames come up
as UlpFrameIn/UlpClosed events.  What still goes up to Python: Messages for several
clients, for a client the Delivery holds, IP Messages a ULP client is bound to, drop
notices, ADMIN, link up/down, timers.  A cable with a key (an authenticated cable) is sealed and opened in
C too (daemons/_cableauth.h, shared with the transport's Python path).
"""

from __future__ import annotations

__all__ = ["CONTROL", "DEADLINE", "EVENTS", "IDLE", "PUMP_DATAGRAMS", "PUMP_FRAMES", "REASONS", "SEND", "TIMER",
           "DataPlane", "Ran", "usable"]  # the loop's reasons are the compiled link's (daemons/link/clink.py)

import select
from collections import Counter
from typing import NamedTuple

import trio

from .. import _link
from ..link.clink import CONTROL, DEADLINE, EVENTS, IDLE, REASONS, SEND, TIMER, UlpClosed, UlpFrameIn
from ..io.trioprivate import trio_epoll_fd
from ..constants import ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ULP_MAX_PAYLOAD

PUMP_DATAGRAMS = 64  # datagrams per rx_pump call (io/udp.py drains as many per wake-up)
PUMP_FRAMES = 64  # frames per tap_pump call (io/tap.py drains as many)
_WANTS = ((ETHERTYPE_IPV4, 1), (ETHERTYPE_IPV6, 2), (ETHERTYPE_ARP, 4))


_link.setup_ulp(UlpFrameIn, UlpClosed)  # the event types the loop builds for them




class Ran(NamedTuple):
    """What one ``DataPlane.run`` did."""
    reason: int  # IDLE ... SEND
    datagrams: int  # received from the cable
    frames: int  # read from the TAP

    @property
    def idle(self) -> bool:
        """Nothing moved until the deadline: wait in trio (wait_readable) instead."""
        return self.reason == IDLE

    @property
    def control(self) -> bool:
        """A descriptor of trio's was ready: its task must run before the next ``run``."""
        return self.reason == CONTROL


def usable(transport) -> bool:
    """The data plane runs over a UDP cable to a known peer, with a key or without one
    (a keyed cable is sealed and opened in the loop, daemons/_loopseal.h), with a TAP
    or without one (then every Message it reassembles goes up to the ULP clients)."""
    return getattr(transport, "sock", None) is not None and transport.peer is not None


class DataPlane:
    def __init__(self, ep, transport, tap, *, mtu: int, arp: bool, wants) -> None:
        """``wants(ethertype) -> bool``: a ULP client is bound to it (Python delivers those)."""
        self.link, self.transport, self.tap = ep.link, transport, tap
        self.wants = wants
        self.link.dp_attach(tap.fd if tap is not None else -1, transport.sock.fileno(), tuple(transport.peer), mtu, arp,
                            b"".join(sorted(ep.aliases)), ULP_MAX_PAYLOAD, vnet=getattr(tap, "vnet", False))
        self.set_ula(ep.ula)
        # a keyed cable: the transport's CableAuthCore seals and opens here too (one
        # counter, one replay window for both paths)
        self.auth = getattr(transport, "auth", None)
        if self.auth is not None:
            self.link.dp_auth(self.auth.core)
        # readable when the TAP or the cable is: what run()'s caller waits on in trio while idle
        self._ready = select.epoll()
        if tap is not None:
            self._ready.register(tap.fd, select.EPOLLIN)
        self._ready.register(transport.sock.fileno(), select.EPOLLIN)
        self._clients: set[int] = set()  # ULP client fds in _ready
        self.trio_fd = trio_epoll_fd()
        self.reasons: Counter[str] = Counter()  # why run() returned, for the loop's tests and benches

    def close(self) -> None:
        self._ready.close()

    async def wait_readable(self) -> None:
        """Until the TAP, the cable socket or a ULP client has something (level-triggered)."""
        await trio.lowlevel.wait_readable(self._ready.fileno())

    def run(self, now: float, deadline: float, high_water: int, trio_fd: int) -> Ran:
        """The data plane in C until Python has work or ``deadline`` (trio time) passes;
        the link's datagrams are sent there.  What the kernel refuses goes to the
        transport's Python path (it re-cuts, learns and counts)."""
        wants = self.wants
        self.link.dp_wants(sum(bit for et, bit in _WANTS if wants(et)))
        t = self.transport
        reason, got, frames, sent, sends, segs, biggest, refused = self.link.dp_run(
            now, deadline, trio_fd, high_water, t.gso)
        self._count(sent, sends, segs, biggest)
        if refused:
            t.send_many(refused)
        self.reasons[REASONS[reason]] += 1
        return Ran(reason, got, frames)

    def ulp_client(self, fd: int, ethertypes, privileged: bool, direct: bool) -> None:
        """Add or update a ULP client the data plane serves: it reads the client's frames
        (UlpFrameIn and UlpClosed come up as link events), and writes RECV frames to it
        while ``direct`` (C clears that when a write is refused)."""
        self.link.ulp_client(fd, b"".join(et.to_bytes(2, "big") for et in sorted(ethertypes)), privileged, direct)
        if fd not in self._clients:
            self._clients.add(fd)
            self._ready.register(fd, select.EPOLLIN)

    def ulp_forget(self, fd: int) -> None:
        self.link.ulp_forget(fd)
        if fd in self._clients:
            self._clients.discard(fd)
            self._ready.unregister(fd)

    def set_ula(self, ula: bytes | None) -> None:
        self.link.dp_ula(ula)

    def rx(self, now: float) -> int:
        """One batch from the cable (LinkRunner's pump); how many datagrams it received."""
        wants = self.wants
        self.link.dp_wants(sum(bit for et, bit in _WANTS if wants(et)))
        return self.link.rx_pump(now, PUMP_DATAGRAMS)

    def tap_batch(self, high_water: int) -> int:
        """Frames from the TAP onto VC1 until it is empty or VC1 holds ``high_water``."""
        return self.link.tap_pump(PUMP_FRAMES, high_water)

    def send_many(self, datagrams: list) -> None:
        """The link's datagrams to the peer (GSO runs) in C; what the kernel refuses
        (EMSGSIZE after a path MTU drop, no GSO, a full socket) goes to the Python path,
        which re-cuts, learns and counts."""
        t = self.transport
        sent, _err, sends, segs, biggest = self.link.dp_send(datagrams, t.gso)
        self._count(sent, sends, segs, biggest)
        if sent < len(datagrams):
            t.send_many(datagrams[sent:])

    def _count(self, sent: int, sends: int, segs: int, biggest: int) -> None:
        t = self.transport
        c = t.counters
        if sent:
            c["tx_datagrams"] += sent
        if sends:
            c["tx_gso_sends"] += sends
            c["tx_gso_datagrams"] += segs
        if biggest > t.max_sent:
            t.max_sent = biggest

    def counters(self, group: str, python: Counter | dict) -> dict:
        """``python`` (the Python path's counters of ``group``) plus the data plane's."""
        out = Counter(python)
        out.update(self.link.dp_counters().get(group, {}))
        if group == "cable" and self.auth is not None:
            out.update(self.auth.core.dp_counts())  # its opens (rx_auth_*) and seals
        return dict(out)
