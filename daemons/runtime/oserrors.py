"""OS errors a daemon counts and survives: their counter names, and which ones mean
"out of descriptors or memory" (back off and refuse, never exit)."""

from __future__ import annotations

import errno

# accept() fails with these when the process or the system is out of descriptors or memory
NO_FDS_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def errno_name(exc: OSError) -> str:
    """``ECONNREFUSED`` and the like, for a counter name (the number when it has no name)."""
    return errno.errorcode.get(exc.errno or 0, str(exc.errno))
