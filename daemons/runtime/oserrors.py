"""OS errors a daemon counts and survives: their counter names, and which ones mean
"out of descriptors or memory" (back off and refuse, never exit)."""

from __future__ import annotations

import errno
import socket

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


def errno_name(exc: OSError) -> str:
    """``ECONNREFUSED`` and the like, for a counter name (the number when it has no name)."""
    return errno.errorcode.get(exc.errno or 0, str(exc.errno))
