"""UDP cable transport: one non-blocking socket, drained in a loop per wake-up."""

from __future__ import annotations

import errno
import socket
import struct
import sys
import time
from collections import Counter
from collections.abc import Callable

import trio

from ..runtime.oserrors import count_udp_error, errno_name
from ..constants import AUTH_TRAILER_BYTES, MP_BYTES, SHIM_BYTES, SOCKET_BUFFER_BYTES
from ..wire.cableauth import CompiledCableAuth, direction
from . import pmtu
from .pmtu import DEFAULT_MTU

RECV_BYTES = 65536
GSO_MAX_SEGMENTS = 64  # UDP_MAX_SEGMENTS on every kernel that has UDP_SEGMENT
GSO_MAX_BYTES = 65507  # one sendmsg is one (pre-segmentation) UDP datagram
_GRO_CMSG_SPACE = socket.CMSG_SPACE(4)
_U16 = struct.Struct("=H")
_FORCE = {socket.SO_RCVBUF: 33, socket.SO_SNDBUF: 32}  # SO_RCVBUFFORCE, SO_SNDBUFFORCE (Linux)


def resolve(hostport: str) -> tuple[str, int]:
    """``host:port`` (IPv4 or ``[v6]:port``) to a socket address; ValueError if malformed."""
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{hostport!r} is not host:port")
    host = host.strip("[]") or "0.0.0.0"
    try:
        info = socket.getaddrinfo(host, int(port), type=socket.SOCK_DGRAM, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        raise ValueError(f"{hostport!r}: {host!r} is not a numeric IP address") from None
    addr = info[0][4]
    return str(addr[0]), int(addr[1])


def port_map(specs, max_port: int, what: str) -> dict[int, tuple[str, int]]:
    """``--port N=HOST:PORT`` options (pktway-san, snet-router) as {N: address}; a ValueError
    naming the bad option (N outside 0..max_port, a bad address, a port or address given
    twice, none at all: "a ``what`` needs at least one port")."""
    ports: dict[int, tuple[str, int]] = {}
    for spec in specs:
        number, sep, where = spec.partition("=")
        if not sep or not number.isdigit() or not 0 <= int(number) <= max_port:
            raise ValueError(f"--port {spec!r}: expected N=HOST:PORT with N in 0..{max_port}")
        try:
            addr = resolve(where)
        except ValueError as exc:
            raise ValueError(f"--port {spec!r}: {exc}") from None
        if int(number) in ports or addr in ports.values():
            raise ValueError(f"--port {spec!r}: port or address given twice")
        ports[int(number)] = addr
    if not ports:
        raise ValueError(f"--port: a {what} needs at least one cabled port")
    return ports


class UdpTransport:
    """One cable's UDP socket.

    Datagrams leave with Don't Fragment set; ``max_mps`` (micropackets per datagram)
    follows the MTU of the path to the peer (``mtu``: a configured ceiling, else the
    kernel's path MTU) and drops when the kernel says a datagram no longer fits
    (EMSGSIZE).  Where the kernel has UDP GSO, a run of equal-size datagrams to the
    peer leaves in one sendmsg (UDP_SEGMENT); with UDP GRO, coalesced receives are
    split back into datagrams (UDP_GRO's segment size).  Every drop is counted.

    With a ``key`` the cable is authenticated (daemons/wire/cableauth.py): every
    datagram leaves sealed -- each GSO segment is its own datagram with its own
    counter and MAC -- and only datagrams that open are handed on; the trailer is
    counted in ``max_mps``, so sealed datagrams still fit the path.
    """

    def __init__(self, local: tuple[str, int], peer: tuple[str, int] | None, mtu: int | None = None,
                 on_mtu: Callable[[dict], None] | None = None, key: bytes | None = None) -> None:
        if key is not None and peer is None:
            raise ValueError("a keyed cable needs its peer's address")
        self.family = socket.AF_INET6 if ":" in local[0] else socket.AF_INET
        self.sock = socket.socket(self.family, socket.SOCK_DGRAM)
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            self.sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER_BYTES)
            try:  # beyond net.core.{r,w}mem_max when we are privileged
                self.sock.setsockopt(socket.SOL_SOCKET, _FORCE[opt],
                                     SOCKET_BUFFER_BYTES)
            except OSError:
                pass
        self.sock.bind(local)
        self.sock.setblocking(False)
        self.local = local
        self.peer = peer
        self.counters: Counter[str] = Counter()
        self.auth: CompiledCableAuth | None = None
        self.overhead = 0  # bytes each datagram carries beyond the link's (the auth trailer)
        if key is not None and peer is not None:  # (a key without a peer was refused above)
            # the session: this cable's opening time, newer than any earlier run's
            self.auth = CompiledCableAuth(key, direction(self.sock.getsockname()[:2], peer),
                                  max(0, time.clock_gettime_ns(time.CLOCK_REALTIME)), counters=self.counters)
            self.overhead = AUTH_TRAILER_BYTES
        self.on_mtu = on_mtu
        try:
            pmtu.set_dont_fragment(self.sock)
        except OSError:
            self.counters["dont_fragment_unsupported"] = 1
        self.mtu_configured = mtu
        self.mtu, self.mtu_source = DEFAULT_MTU, "default"
        self.max_mps = 1
        self.max_sent = 0  # the largest datagram sent, bytes (UDP payload)
        self.gso = peer is not None  # until the kernel says otherwise
        self.gro = False
        try:
            self.sock.setsockopt(pmtu.SOL_UDP, pmtu.UDP_GRO, 1)
            self.gro = True
        except OSError:
            self.counters["gro_unsupported"] = 1
        self.refresh_mtu()

    # --- path MTU -------------------------------------------------------------------
    def refresh_mtu(self) -> bool:
        """Re-read the path MTU; adapt ``max_mps``; True (and ``on_mtu``) if it changed."""
        if self.peer is None:
            mtu, source = self.mtu_configured or DEFAULT_MTU, "configured" if self.mtu_configured else "default"
        else:
            mtu, source = pmtu.path_mtu(self.peer, self.local[0])
            if self.mtu_configured is not None and self.mtu_configured <= mtu:
                mtu, source = self.mtu_configured, "configured"
        return self._set_mtu(mtu, source)

    def _set_mtu(self, mtu: int, source: str) -> bool:
        old = self.mtu, self.max_mps
        self.mtu, self.mtu_source = mtu, source
        self.max_mps = pmtu.max_mps_for(mtu, self.family, self.overhead)
        if (self.mtu, self.max_mps) == old:
            return False
        if self.on_mtu is not None:
            self.on_mtu(self.status())
        return True

    @property
    def max_datagram(self) -> int:
        return SHIM_BYTES + self.max_mps * MP_BYTES + self.overhead

    def status(self) -> dict:
        return {"auth": "on" if self.auth is not None else "off", "mtu": self.mtu, "mtu_source": self.mtu_source,
                "max_mps": self.max_mps, "max_datagram": self.max_datagram, "max_sent": self.max_sent,
                "gso": self.gso, "gro": self.gro}

    # --- receive --------------------------------------------------------------------
    async def wait_readable(self) -> None:
        await trio.lowlevel.wait_readable(self.sock)

    def drain(self, limit: int = 64) -> list[bytes]:
        """Up to about ``limit`` datagrams (GRO-coalesced receives come back split), so
        that a wake-up's acks and forwarding wait for a bounded amount of work."""
        out: list[bytes] = []
        gro = self.gro
        auth = self.auth
        sock = self.sock
        while len(out) < limit:
            try:
                if gro:
                    data, anc, flags, addr = sock.recvmsg(RECV_BYTES, _GRO_CMSG_SPACE)
                else:
                    data, addr = sock.recvfrom(RECV_BYTES)
            except BlockingIOError:
                break
            except OSError as exc:  # ICMP errors from a previous send surface here
                count_udp_error(self.counters, exc, prefix="rx_error_")
                continue
            if self.peer is not None and addr[:2] != self.peer:
                self.counters["rx_foreign_datagram"] += 1
                continue
            if gro:
                if flags & socket.MSG_TRUNC:
                    self.counters["rx_truncated"] += 1
                    continue
                seg = 0
                for level, kind, value in anc:
                    if level == pmtu.SOL_UDP and kind == pmtu.UDP_GRO:
                        seg = int.from_bytes(value[:4], sys.byteorder)
                if 0 < seg < len(data):
                    self.counters["rx_gro_coalesced"] += 1
                    segs = [data[i: i + seg] for i in range(0, len(data), seg)]
                    if auth is not None:
                        segs = [d for d in map(auth.open, segs) if d is not None]
                    out.extend(segs)
                    continue
            if auth is not None:
                opened = auth.open(data)
                if opened is not None:
                    out.append(opened)
                continue
            out.append(data)
        if out:
            self.counters["rx_datagrams"] += len(out)
        return out

    # --- send -----------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        self.send_many((data,))

    def send_many(self, datagrams) -> None:
        """Send in order; runs of equal-size datagrams (the last may be shorter) go as
        one GSO sendmsg when the kernel has UDP_SEGMENT."""
        if self.auth is not None:
            datagrams = self.auth.seal_many(list(datagrams))
        self.send_sealed(datagrams)

    def send_sealed(self, datagrams) -> None:
        """``send_many`` of datagrams sealed already (a keyed cable), or plain ones."""
        n = len(datagrams)
        peer = self.peer
        if peer is None:
            self.counters["tx_no_peer"] += n
            return
        self.counters["tx_datagrams"] += n
        i = 0
        while i < n:
            size = len(datagrams[i])
            j, total = i + 1, size
            if self.gso:
                while (j < n and j - i < GSO_MAX_SEGMENTS and total + len(datagrams[j]) <= GSO_MAX_BYTES
                       and len(datagrams[j]) <= size):
                    total += len(datagrams[j])
                    j += 1
                    if len(datagrams[j - 1]) < size:
                        break  # only the last segment may be shorter
            if j - i > 1:
                self._send_gso(datagrams[i:j], size, peer)
            else:
                self._send_one(datagrams[i], peer)
            i = j

    def _send_gso(self, run, size: int, peer: tuple[str, int]) -> None:
        try:
            self.sock.sendmsg(run, [(pmtu.SOL_UDP, pmtu.UDP_SEGMENT, _U16.pack(size))], 0, peer)
        except BlockingIOError as exc:
            count_udp_error(self.counters, exc, len(run))
            return
        except OSError as exc:
            if exc.errno in (errno.EMSGSIZE, errno.EINVAL) and (self.refresh_mtu() or size > self.max_datagram):
                pass  # the path MTU dropped under the segment size (GSO says EINVAL): re-cut below
            elif exc.errno in (errno.ENOPROTOOPT, errno.EINVAL, errno.EIO, errno.EOPNOTSUPP):
                self.gso = False  # detected once: per-datagram from now on
                self.counters[f"gso_unsupported_{errno_name(exc)}"] += 1
            elif exc.errno != errno.EMSGSIZE:
                count_udp_error(self.counters, exc, len(run))
                return
            for d in run:  # EMSGSIZE or no GSO: one at a time (re-cut if the path shrank)
                self._send_one(d, peer)
            return
        self.counters["tx_gso_sends"] += 1
        self.counters["tx_gso_datagrams"] += len(run)
        if size > self.max_sent:
            self.max_sent = size

    def _send_one(self, data: bytes, peer: tuple[str, int], retry: bool = True) -> None:
        try:
            self.sock.sendto(data, peer)
        except OSError as exc:
            if exc.errno == errno.EMSGSIZE and retry:
                self._too_big(data, peer)
            else:
                count_udp_error(self.counters, exc)
            return
        if len(data) > self.max_sent:
            self.max_sent = len(data)

    def _too_big(self, data: bytes, peer: tuple[str, int]) -> None:
        """EMSGSIZE: the path MTU dropped under this datagram.  Learn the new MTU and
        send the datagram cut to fit (a sequenced batch splits at micropacket
        boundaries), so nothing waits for a retransmission."""
        self.counters["tx_emsgsize"] += 1
        self.refresh_mtu()
        if len(data) <= self.max_datagram:  # the kernel and IP_MTU disagree: assume the worst we know
            self._set_mtu(min(self.mtu, len(data) + pmtu.ip_header(self.family) + pmtu.UDP_HEADER - 1), "emsgsize")
        body = data[:len(data) - self.overhead]
        pieces = pmtu.split_datagram(body, self.max_mps)
        if len(pieces) > 1:
            self.counters["tx_resplit_datagrams"] += 1
            if self.auth is not None:
                pieces = list(map(self.auth.seal, pieces))
        else:
            pieces = [data]
        for p in pieces:
            self._send_one(p, peer, retry=False)

    def close(self) -> None:
        self.sock.close()
