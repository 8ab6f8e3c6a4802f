"""sd_notify and the service watchdog against a real AF_UNIX datagram socket as $NOTIFY_SOCKET."""

import os
import signal
import socket

import pytest
import trio

from daemons.runtime import daemon
from daemons.runtime.notify import sd_notify, watchdog, watchdog_interval


@pytest.fixture
def notify_socket(tmp_path, monkeypatch):
    """A bound datagram socket standing in for systemd's notification socket."""
    path = tmp_path / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    yield sock
    sock.close()


def test_sd_notify_sends_one_datagram(notify_socket):
    assert sd_notify("READY=1")
    assert notify_socket.recv(4096) == b"READY=1"


def test_sd_notify_abstract_address(monkeypatch):
    name = f"gsn-test-notify-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert sd_notify("STATUS=x")
        assert sock.recv(4096) == b"STATUS=x"


def test_sd_notify_without_socket(monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert sd_notify("READY=1") is False


@pytest.mark.parametrize("usec,pid,expected", [
    (None, None, None),
    ("", None, None),
    ("junk", None, None),
    ("0", None, None),
    ("-5", None, None),
    ("30000000", None, 15.0),
    ("30000000", "self", 15.0),
    ("30000000", "other", None),
])
def test_watchdog_interval(monkeypatch, usec, pid, expected):
    for var, value in (("WATCHDOG_USEC", usec), ("WATCHDOG_PID", pid)):
        if value is None:
            monkeypatch.delenv(var, raising=False)
        else:
            value = {"self": str(os.getpid()), "other": str(os.getpid() + 1)}.get(value, value)
            monkeypatch.setenv(var, value)
    assert watchdog_interval() == expected


async def _pings(sock: socket.socket, n: int) -> list[tuple[float, bytes]]:
    tsock = trio.socket.from_stdlib_socket(sock)
    out = []
    while len(out) < n:
        data = await tsock.recv(4096)
        out.append((trio.current_time(), data))
    return out


async def test_watchdog_pings_every_half_watchdog_usec(notify_socket, monkeypatch, autojump_clock):
    monkeypatch.setenv("WATCHDOG_USEC", "20000000")  # WatchdogSec=20s
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    async with trio.open_nursery() as nursery:
        start = trio.current_time()
        nursery.start_soon(watchdog)
        pings = await _pings(notify_socket, 5)
        nursery.cancel_scope.cancel()
    assert [data for _, data in pings] == [b"WATCHDOG=1"] * 5
    assert [t - start for t, _ in pings] == pytest.approx([0.0, 10.0, 20.0, 30.0, 40.0])


async def test_watchdog_idle_when_not_asked(notify_socket, monkeypatch, autojump_clock):
    monkeypatch.setenv("WATCHDOG_USEC", "20000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))  # meant for another process
    with trio.move_on_after(3600):
        await watchdog()  # returns at once
    assert trio.current_time() < 1.0
    notify_socket.setblocking(False)
    with pytest.raises(BlockingIOError):
        notify_socket.recv(4096)


async def test_wedged_loop_stops_pinging(notify_socket, monkeypatch, autojump_clock):
    """The pings come from the trio loop: while a task holds the loop (here: the mock clock
    advanced without yielding, as a blocking call would), none is sent; they resume after."""
    monkeypatch.setenv("WATCHDOG_USEC", "2000000")  # a ping every second
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watchdog)
        (t0, _), = await _pings(notify_socket, 1)
        autojump_clock.jump(5.0)  # five seconds pass with the loop never reaching the watchdog
        notify_socket.setblocking(False)
        with pytest.raises(BlockingIOError):
            notify_socket.recv(4096)
        (t1, _), = await _pings(notify_socket, 1)
        nursery.cancel_scope.cancel()
    assert t1 - t0 == pytest.approx(5.0)  # one late ping, not a burst of the missed ones


def test_daemon_run_starts_the_watchdog(notify_socket, monkeypatch):
    """daemons.runtime.daemon.run (every daemon's entry: gsnd, gsn-switch, harpd, stpd,
    pktwayd, pktway-san) pings beside the daemon's own tasks and stops on SIGTERM."""
    monkeypatch.setenv("WATCHDOG_USEC", "40000")  # 20 ms cadence: real clock, a few pings
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    got = []

    async def main(nursery):
        async def collect():
            got.extend(await _pings(notify_socket, 3))
            os.kill(os.getpid(), signal.SIGTERM)
        nursery.start_soon(collect)

    daemon.run(main)
    assert [data for _, data in got] == [b"WATCHDOG=1"] * 3
    gaps = [b[0] - a[0] for a, b in zip(got, got[1:])]
    assert all(g >= 0.019 for g in gaps), gaps
