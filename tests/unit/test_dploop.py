"""gsnd's data-plane loop (daemons/_loop.h, DataPlane.run, LinkRunner._run_dataplane):
it moves frames in C, returns to Python when Python has work (link events, a ready
control descriptor, the retransmission timer, the deadline) and never starves trio.
Real descriptors and the real clock: the loop waits in ppoll()."""

from __future__ import annotations

import os
import select
import socket
import threading
import time

import pytest
import trio
import trio.testing

from daemons.constants import ETHERTYPE_IPV4, RTX_TIMEOUT_MIN_S, VC_IP
from daemons.endpoint.core import MessageIn, UlaChanged
from daemons.gsnd.dataplane import CONTROL, DEADLINE, EVENTS, IDLE, TIMER, Ran, usable
from daemons.io.runner import LinkRunner
from daemons.io.udp import UdpTransport
from tests.unit.dprig import ULAS, Rig
from tests.unit.test_dataplane import frame, ipv4

HIGH = 1 << 30


@pytest.fixture
def rig():
    r = Rig()
    r.bring_up()
    for _ in range(30):  # everything acknowledged: no retransmission timer running
        r.step()
    for i in (0, 1):
        r.taps[i].frames()
    yield r
    r.close()


def run(rig, i: int, seconds: float, trio_fd: int = -1):
    t0 = time.monotonic()
    ran = rig.dps[i].run(rig.now, rig.now + seconds, HIGH, trio_fd)
    elapsed = time.monotonic() - t0
    rig.now += elapsed
    return ran, elapsed


def test_nothing_to_do_waits_until_the_deadline_then_says_idle(rig):
    ran, elapsed = run(rig, 0, 0.05)
    assert ran.reason == IDLE and ran.idle and (ran.datagrams, ran.frames) == (0, 0)
    assert 0.045 <= elapsed < 1.0


def test_frames_cross_in_c_and_the_deadline_ends_a_busy_call(rig):
    sent = [frame(ULAS[1], ETHERTYPE_IPV4, ipv4(n)) for n in (20, 1500, 65000)]
    for f in sent:
        rig.taps[0].outer.send(f)
    # 10 ms, under the 20 ms retransmission timer (which a slow build may still reach)
    ran, _ = run(rig, 0, 0.01)
    assert ran.reason in (DEADLINE, TIMER) and ran.frames == 3
    ran, _ = run(rig, 1, 0.01)
    assert ran.reason in (DEADLINE, TIMER) and ran.datagrams > 0
    assert rig.taps[1].frames() == sent
    assert rig.transports[0].counters["tx_datagrams"] > 0


def test_a_ready_control_descriptor_ends_the_wait_at_once(rig):
    a, b = socket.socketpair()
    ep = select.epoll()  # stands for trio's: readable when a registered descriptor is
    ep.register(a.fileno(), select.EPOLLIN)
    threading.Timer(0.05, b.send, (b"x",)).start()
    try:
        ran, elapsed = run(rig, 0, 5.0, ep.fileno())
        assert ran.reason == CONTROL
        assert 0.04 <= elapsed < 1.0
    finally:
        ep.close(), a.close(), b.close()


def test_a_message_for_python_returns_at_once_with_it_queued(rig):
    # a non-IP Message on VC1 is not the data plane's: it goes up as an event
    assert rig.eps[0].send(VC_IP, ULAS[1], 0x88B5, b"hello")
    rig.dps[0].send_many(rig.eps[0].link.datagrams(rig.now))
    ran, elapsed = run(rig, 1, 5.0)
    assert ran.reason == EVENTS and elapsed < 1.0
    rig.eps[1].process(rig.now)
    got = [ev.message for ev in rig.eps[1].events() if isinstance(ev, MessageIn)]
    assert [(m.ethertype, bytes(m.payload)) for m in got] == [(0x88B5, b"hello")]


def test_what_python_queued_before_the_call_leaves_at_its_start(rig):
    """A Message queued in Python between two calls (a ULP SEND) is sent when dp_run starts,
    not at its first wake-up: an idle call may wait until trio's next deadline."""
    arrived = []
    sock = rig.transports[1].sock

    def watch():
        if select.select([sock], [], [], 2.0)[0]:
            arrived.append(time.monotonic())
    watcher = threading.Thread(target=watch)
    watcher.start()
    assert rig.eps[0].send(VC_IP, ULAS[1], 0x88B5, b"hello")  # queued, not flushed
    t0 = time.monotonic()
    run(rig, 0, 0.3)  # ends at the retransmission timer: side 1 never acks
    watcher.join()
    # without the flush at the start it left at the first wake-up: the keepalive or the deadline
    assert arrived and arrived[0] - t0 < 0.02, arrived and arrived[0] - t0


def test_the_retransmission_timer_returns_to_python(rig):
    rig.taps[0].outer.send(frame(ULAS[1], ETHERTYPE_IPV4, ipv4(1000)))
    ran, elapsed = run(rig, 0, 5.0)  # side 1 never answers
    assert ran.reason == TIMER and ran.frames == 1
    # the adaptive RTO after the send: at least its floor (the link measured the rig's round trips)
    assert RTX_TIMEOUT_MIN_S * 0.9 <= elapsed < 1.0
    assert rig.eps[0].handle_timer(rig.now)  # Python's handle_timer resends


def test_a_full_vc1_leaves_the_tap_unread(rig):
    rig.taps[0].outer.send(frame(ULAS[1], ETHERTYPE_IPV4, ipv4(1000)))
    ran = rig.dps[0].run(rig.now, rig.now + 0.03, -1, -1)  # high water -1: VC1 always "full"
    assert ran.frames == 0 and ran.reason == IDLE


def test_a_tap_that_is_ready_but_gives_no_frame_is_polled_again_within_the_slice(rig):
    """The TAP's descriptor readable but read() failing (EIO while the interface is down;
    here a listening socket with a pending connection: ENOTCONN): the loop stops polling
    it, but only for LOOP_TAP_RETRY_S, not for the rest of a long idle call."""
    from daemons._link import LOOP_TAP_RETRY_S
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    client = socket.create_connection(listener.getsockname())
    try:
        os.dup2(listener.fileno(), rig.taps[0].fd)  # the data plane's TAP descriptor is the listener now
        ran, elapsed = run(rig, 0, 0.1)
        tries = rig.dps[0].counters("tap", {}).get("read_ENOTCONN", 0)
        assert ran.frames == 0 and elapsed >= 0.09
        assert 0.3 * 0.1 / LOOP_TAP_RETRY_S <= tries <= 1.5 * 0.1 / LOOP_TAP_RETRY_S + 2, tries
    finally:
        client.close(), listener.close()


def test_a_keyed_cable_runs_in_the_loop_sealed_and_opened_in_c():
    """Both ends keyed: the links come up and frames cross through the loop, every
    datagram sealed and opened in C (counted in the cable group as the data plane's:
    tx_auth_sealed_dp, rx_auth_ok), none through the transport's Python open; a datagram
    corrupted on the way is dropped by the loop as bad_mac, as the Python path counts it."""
    key = bytes(range(32))
    assert usable(UdpTransport(("127.0.0.1", 0), ("127.0.0.1", 9), key=key))
    rig = Rig(key=key)
    try:
        rig.bring_up()
        for _ in range(30):
            rig.step()
        sent = [frame(ULAS[1], ETHERTYPE_IPV4, ipv4(n)) for n in (20, 1500, 65000)]
        for f in sent:
            rig.taps[0].outer.send(f)
        run(rig, 0, 0.01)
        run(rig, 1, 0.01)
        assert rig.taps[1].frames() == sent
        cable = [rig.dps[i].counters("cable", rig.transports[i].counters) for i in (0, 1)]
        for c in cable:
            assert c["tx_auth_sealed_dp"] > 0 and c["rx_auth_ok"] > 0, c
            assert not any(k.startswith("rx_auth_") and k != "rx_auth_ok" for k in c), c
        assert not any(k.startswith("rx_auth") for t in rig.transports for k in t.counters)  # no Python open
        # a forged datagram from the peer's address: the loop drops it as bad_mac
        sealed = rig.transports[0].auth.seal(rig.eps[0].link.datagrams(rig.now + 1.0)[0])
        forged = sealed[:40] + bytes([sealed[40] ^ 1]) + sealed[41:]
        rig.transports[0].sock.sendto(forged, rig.transports[1].local)
        run(rig, 1, 0.01)
        assert rig.dps[1].counters("cable", {})["rx_auth_bad_mac"] == 1
    finally:
        rig.close()


def test_control_socket_and_trio_timers_are_served_under_full_load():
    """Two endpoints' loops in one trio run, a thread filling one TAP as fast as it can:
    a control socket's round trips and trio's sleeps stay prompt, frames keep moving."""
    async def main():
        rig = Rig(now=trio.current_time())
        runners = []
        for i in (0, 1):
            ep, dp = rig.eps[i], rig.dps[i]

            def on_input(now, ep=ep, dp=dp):
                ep.process(now)
                for ev in ep.events():
                    if isinstance(ev, UlaChanged):
                        dp.set_ula(ev.ula)

            r = LinkRunner(ep.link, rig.transports[i], on_input, None, timer=ep.timer, handle_timer=ep.handle_timer)
            r.after = r.flush
            r.use(dp, 8192, ep.own_timer)
            runners.append(r)
        stop = threading.Event()
        moved = [0]

        def flood():
            f = frame(ULAS[1], ETHERTYPE_IPV4, ipv4(60000))
            while not stop.is_set():
                try:
                    rig.taps[0].outer.send(f)
                except BlockingIOError:
                    time.sleep(0.0005)

        def drain():
            while not stop.is_set():
                moved[0] += len(rig.taps[1].frames())
                time.sleep(0.001)

        a, b = trio.socket.socketpair()
        try:
            async with trio.open_nursery() as n:
                for r in runners:
                    n.start_soon(r.run)
                with trio.fail_after(10):
                    while not all(ep.link.up and ep.ula for ep in rig.eps):
                        await trio.sleep(0.01)

                async def echo():
                    while True:
                        await a.send(await a.recv(16))
                n.start_soon(echo)
                threads = [threading.Thread(target=flood), threading.Thread(target=drain)]
                for t in threads:
                    t.start()
                try:
                    await trio.sleep(0.2)  # the loop is busy now
                    before = moved[0]
                    rtts, lates = [], []
                    for _ in range(50):
                        t0 = trio.current_time()
                        await b.send(b"ping")
                        assert await b.recv(16) == b"ping"
                        rtts.append(trio.current_time() - t0)
                        t0 = trio.current_time()
                        await trio.sleep(0.003)
                        lates.append(trio.current_time() - t0 - 0.003)
                    assert moved[0] > before, "no frame crossed during the round trips"
                finally:
                    stop.set()
                    for t in threads:
                        t.join()
                n.cancel_scope.cancel()
        finally:
            a.close(), b.close()
            rig.close()
        rtts.sort(), lates.sort()
        # the machine is shared: bound the median tightly and the worst loosely
        assert rtts[25] < 0.02 and rtts[-1] < 0.5, rtts
        assert lates[25] < 0.02 and lates[-1] < 0.5, lates
        assert runners[0].dataplane.reasons["control"] > 0
    trio.run(main)


@pytest.mark.parametrize("mtu", [1500, 9000, 65280])
def test_the_cable_window_is_micropackets_and_fits_the_peers_receive_buffer(mtu):
    from daemons import constants as C
    from daemons.io.runner import cable_window
    max_mps = min(C.MAX_DATAGRAM_MPS, (mtu - 20 - 8 - C.SHIM_BYTES) // C.MP_BYTES)
    w = cable_window(max_mps)
    # a 1500-byte underlay gets the window a 64 KB one gets: not bound by datagrams
    assert w == cable_window(C.MAX_DATAGRAM_MPS) == C.SEQ_WINDOW_MPS
    assert w >= C.VC_BUFFER_MPS[VC_IP]  # IP's credits, not the window, bound what is in flight
    datagrams = -(-w // max_mps)
    assert datagrams * (C.SHIM_BYTES + max_mps * C.MP_BYTES + C.RX_DATAGRAM_OVERHEAD_BYTES) <= C.SOCKET_BUFFER_BYTES


def test_a_tiny_datagram_window_is_bounded_by_the_receive_buffer():
    from daemons import constants as C
    from daemons.io.runner import cable_window
    w = cable_window(1)
    assert 1 <= w < C.SEQ_WINDOW_MPS
    assert w * (C.SHIM_BYTES + C.MP_BYTES + C.RX_DATAGRAM_OVERHEAD_BYTES) <= C.SOCKET_BUFFER_BYTES


class _Stop(Exception):
    pass


class _IdleLink:
    max_mps = 1

    def timer(self):
        return float("inf")

    def handle_timer(self, now):
        return []


def test_a_task_woken_with_a_control_return_runs_before_the_next_dp_run():
    """dp_run returns CONTROL when one of trio's descriptors is ready; trio then wakes that
    task into the runner's own batch, in either order.  The runner must let it run before
    it blocks in dp_run again (it used to wait for the loop's slice: a ULP round trip took
    2.8 ms instead of 0.5).  Trio orders a batch at random, so this runs 40 times."""
    from daemons.gsnd.dataplane import Ran

    async def once():
        a, b = socket.socketpair()
        reader = trio.socket.from_stdlib_socket(a)
        served: list[bytes] = []
        seen: list[int] = []

        class DataPlane:
            trio_fd = -1

            def send_many(self, datagrams):
                pass

            def run(self, now, deadline, high, trio_fd):
                seen.append(len(served))
                if len(seen) == 1:
                    b.send(b"x")  # the reader's descriptor is ready now: the loop would return CONTROL
                    return Ran(CONTROL, 0, 0)
                raise _Stop

        runner = LinkRunner(_IdleLink(), None, lambda now: None, lambda now: None)
        runner.use(DataPlane(), 0, lambda: float("inf"))
        with reader, b:
            async with trio.open_nursery() as n:
                async def read():
                    served.append(await reader.recv(1))
                n.start_soon(read)
                await trio.testing.wait_all_tasks_blocked()
                with pytest.raises(_Stop):
                    await runner.run()
        assert seen == [0, 1], seen  # the second dp_run came after the reader had its byte

    async def main():
        for _ in range(40):
            await once()
    trio.run(main)


class _Recorder:
    """A DataPlane whose run() only records how long it was allowed to wait, says IDLE,
    and ends the runner (_Stop) after ``calls`` runs."""
    trio_fd = 0  # a real descriptor number: the runner may wait in C

    def __init__(self, calls: int) -> None:
        self.calls, self.waits = calls, []

    def send_many(self, datagrams):
        pass

    def run(self, now, deadline, high, trio_fd):
        self.waits.append(deadline - now)
        if len(self.waits) == self.calls:
            raise _Stop
        return Ran(IDLE, 0, 0)


def _recording_runner(calls: int) -> tuple[LinkRunner, _Recorder]:
    dp = _Recorder(calls)
    runner = LinkRunner(_IdleLink(), None, lambda now: None, lambda now: None)
    runner.use(dp, 0, lambda: float("inf"))
    return runner, dp


def _idle_waits(calls: int, configure=lambda runner, dp: None, beside=None) -> list[float]:
    """How long the runner let an idle loop wait, run by run, for ``calls`` runs of a
    _Recorder (``configure(runner, dp)`` first): beside ``beside`` (a task that never
    blocks), or else beside a 0.5 s sleep that every task has blocked on first."""
    async def main():
        runner, dp = _recording_runner(calls)
        configure(runner, dp)
        async with trio.open_nursery() as n:
            if beside is None:
                n.start_soon(trio.sleep, 0.5)
                await trio.testing.wait_all_tasks_blocked()
            else:
                n.start_soon(beside)
            with pytest.raises(_Stop):
                await runner.run()
            n.cancel_scope.cancel()
        return dp.waits
    return trio.run(main)


def test_an_idle_loop_waits_in_c_until_trios_next_deadline_when_no_task_can_run():
    """After an idle slice, with every other task waiting (here: a 0.5 s sleep), the next
    run may wait until that sleep's deadline: a frame after a quiet spell then wakes the
    loop in C, with no trio pass first.  The sleeper still wakes on time (the run ends
    at its deadline)."""
    from daemons.constants import DP_SLICE_S

    waits = _idle_waits(3)
    assert waits[0] == pytest.approx(DP_SLICE_S)
    assert 0.3 < waits[1] <= 0.5 and 0.3 < waits[2] <= 0.5, waits


def test_an_idle_loop_keeps_its_slice_while_another_task_keeps_running():
    """A task that never blocks (it only checkpoints) must keep running: the loop never
    waits longer than its slice then."""
    from daemons.constants import DP_SLICE_S

    async def busy():
        while True:
            await trio.lowlevel.checkpoint()
    assert _idle_waits(4, beside=busy) == [pytest.approx(DP_SLICE_S)] * 4


def test_an_idle_loop_keeps_its_slice_while_a_task_waits_for_what_only_a_return_tells():
    """gsnd's ULP reader waiting for room on VC1 (_wait_room) is woken after a return from
    the loop: while ``waiting()`` says so, the loop never waits longer than its slice (it
    waited for trio's next deadline: 64 KiB ULP Messages fell from ~930 to ~12 a second)."""
    from daemons.constants import DP_SLICE_S

    def waiting(runner, dp):
        runner.use(dp, 0, lambda: float("inf"), waiting=lambda: True)
    assert _idle_waits(3, waiting) == [pytest.approx(DP_SLICE_S)] * 3


def test_two_idle_loops_in_one_run_keep_their_slices():
    """Two runners in one trio run (the tests' rigs) go idle together: one waiting in C until
    trio's next deadline would leave the other runnable but not run, so neither does."""
    from daemons.constants import DP_SLICE_S

    async def main():
        pairs = [_recording_runner(1 << 30), _recording_runner(1 << 30)]  # never stop by themselves
        async with trio.open_nursery() as n:
            n.start_soon(trio.sleep, 0.5)
            for runner, _dp in pairs:
                n.start_soon(runner.run)
            await trio.sleep(0.1)
            n.cancel_scope.cancel()
        for _runner, dp in pairs:
            assert len(dp.waits) > 3 and max(dp.waits) == pytest.approx(DP_SLICE_S), (len(dp.waits), max(dp.waits))
    trio.run(main)


def test_an_idle_loop_without_trios_descriptor_waits_in_trio():
    """No epoll descriptor of trio's (another I/O backend): the loop could not see a task's
    descriptor get ready, so it never waits in C beyond its slice."""
    from daemons.constants import DP_SLICE_S

    def no_trio_fd(runner, dp):
        dp.trio_fd = -1
        dp.wait_readable = trio.lowlevel.checkpoint  # the cable or TAP "became readable"
    assert _idle_waits(2, no_trio_fd) == [pytest.approx(DP_SLICE_S)] * 2


def test_the_daemons_do_not_import_trio_testing_or_pytest():
    """The runner uses trio's wait_all_tasks_blocked from trio._core: trio.testing would pull
    in pytest, ~0.3 s more at every daemon's start (3.5 s more for a 3-host fabric at load 20)."""
    import subprocess
    import sys
    code = ("import sys, daemons.gsnd.daemon, daemons.switch.daemon; "
            "assert not {'pytest', 'trio.testing'} & set(sys.modules), 'imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
