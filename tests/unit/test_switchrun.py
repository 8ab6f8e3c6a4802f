"""gsn-switch's data-plane loop (SwitchPlane.run, daemons/_switchrun.h): Messages cross
the switch in C, acks and credits leave from the loop while it waits, and it returns to
Python when Python has work (a link's events, a ready control descriptor, a link's
retransmission timer, the deadline) -- never on its own otherwise.  Real UDP sockets on
loopback and the real clock: the loop waits in ppoll()."""

from __future__ import annotations

import random
import socket
import time

import pytest

from daemons import constants as C
from daemons.gsnd.dataplane import CONTROL, DEADLINE, EVENTS, IDLE, TIMER
from daemons.io.runner import cable_window
from daemons.io.udp import UdpTransport
from daemons.link.clink import CLink
from daemons.link.link import Received
from daemons.switch.core import Switch
from daemons.wire.message import encode_stream, stream_records
from daemons.wire.ula import assigned_ula

ULAS = {1: assigned_ula(9, 1), 2: assigned_ula(9, 2)}


class Rig:
    """A two-port Switch(plane=True) on loopback UDP cables, a host CLink on each port
    driven by the test in Python."""

    def __init__(self) -> None:
        socks = []
        for _ in range(4):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        addrs = [s.getsockname() for s in socks]
        for s in socks:
            s.close()  # the transports bind them again (a race with another test is harmless: bind fails loudly)
        self.sw_t = {p: UdpTransport(addrs[p - 1], addrs[p + 1]) for p in (1, 2)}
        self.host_t = {p: UdpTransport(addrs[p + 1], addrs[p - 1]) for p in (1, 2)}
        self.now = time.monotonic()
        self.sw = Switch(7, [1, 2], self.now, rng=random.Random(1), static={ULAS[1]: 1, ULAS[2]: 2}, plane=True,
                         windows={p: cable_window(t.max_mps) for p, t in self.sw_t.items()})
        for p, t in self.sw_t.items():
            self.sw.ports[p].link.max_mps = t.max_mps
            self.sw.plane.cable(p, t)
        self.hosts = {p: CLink(p, self.now, rng=random.Random(p), window=cable_window(t.max_mps))
                      for p, t in self.host_t.items()}
        self.got: list = []

    def close(self) -> None:
        for t in (*self.sw_t.values(), *self.host_t.values()):
            t.sock.close()

    def hosts_step(self) -> int:
        """Each host receives what reached it and sends what it has; host 2 keeps what it
        receives (and frees it).  Returns the datagrams the hosts received."""
        self.now = time.monotonic()
        n = 0
        for p, h in self.hosts.items():
            dgrams = self.host_t[p].drain()
            n += len(dgrams)
            for dg in dgrams:
                h.receive(dg, self.now)
            for ev in h.events():
                if isinstance(ev, Received):
                    if p == 2:
                        self.got.append((ev.vc, ev.recs.tobytes()))
                    h.release(ev.vc, len(ev.recs))
            out = h.handle_timer(self.now) + h.datagrams(self.now)
            if out:
                self.host_t[p].send_many(out)
        return n

    def switch_pass(self, now: float) -> None:
        """What the daemon does after run() returns (SwitchDaemon._plane_pass)."""
        for p, port in self.sw.ports.items():
            rtx = port.link.handle_timer(now)
            if rtx:
                self.sw_t[p].send_many(rtx)
            self.sw.process(p, now)
        for p, refused in self.sw.plane.flush(now).items():
            self.sw_t[p].send_many(refused)

    def run(self, seconds: float, trio_fd: int = -1):
        now = time.monotonic()
        t0 = now
        reason, got, refused = self.sw.plane.run(now, now + seconds, trio_fd)
        return reason, got, refused, time.monotonic() - t0

    def bring_up(self) -> None:
        for _ in range(200):
            self.hosts_step()
            reason, _, refused, _ = self.run(0.002)
            assert refused == {}
            self.switch_pass(time.monotonic())
            if all(h.up for h in self.hosts.values()) and all(p.link.up for p in self.sw.ports.values()):
                break
        assert all(h.up for h in self.hosts.values())
        for _ in range(20):  # everything acknowledged: no retransmission timer running
            self.hosts_step()
            self.run(0.002)
            self.switch_pass(time.monotonic())


def data_areas(recs: bytes) -> bytes:
    """The micropackets' data (the switch restamps each control word's link fields)."""
    return b"".join(recs[i:i + C.MP_DATA_BYTES] for i in range(0, len(recs), C.MP_BYTES))


@pytest.fixture
def rig():
    r = Rig()
    try:
        r.bring_up()
        yield r
    finally:
        r.close()


def test_nothing_to_do_waits_until_the_deadline_then_says_idle(rig):
    reason, got, refused, elapsed = rig.run(0.05)
    assert (reason, got, refused) == (IDLE, {}, {})
    assert 0.045 <= elapsed < 1.0


def test_messages_cross_in_c_with_their_acks_and_credits(rig):
    """Host 1's Messages reach host 2 exactly, forwarded by the loop alone; the switch's
    acks and credits back to host 1 leave from the loop too (no Python between)."""
    payloads = [bytes((i * 7 + n) & 0xFF for i in range(n)) for n in (10, 3000, 65000)]
    want = []
    for pl in payloads:
        recs = stream_records(1, encode_stream(1, ULAS[2], ULAS[1], 0x88B5, pl))
        rig.hosts[1].enqueue(1, recs)
        want.append(recs.tobytes())
    rig.hosts_step()  # host 1 sends
    credits0 = rig.hosts[1].credits[1]
    reason, got, refused, _ = rig.run(0.01)
    assert reason in (DEADLINE, TIMER) and got.get(1, 0) >= 1 and refused == {}
    # while run() waited, it sent host 2 the Messages and host 1 its ack and credits
    for _ in range(3):
        rig.hosts_step()
    assert data_areas(b"".join(r for vc, r in rig.got if vc == 1)) == data_areas(b"".join(want))
    assert rig.hosts[1].credits[1] >= credits0  # what the switch forwarded was credited back
    assert rig.sw.ports[2].counters["tx_mps"] == sum(len(w) for w in want) // C.MP_BYTES


def test_segments_held_in_the_switch_keep_their_bytes_while_later_datagrams_arrive(rig):
    """A large segment waits in the switch as a reference to the receive buffer it came
    in (_switchloop.h SW_REF_MIN_BYTES), so the loop receives later datagrams into new
    buffers: with host 2 silent (the switch's credits towards it run out), host 1's
    Messages pile up in the switch's input queue while more arrive, and when host 2
    wakes every Message reaches it exactly."""
    payloads = [bytes((i * 13 + k) & 0xFF for i in range(60000)) for k in range(10)]
    want = []
    for pl in payloads:  # VC2: its buffers (C.VC_BUFFER_MPS, 4096 micropackets) fill before VC1's
        recs = stream_records(2, encode_stream(2, ULAS[2], ULAS[1], 0x88B5, pl))
        rig.hosts[1].enqueue(2, recs)
        want.append(recs.tobytes())
    h1, waited = rig.hosts[1], 0
    for _ in range(100):  # host 1 alone: host 2 neither receives nor grants credits
        now = time.monotonic()
        for dg in rig.host_t[1].drain():
            h1.receive(dg, now)
        h1.events()
        out = h1.handle_timer(now) + h1.datagrams(now)
        if out:
            rig.host_t[1].send_many(out)
        rig.run(0.002)
        rig.switch_pass(time.monotonic())
        waited = max(waited, rig.sw.plane.state()[1]["inq"][2][1])
        if waited and not h1.queued(2):
            break
    assert waited * C.MP_BYTES >= 16384  # a large segment waited in the switch's input queue
    for _ in range(400):  # host 2 wakes
        rig.hosts_step()
        rig.run(0.002)
        rig.switch_pass(time.monotonic())
        if len(b"".join(r for vc, r in rig.got if vc == 2)) >= len(b"".join(want)):
            break
    assert data_areas(b"".join(r for vc, r in rig.got if vc == 2)) == data_areas(b"".join(want))


def test_a_ready_control_descriptor_returns_at_once(rig):
    r, w = socket.socketpair()
    try:
        w.send(b"x")
        reason, _, _, elapsed = rig.run(5.0, r.fileno())
        assert reason == CONTROL and elapsed < 1.0
    finally:
        r.close()
        w.close()


def test_a_due_retransmission_returns_for_python(rig):
    """Host 2 goes silent: the switch's retransmission timer on port 2 is Python's work."""
    recs = stream_records(1, encode_stream(1, ULAS[2], ULAS[1], 0x88B5, bytes(500)))
    rig.hosts[1].enqueue(1, recs)
    rig.hosts_step()
    t0 = time.monotonic()
    reasons = []
    while time.monotonic() - t0 < 2.0:
        reason, _, _, _ = rig.run(0.5)
        reasons.append(reason)
        rig.host_t[1].drain()  # host 1 hears nothing either: only the timer moves
        if reason == TIMER:
            break
    assert reasons[-1] == TIMER, reasons
    assert time.monotonic() - t0 >= C.RTX_TIMEOUT_MIN_S
    assert rig.sw.ports[2].link.handle_timer(time.monotonic())  # resends what host 2 never acked


def test_link_events_return_for_python():
    """A port whose link comes up raised events: the Switch's Python ran (LinkUp), so
    run() returns for the daemon's pass (the agent, the logs)."""
    r = Rig()
    try:
        reasons = []
        for _ in range(200):
            r.hosts_step()
            reason, _, _, _ = r.run(0.01)
            reasons.append(reason)
            r.switch_pass(time.monotonic())
            if EVENTS in reasons:
                break
        assert EVENTS in reasons
        assert r.sw.ports[1].counters["link_up"] + r.sw.ports[2].counters["link_up"] >= 1
    finally:
        r.close()


class _Stop(Exception):
    pass


def _switch_idle_waits(calls: int, beside=None) -> list[float]:
    """gsn-switch's driver (SwitchDaemon._run_plane) with its plane's run() replaced by one
    that records how long it was allowed to wait and says IDLE; ends after ``calls`` runs.
    Beside ``beside`` (a task that never blocks), or else beside a 0.5 s sleep that every
    task has blocked on first."""
    import socket as _socket

    import trio

    from daemons.switch import config as sconfig
    from daemons.switch.daemon import SwitchDaemon

    def free_udp():
        with _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    waits: list[float] = []

    class Recorder:
        def __init__(self, real):
            self.real = real

        def __getattr__(self, name):
            return getattr(self.real, name)

        def run(self, now, deadline, trio_fd):
            assert trio_fd >= 0  # trio's epoll descriptor: the loop may wait in C
            waits.append(deadline - now)
            if len(waits) == calls:
                raise _Stop
            return IDLE, {}, {}

    async def main(tmp):
        cfg = tmp / "sw.toml"
        cfg.write_text(f'[switch]\nruntime_dir = "{tmp}"\n' + ''.join(
            f'[[port]]\nnumber = {n}\nlocal = "127.0.0.1:{free_udp()}"\npeer = "127.0.0.1:{free_udp()}"\n'
            for n in (1, 2)))
        d = SwitchDaemon(sconfig.load(str(cfg), {}))
        assert d.core.plane is not None
        d.core.plane = Recorder(d.core.plane)
        try:
            async with trio.open_nursery() as n:
                if beside is None:
                    n.start_soon(trio.sleep, 0.5)
                    await trio.testing.wait_all_tasks_blocked()
                else:
                    n.start_soon(beside)
                with pytest.raises(_Stop):
                    await d._run_plane()
                n.cancel_scope.cancel()
        finally:
            for t in d.transports.values():
                t.close()

    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as tmp:
        trio.run(main, Path(tmp))
    return waits


def test_an_idle_switch_waits_in_c_until_trios_next_deadline_when_no_task_can_run():
    """After an idle slice, with every other task waiting (here: a 0.5 s sleep), the
    switch's next run may wait until that sleep's deadline, in C: a datagram after a quiet
    spell is forwarded at once, without trio's wake-up and a Python pass first (a ping
    through the switch paid that twice per round trip)."""
    waits = _switch_idle_waits(3)
    assert waits[0] == pytest.approx(C.SWITCH_SLICE_S)
    assert 0.3 < waits[1] <= 0.5 and 0.3 < waits[2] <= 0.5, waits


def test_an_idle_switch_keeps_its_slice_while_another_task_keeps_running():
    """A task that never blocks must keep running: the switch's loop never waits longer
    than its slice then."""
    import trio

    async def busy():
        while True:
            await trio.lowlevel.checkpoint()
    assert _switch_idle_waits(4, beside=busy) == [pytest.approx(C.SWITCH_SLICE_S)] * 4
