"""trio's epoll descriptor (daemons/io/trioprivate.py), read from trio's private run loop:
these fail, naming the cause, when a trio release moves it."""

import os
import select
import socket

import trio
import trio.testing

from daemons.io import trioprivate
from daemons.io.trioprivate import is_epoll, trio_epoll_fd

MOVED = (f"trio {trio.__version__}: the run loop's epoll descriptor is not at "
         "GLOBAL_RUN_CONTEXT.runner.io_manager._epoll any more; update daemons/io/trioprivate.py")


def test_trio_epoll_fd_is_the_run_loops_own():
    async def main():
        fd = trio_epoll_fd()
        assert fd >= 0, MOVED
        assert is_epoll(fd), MOVED
        sa, b = socket.socketpair()
        a = trio.socket.from_stdlib_socket(sa)
        with a, b:
            async with trio.open_nursery() as n:
                n.start_soon(a.recv, 1)
                await trio.testing.wait_all_tasks_blocked()
                assert not select.select([fd], [], [], 0)[0]
                b.send(b"x")  # a's waiter is ready: trio's epoll descriptor is readable
                assert select.select([fd], [], [], 0)[0], MOVED
    assert trio_epoll_fd() == -1  # outside a run
    trio.run(main)


def test_is_epoll_tells_an_epoll_from_other_descriptors():
    ep = select.epoll()
    r, w = os.pipe()
    try:
        assert is_epoll(ep.fileno())
        assert not is_epoll(r) and not is_epoll(-1)
    finally:
        ep.close(), os.close(r), os.close(w)


def test_a_descriptor_that_is_no_epoll_falls_back_to_minus_one(monkeypatch):
    """If trio's attribute held something else with a fileno (a pipe here), the check
    refuses it: -1 and one warning, never a wrong descriptor handed to dp_run."""
    from trio._core._run import GLOBAL_RUN_CONTEXT

    r, w = os.pipe()
    monkeypatch.setattr(trioprivate, "_warned", False)

    class NotEpoll:
        def fileno(self) -> int:
            return r

    async def main():
        io = GLOBAL_RUN_CONTEXT.runner.io_manager
        real, io._epoll = io._epoll, NotEpoll()
        try:
            return trio_epoll_fd()
        finally:
            io._epoll = real  # trio closes its own at the end of the run

    try:
        assert trio.run(main) == -1
        assert trioprivate._warned
    finally:
        os.close(r), os.close(w)


def test_wait_all_tasks_blocked_is_trio_testings_own():
    """The runner's private import is the function trio.testing publishes (fails if trio moves it)."""
    import trio.testing

    from daemons.io import trioprivate
    assert trioprivate.wait_all_tasks_blocked is trio.testing.wait_all_tasks_blocked
