"""The two private details of trio the project reads, here and nowhere else.

``wait_all_tasks_blocked`` is public only as ``trio.testing.wait_all_tasks_blocked``, and
importing trio.testing imports pytest (~0.3 s more at every daemon's start), so the runner
takes it from ``trio._core`` through this module.

trio's own epoll descriptor:

gsnd's data-plane loop (daemons/_loop.h ``dp_run``) polls it beside the TAP and the
cable, so a ready control or ULP socket wakes the loop at once.  trio has no public
accessor for it, so it is read from the run loop's I/O manager here and nowhere else,
and checked: the descriptor must be an epoll instance.  Without it (outside a run,
another I/O backend, or a trio that moved it) the answer is -1 and the loop sees trio's
work only at its deadline (slower, still correct); inside a run that is logged once.
tests/unit/test_trioprivate.py fails if a trio release changes the layout.
"""

from __future__ import annotations

import os

import structlog
import trio
from trio._core import wait_all_tasks_blocked  # = trio.testing.wait_all_tasks_blocked

__all__ = ["is_epoll", "trio_epoll_fd", "wait_all_tasks_blocked"]

log = structlog.get_logger()
_warned = False


def is_epoll(fd: int) -> bool:
    """``fd`` is an epoll instance of this process (Linux names it in /proc)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[eventpoll]"
    except OSError:
        return False


def trio_epoll_fd() -> int:
    """The current trio run's epoll descriptor (readable when one of its tasks' descriptors
    is ready), or -1 outside a run or when it cannot be found."""
    global _warned
    try:
        trio.lowlevel.current_root_task()
    except RuntimeError:
        return -1  # not in a trio run
    try:
        from trio._core._run import GLOBAL_RUN_CONTEXT

        fd = GLOBAL_RUN_CONTEXT.runner.io_manager._epoll.fileno()
    except (AttributeError, ImportError, OSError, TypeError):
        fd = -1
    if isinstance(fd, int) and fd >= 0 and is_epoll(fd):
        return fd
    if not _warned:
        _warned = True
        log.warning("trio.epoll_fd_unavailable", trio=trio.__version__,
                    effect="the data-plane loop sees control and ULP work only at its deadline")
    return -1
