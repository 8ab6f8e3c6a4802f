"""UDP cable transport: one non-blocking socket, drained in a loop per wake-up."""

from __future__ import annotations

import errno
import socket
from collections import Counter

import trio

from ..constants import SOCKET_BUFFER_BYTES

RECV_BYTES = 65536
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
    return info[0][4][:2]


class UdpTransport:
    def __init__(self, local: tuple[str, int], peer: tuple[str, int] | None) -> None:
        family = socket.AF_INET6 if ":" in local[0] else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            self.sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER_BYTES)
            try:  # beyond net.core.{r,w}mem_max when we are privileged
                self.sock.setsockopt(socket.SOL_SOCKET, _FORCE[opt],
                                     SOCKET_BUFFER_BYTES)
            except OSError:
                pass
        self.sock.bind(local)
        self.sock.setblocking(False)
        self.peer = peer
        self.counters: Counter[str] = Counter()

    async def wait_readable(self) -> None:
        await trio.lowlevel.wait_readable(self.sock)

    def drain(self, limit: int = 256) -> list[bytes]:
        out = []
        recv = self.sock.recvfrom
        for _ in range(limit):
            try:
                data, addr = recv(RECV_BYTES)
            except BlockingIOError:
                break
            except OSError as exc:  # ICMP errors from a previous send surface here
                self.counters[f"rx_error_{errno.errorcode.get(exc.errno, exc.errno)}"] += 1
                continue
            if self.peer is not None and addr[:2] != self.peer:
                self.counters["rx_foreign_datagram"] += 1
                continue
            out.append(data)
        return out

    def send(self, data: bytes) -> None:
        if self.peer is None:
            self.counters["tx_no_peer"] += 1
            return
        try:
            self.sock.sendto(data, self.peer)
        except BlockingIOError:
            self.counters["tx_dropped_socket_full"] += 1
        except OSError as exc:
            self.counters[f"tx_error_{errno.errorcode.get(exc.errno, exc.errno)}"] += 1

    def close(self) -> None:
        self.sock.close()
