"""A non-blocking UDP socket for cables and management traffic: drained in bursts,
every send failure counted (never raised)."""

from __future__ import annotations

import socket
from collections import Counter

import trio

from daemons.io.udp import resolve
from daemons.runtime.oserrors import count_udp_error

from .constants import DATAGRAM_MAX

__all__ = ["Udp", "resolve"]


class Udp:
    def __init__(self, local: tuple[str, int], peer: tuple[str, int] | None = None) -> None:
        self.sock = socket.socket(socket.AF_INET6 if ":" in local[0] else socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(local)
        self.sock.setblocking(False)
        self.peer = peer
        self.counters: Counter[str] = Counter()

    async def wait_readable(self) -> None:
        await trio.lowlevel.wait_readable(self.sock)

    def drain(self, limit: int = 64) -> list[tuple[bytes, tuple]]:
        out = []
        for _ in range(limit):
            try:
                data, src = self.sock.recvfrom(DATAGRAM_MAX)
            except BlockingIOError:
                break
            except OSError as exc:  # e.g. ECONNREFUSED reported for an earlier send
                count_udp_error(self.counters, exc, prefix="recv_")
                continue
            if self.peer is not None and src[:2] != self.peer:
                self.counters["drop_foreign_source"] += 1
                continue
            out.append((data, src[:2]))
        return out

    def send(self, data: bytes, dst: tuple | None = None) -> None:
        to = dst or self.peer
        if to is None:
            self.counters["drop_no_destination"] += 1
            return
        try:
            self.sock.sendto(data, to)
        except OSError as exc:
            count_udp_error(self.counters, exc, full="drop_send_buffer_full", prefix="send_error_")

    def close(self) -> None:
        self.sock.close()
