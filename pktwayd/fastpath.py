"""The compiled fast path (``pktwayd._pwfast``) wired to the trio drivers.

:class:`RouterFast`: a pktwayd whose two halves share the process and sit on gsnd ULP
sockets (PacketWay dialect).  Each half's burst of ULP frames goes through the C loop,
which forwards plain L3 packets to nodes on the other half's SAN itself and hands every
other frame to :meth:`daemon.Half.on_frame` unchanged.  The table it forwards by is
derived from the two engines (:func:`router_table`) after every engine action, so it
never says more than the engines would do.

:class:`IpFast`: ``pktway ip`` on gsnd's ULP socket: pw0's packets to configured peers,
and theirs to me, go between the TUN device and the socket in C; the rest (resolution,
control packets, groups, redirects, MTU errors) through :class:`~pktwayd.ipnode.IpNode`.

Either keeps the counters the Python path would (same names).  ``PKTWAY_FASTPATH=0`` in
the environment leaves the Python path alone in charge (benches compare the two)."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import trio

from daemons.constants import ULP_MAX_PAYLOAD
from daemons.io.tap import READ_BYTES, Tap
from daemons.ulpclient import AsyncUlpClient, UlpError
from daemons.wire.ulp import HEADER, Frame

from ._pwfast import Ip, Router
from .constants import (ADDR_HEY_YOU, ETHERTYPE_PKTWAY, FAST_BURST_BYTES, FAST_BURST_FRAMES, FAST_ENV, FAST_PEERS_MAX,
                        FAST_HELD_POLL_S, FAST_LINGER_US, FAST_ROOM_WAIT_US, FAST_SLICE_US)
from .engine import Engine
from .ipnode import IpNode, is_group

if TYPE_CHECKING:
    from .daemon import Half

FRAME_MAX = ULP_MAX_PAYLOAD + HEADER.size  # the longest ULP frame gsnd sends; a longer one is dropped, counted


def enabled() -> bool:
    """The fast path runs unless ``PKTWAY_FASTPATH=0``."""
    return os.environ.get(FAST_ENV, "1") != "0"


def _errno_name(code: int) -> str:
    return errno.errorcode.get(code, str(code))


def _oserror(code: int) -> OSError:
    return OSError(code, os.strerror(code))


def _handed_up(slow: list[bytes], rerr: int, eof: bool) -> list[Frame]:
    """What a burst left for Python: the frames C did not take, decoded; a read error or
    gsnd's end of the socket is raised instead (the session then ends, as on the Python path)."""
    frames = [Frame.decode(f) for f in slow]
    if rerr:
        raise _oserror(rerr)
    if eof:
        raise UlpError("gsnd closed the ULP socket")
    return frames


def _count_errors(counters, errs: list[int]) -> None:
    """SEND frames the socket refused (not for want of room): dropped, by errno."""
    for code in errs:
        counters[f"tx_error_{_errno_name(code)}"] += 1


def _queue(client: AsyncUlpClient, frames: list[bytes]) -> None:
    """SEND frames the socket had no room for: the client's backlog, as send_nowait does."""
    client.queue_frames(frames)


# --- the router ------------------------------------------------------------------------------
def router_table(a: Engine, b: Engine) -> list[tuple[int, bytes, int]]:
    """(destination, ULA on b's SAN, MTU in words, 0 = none) of every node a packet from a's
    SAN reaches by a forwarding it to its twin b, and b sending it natively; [] while b does
    not count its twin alive (the first packet would bring it up: the engines' business)."""
    if not b.twin_alive:
        return []
    out = []
    for d in b.hr.entry:
        if d in (a.me, b.me, ADDR_HEY_YOU) or is_group(d):
            continue
        hop_a, hop_b, route = a._first_hop(d), b._first_hop(d), b.route_of(d)
        if hop_a is None or hop_a[0] != "twin" or hop_b is None or hop_b[0] != "local" \
                or route is None or len(route) != 6:
            continue
        limits = [m for m in (hop_a[1], hop_b[1]) if m]
        out.append((d, route, min(limits) if limits else 0))
    return sorted(out)


class RouterFast:
    """Both directions of a half-router pair (halves[0] <-> halves[1])."""

    def __init__(self, halves: Sequence[Half]) -> None:
        self.halves = halves
        self.loops: list[Router | None] = [None, None]
        self.tables: list[tuple] = [(), ()]
        self._held = [trio.Event(), trio.Event()]  # set when direction i's loop holds frames

    def attach(self) -> None:
        """A half's client changed (connected, or None: gone): the loops are rebuilt (what
        one held for want of room is lost with it, counted)."""
        for i, loop in enumerate(self.loops):
            if loop is not None and loop.held():
                self.halves[1 - i].engine.counters["tx_dropped_reconnect"] += loop.held()
        self.loops = [None, None]
        self.refresh()

    def _loop(self, i: int) -> Router | None:
        src, dst = self.halves[i].client, self.halves[1 - i].client
        if not isinstance(src, AsyncUlpClient) or not isinstance(dst, AsyncUlpClient):
            return None
        loop = self.loops[i]
        if loop is None:
            loop = self.loops[i] = Router(src.sock, dst.sock, ETHERTYPE_PKTWAY, FRAME_MAX, FAST_BURST_BYTES)
            self.tables[i] = ()
        return loop

    def refresh(self) -> None:
        """Follow the engines: the tables as they now are (pushed to C when they changed)."""
        for i in (0, 1):
            loop = self._loop(i)
            if loop is None:
                continue
            a, b = self.halves[i].engine, self.halves[1 - i].engine
            table = (tuple(router_table(a, b)), tuple(sorted(a.routers)))
            if table != self.tables[i]:
                loop.set_table(*table)
                self.tables[i] = table

    def _count(self, i: int, sent: int, errs: list[int]) -> None:
        """Counters of what direction i's loop sent (or the socket refused), as the engines
        and Half.act count a packet forwarded across the pair."""
        n = sent + len(errs)
        if n:
            a, b = self.halves[i].engine, self.halves[1 - i].engine
            a.counters["l3_forwarded"] += n
            b.counters["l3_forwarded"] += n
            b.counters["tx_packets"] += sent
            b.twin_heard = trio.current_time()
            _count_errors(b.counters, errs)  # the other half's socket: its own session sees it end

    def drain(self, i: int) -> Callable[[AsyncUlpClient], list[Frame]]:
        """What ulp_session calls instead of ``client.drain()`` for half i."""

        def drain(client: AsyncUlpClient) -> list[Frame]:
            loop = self._loop(i) if client is self.halves[i].client else None
            if loop is None or client._ready:
                return client.drain()
            sent, slow, errs, eof, rerr, oversized, held = loop.burst(FAST_BURST_FRAMES, FAST_ROOM_WAIT_US,
                                                                   FAST_LINGER_US, FAST_SLICE_US)
            self._count(i, sent, errs)
            if oversized:
                self.halves[i].engine.counters["rx_oversized"] += oversized
            if held:  # no room on the way out: nothing more is read until they went (gsnd holds it)
                self._held[i].set()
            return _handed_up(slow, rerr, eof)

        return drain

    async def send_held(self, i: int) -> None:
        """What direction i's loop held goes out even while nothing comes in to prompt a
        burst (polled: waiting for room on the out socket is its own client's business)."""
        while True:
            await self._held[i].wait()
            self._held[i] = trio.Event()
            loop = self.loops[i]
            while loop is not None and loop.held():
                await trio.sleep(FAST_HELD_POLL_S)
                if loop is not self.loops[i]:
                    break  # rebuilt: attach counted what it held
                sent, errs, _ = Router.send_held(loop)
                self._count(i, sent, errs)


# --- pw0 -----------------------------------------------------------------------------------------
def ip_peers(core: IpNode) -> list[tuple[bytes, int, int]]:
    """(packed IP, PacketWay address, route MTU in bytes, 0 = none) of the peers the compiled
    path serves: the configured unicast ones, while no redirect is in force; [] otherwise."""
    if core.redirects or len(core.static_packed) > FAST_PEERS_MAX:
        return []
    out = []
    for ip, a in core.static_packed.items():
        limit = core.route_mtu.get(a)
        if limit == 0:  # nothing fits: every packet is the Python path's (an ICMP error)
            continue
        out.append((ip, a, limit or 0))
    return sorted(out)


class IpFast:
    """pw0 <-> gsnd's ULP socket for one :class:`~pktwayd.ipnode.IpNode`."""

    def __init__(self, core: IpNode) -> None:
        self.core = core
        self.router_route: bytes | None = None  # the router the loop sends to: the core's, when it has one
        self.loop: Ip | None = None
        self.client: AsyncUlpClient | None = None
        self.tun: Tap | None = None
        self.peers: list = []

    def attach(self, tun: Tap | None, client: AsyncUlpClient | None) -> None:
        self.tun = tun
        self.client = client if isinstance(client, AsyncUlpClient) else None
        self._build()

    def _build(self) -> None:
        """A loop towards the core's router now (none while it has none: HRTO still asking)."""
        self.loop, self.peers = None, []
        self.router_route = self.core.router
        if self.tun is not None and self.client is not None and self.router_route is not None:
            self.loop = Ip(self.tun.fd, self.client.sock, self.core.addr, self.router_route, ETHERTYPE_PKTWAY,
                           FRAME_MAX, FAST_BURST_BYTES, READ_BYTES)
        self.refresh()

    def refresh(self) -> None:
        if self.core.router != self.router_route:  # HRTO chose another router, or lost it
            self._build()
            return
        if self.loop is None:
            return
        peers = ip_peers(self.core)
        if peers != self.peers:
            self.loop.set_peers(peers)
            self.peers = peers

    def tun_burst(self, tun: Tap) -> list[bytes] | None:
        """pw0's waiting packets: those to peers sent from C; the others returned for the
        IpNode (None: the compiled path is not in use now, drain pw0 as usual)."""
        client = self.client
        if self.loop is None or client is None or client._backlog:
            return None
        n4, n6, slow, blocked, errs, rerr = self.loop.tx_burst(FAST_BURST_FRAMES, FAST_ROOM_WAIT_US)
        c = self.core.counters
        c["tx_ipv4"] += n4
        c["tx_ipv6"] += n6
        if rerr:
            tun.counters[f"read_{_errno_name(rerr)}"] += 1
        if blocked:
            c["tx_queued_no_room"] += len(blocked)
            _queue(client, blocked)
        _count_errors(c, errs)
        if errs:  # my own ULP socket: the session ends (and reconnects), as on the Python path
            raise _oserror(errs[0])
        return slow

    def drain(self, client: AsyncUlpClient) -> list[Frame]:
        """What ulp_session calls instead of ``client.drain()``."""
        if self.loop is None or client is not self.client or client._ready:
            return client.drain()
        n4, n6, slow, eof, rerr, full, werrs, oversized = self.loop.rx_burst(FAST_BURST_FRAMES)
        c = self.core.counters
        if oversized:
            c["rx_oversized"] += oversized
        c["rx_ipv4"] += n4
        c["rx_ipv6"] += n6
        if n4 or n6:  # routed packets the core never saw: the router is alive (no needless WRU probe)
            self.core.router_heard = trio.current_time()
        tun_counters = self.tun.counters if self.tun is not None else c
        if full:
            tun_counters["tx_dropped_tap_full"] += full
        for code in werrs:
            tun_counters[f"tx_error_{_errno_name(code)}"] += 1
        return _handed_up(slow, rerr, eof)

