"""OS errors a daemon counts and survives: their counter names, and which ones mean
"out of descriptors or memory" (back off and refuse, never exit)."""

from __future__ import annotations

import errno
import os
import socket
from collections import Counter
from collections.abc import Callable

import trio

# accept() fails with these when the process or the system is out of descriptors or memory
NO_FDS_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


async def accept_ready(lsock: socket.socket) -> socket.socket | OSError:
    """The next connection on the non-blocking listening socket ``lsock``, or the OSError
    its accept() failed with (returned, never raised: the caller counts it and goes on)."""
    while True:
        await trio.lowlevel.wait_readable(lsock)
        try:
            conn, _ = lsock.accept()
        except BlockingIOError:
            continue  # another waiter took it
        except OSError as exc:
            return exc
        return conn


class ReserveFd:
    """One descriptor held in reserve (/dev/null), so that a server out of descriptors can
    still take the connection waiting in its backlog and tell the client why it is refused."""

    def __init__(self) -> None:
        self.fd = self._open()

    @staticmethod
    def _open() -> int | None:
        try:
            return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None

    def refuse_waiting(self, lsock: socket.socket, refuse: Callable[[socket.socket], None]) -> None:
        """Free the reserve, accept the waiting connection and hand it to ``refuse`` (which
        closes it), take the reserve back.  Without a reserve nothing happens."""
        if self.fd is None:
            return
        os.close(self.fd)
        self.fd = None
        try:
            conn, _ = lsock.accept()
        except OSError:
            pass
        else:
            refuse(conn)
        self.fd = self._open()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def errno_name(exc: OSError) -> str:
    """``ECONNREFUSED`` and the like, for a counter name (the number when it has no name)."""
    return errno.errorcode.get(exc.errno or 0, str(exc.errno))


def count_udp_error(counters: Counter[str], exc: OSError, n: int = 1, *, full: str = "tx_dropped_socket_full",
                    prefix: str = "tx_error_") -> None:
    """A UDP socket call that failed, counted ``n`` times: a full buffer (BlockingIOError)
    as ``full``, anything else as ``prefix`` + its errno name (``tx_error_ECONNREFUSED``).
    Receives pass ``prefix="rx_error_"``; the drivers that count UDP errors share it so
    every package names them alike."""
    if isinstance(exc, BlockingIOError):
        counters[full] += n
    else:
        counters[prefix + errno_name(exc)] += n
