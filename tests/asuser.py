"""Run a function as another user (issue 12, item 4: local clients isolated).

The tests run as root; an unprivileged member of the service group is played by a
forked child that drops to uid/gid 65534 before it connects (SO_PEERCRED records the
credentials of connect()).  The child only runs ``fn`` (plain blocking sockets) and
sends back its result: the interpreter under /root is not reachable by that user, so
a fresh ``python`` could not be started as it.
"""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import tempfile
from contextlib import contextmanager
from pathlib import Path

NOBODY = 65534


@contextmanager
def shared_dir():
    """A directory the other user can reach (pytest's tmp_path sits under a 0700 one)."""
    d = tempfile.mkdtemp(prefix="gsn-sec-")
    os.chmod(d, 0o711)
    try:
        yield Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def to_group(path, gid: int = NOBODY) -> None:
    """Make ``gid`` the socket's group: its members may connect (the sockets are 0660)."""
    os.chown(path, -1, gid)


def as_user(fn, uid: int = NOBODY, gid: int = NOBODY, timeout: int = 30):
    """``fn()`` in a child running as uid/gid; its (picklable) result, or RuntimeError
    carrying the child's exception as one line (or saying it was killed after
    ``timeout`` seconds, e.g. waiting on a request that should have been refused)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(r)
            signal.alarm(timeout)  # SIGALRM's default action ends the child
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            out = ("ok", fn())
        except BaseException as exc:
            out = ("error", f"{type(exc).__name__}: {exc}")
        try:
            os.write(w, pickle.dumps(out))
        finally:
            os._exit(0)
    os.close(w)
    chunks = []
    with os.fdopen(r, "rb") as f:
        while chunk := f.read(65536):
            chunks.append(chunk)
    os.waitpid(pid, 0)
    if not chunks:
        raise RuntimeError(f"the child as uid {uid} gave no answer (killed after {timeout} s?)")
    kind, value = pickle.loads(b"".join(chunks))
    if kind == "error":
        raise RuntimeError(value)
    return value
