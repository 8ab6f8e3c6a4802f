"""Hostile ULP clients against real gsnd processes whose data plane serves the ULP
socket in C (daemons/_ulploop.h): a thousand idle connections, 100k random and mutated
frames, a client that stops reading, clients that leave with frames in flight.  gsnd
must stay up, keep serving the well-behaved client, count what it refuses or drops,
and give every descriptor back."""

from __future__ import annotations

import os
import random
import resource
import socket
import threading
import time

import pytest

from daemons import constants as C
from daemons.ulpclient import UlpClient
from daemons.wire.ula import parse_ula
from daemons.wire.ulp import HEADER, Frame, Op
from lab.netns import Fabric

ET, ET2 = 0x88B5, 0x88B6


@pytest.fixture(scope="module")
def fabric():
    with Fabric(2, prefix="rv", keys=False) as fab:  # a keyed cable keeps the Python path
        fab.start_switch()
        for i in (1, 2):
            fab.start_gsnd(i)
        for i in (1, 2):
            fab.wait_ula(i)
            compiled(fab, i)
        yield fab


def gsnd_pid(fab, i: int) -> int:
    """gsnd's own pid (``ip netns exec`` execs it, so it is the Popen's)."""
    pid = fab.procs[f"gsnd{i}"].pid
    assert b"gsnd" in open(f"/proc/{pid}/cmdline", "rb").read()
    return pid


def fds(fab, i: int) -> int:
    return len(os.listdir(f"/proc/{gsnd_pid(fab, i)}/fd"))


def ulp(fab, i: int) -> dict:
    return fab.gsnd_status(i)["ulp"]


def alive(fab, i: int) -> None:
    assert fab.procs[f"gsnd{i}"].poll() is None, fab.diagnostics()


def wait_for(cond, timeout: float = 20.0, what: str = ""):
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def round_trip(tx: UlpClient, rx: UlpClient, dst: bytes, tag: bytes, *, vc: int = 1, et: int = ET,
               timeout: float = 10.0) -> float:
    """tx sends one Message tagged ``tag``; rx must get it (other RECVs skipped); the seconds it took."""
    t0 = time.monotonic()
    tx.send(dst, tag + bytes(64), vc=vc, ethertype=et)
    while True:
        left = t0 + timeout - time.monotonic()
        assert left > 0, f"{tag!r} did not arrive"
        f = rx.recv(timeout=left)
        if f.op is Op.RECV and f.payload.startswith(tag):
            assert (f.vc, f.ethertype) == (vc, et)
            return time.monotonic() - t0


def connect(s: socket.socket, path: str, timeout: float = 10.0) -> None:
    """Connect, waiting while gsnd's listen backlog is full (EAGAIN)."""
    s.setblocking(False)
    deadline = time.monotonic() + timeout
    while True:
        try:
            return s.connect(path)
        except BlockingIOError:
            assert time.monotonic() < deadline, "gsnd stopped accepting"
            time.sleep(0.005)


def compiled(fab, i: int) -> None:
    assert b'"compiled": true' in fab.logs[f"gsnd{i}"].read_bytes(), "gsnd runs without its data plane"


@pytest.fixture
def many_fds():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_thousand_idle_clients_are_capped_and_the_working_one_is_served(fabric, many_fds):
    path, dst = fabric.ulp_path(1), parse_ula(fabric.wait_ula(2))
    wait_for(lambda: ulp(fabric, 1)["clients"] == 0 and ulp(fabric, 2)["clients"] == 0, what="no clients")
    fds0 = fds(fabric, 1)
    refused0 = ulp(fabric, 1)["counters"].get("refused_client_cap", 0)
    idle: list[socket.socket] = []
    with UlpClient(fabric.ulp_path(2)) as rx, UlpClient(path) as tx:
        rx.bind(ET)
        tx.bind(ET)
        try:
            for _ in range(1000):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                idle.append(s)
                connect(s, path)
            extra = 1000 - (C.ULP_MAX_CLIENTS - 1)
            wait_for(lambda: ulp(fabric, 1)["counters"].get("refused_client_cap", 0) - refused0 == extra,
                     what=f"{extra} refused")
            assert ulp(fabric, 1)["clients"] == C.ULP_MAX_CLIENTS
            for k in range(20):  # the working client, with every slot taken by idle ones
                round_trip(tx, rx, dst, b"cap%d." % k)
            for s in idle[-3:]:  # a refused one is told why, then closed
                s.settimeout(5)
                f = Frame.decode(s.recv(1000))
                assert f.op is Op.ERROR and b"too many ULP clients" in f.payload
                assert s.recv(1000) == b""
            held = fds(fabric, 1)
            assert held < fds0 + C.ULP_MAX_CLIENTS + 8, (fds0, held)  # no fd kept per refused client
        finally:
            for s in idle:
                s.close()
    wait_for(lambda: ulp(fabric, 1)["clients"] == 0, what="the clients gone")
    wait_for(lambda: fds(fabric, 1) == fds0, what=f"gsnd1's fds back to {fds0}")
    alive(fabric, 1)


def hostile_frames(rng: random.Random, dst: bytes, n: int):
    """Raw bytes, real frames mutated (bits flipped, cut, extended), every op and VC,
    unknown ops, reserved and privileged EtherTypes, the notice protocol, big frames."""
    ets = [ET, ET2, 0x0800, 0x86DD, 0x0806, C.ETHERTYPE_OUI_EXTENDED, 0, 0xFFFF]
    for k in range(n):
        kind = rng.randrange(8)
        if kind == 0:
            yield rng.randbytes(rng.randrange(40))
            continue
        op = rng.choice([Op.SEND, Op.SEND, Op.BIND, Op.UNBIND, rng.randrange(256)])
        ula = rng.choice([dst, rng.randbytes(6), b"\xff" * 6, bytes(6)])
        payload = (C.ULP_NOTICE_PROTOCOL if rng.random() < 0.05 else b"") + b"bad%d." % k
        payload += rng.randbytes(rng.randrange(200) if rng.random() < 0.99 else rng.randrange(70000))
        f = bytearray(HEADER.pack(int(op), rng.choice([0, 1, 2, 3, rng.randrange(256)]), rng.choice(ets), ula))
        f += payload
        if kind >= 5:
            for _ in range(rng.randrange(1, 4)):
                i = rng.randrange(len(f))
                f[i] ^= 1 << rng.randrange(8)
        if kind == 7:
            f = f[: rng.randrange(len(f) + 1)]
        yield bytes(f)


def test_100k_hostile_frames_leave_gsnd_serving(fabric):
    dst = parse_ula(fabric.wait_ula(2))
    before = ulp(fabric, 1)["counters"]
    replies = [0]
    with UlpClient(fabric.ulp_path(2)) as rx, UlpClient(fabric.ulp_path(1)) as tx, \
            UlpClient(fabric.ulp_path(1)) as bad:
        rx.bind(ET)
        tx.bind(ET)
        stop = threading.Event()

        def drain():  # the hostile client reads its ERRORs (else they are held, then dropped: also fine)
            bad.sock.settimeout(0.2)
            while not stop.is_set():
                try:
                    if bad.sock.recv(1 << 20):
                        replies[0] += 1
                except (TimeoutError, BlockingIOError):
                    pass
                except OSError:
                    return

        reader = threading.Thread(target=drain)
        reader.start()
        try:
            bad.sock.settimeout(30)
            for k, f in enumerate(hostile_frames(random.Random(11), dst, 100_000)):
                bad.sock.send(f)
                if k % 20_000 == 0:
                    alive(fabric, 1)
                    round_trip(tx, rx, dst, b"mid%d." % k)
            round_trip(tx, rx, dst, b"after.")
            wait_for(lambda: replies[0] > 1000, what="ERROR answers")
        finally:
            stop.set()
            reader.join(5)
    alive(fabric, 1)
    after = ulp(fabric, 1)["counters"]
    moved = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
    assert moved.get("rx_frames_to_python", 0) > 10_000, moved
    assert moved.get("tx_direct", 0) > 1000, moved  # the well-formed SENDs among them queued in C
    assert moved.get("rx_oversized_frame", 0) == 0, moved  # 70000 bytes is within the limit
    for reason in ("rx_bad_frame_empty", "rx_unexpected_op", "tx_refused_reserved_protocol"):
        assert moved.get(reason, 0) > 0, (reason, moved)
    assert any(k.startswith("rx_bad_frame_") and k != "rx_bad_frame_empty" for k in moved), moved


def test_a_client_that_stops_reading_holds_only_its_vc_and_its_drops_are_counted(fabric):
    dst = parse_ula(fabric.wait_ula(2))
    d0 = ulp(fabric, 2)["delivery"]
    with UlpClient(fabric.ulp_path(2)) as stalled, UlpClient(fabric.ulp_path(2)) as other, \
            UlpClient(fabric.ulp_path(1)) as tx, UlpClient(fabric.ulp_path(1)) as tx2:
        stalled.bind(ET)
        other.bind(ET2)
        tx.bind(ET)
        tx2.bind(ET2)
        for k in range(400):  # 24 MB: three times what gsnd's socket to it holds
            tx.send(dst, k.to_bytes(4, "big") * 15000, vc=1, ethertype=ET)
        wait_for(lambda: ulp(fabric, 2)["delivery"].get("rx_held", 0) > d0.get("rx_held", 0), what="a hold")
        worst = max(round_trip(tx2, other, dst, b"vc2.%d." % k, vc=2, et=ET2) for k in range(20))
        assert worst < C.ULP_HOLD_S, worst  # VC2 is not held back by VC1's stalled client
        wait_for(lambda: ulp(fabric, 2)["delivery"].get("rx_dropped_not_reading", 0)
                 > d0.get("rx_dropped_not_reading", 0), what="the not-reading drops")
        got = 0
        stalled.sock.settimeout(0.5)
        while True:  # what it kept is in order, from the start
            try:
                f = stalled.recv(timeout=0.5)
            except TimeoutError:
                break
            if f.op is Op.RECV:
                assert int.from_bytes(f.payload[:4], "big") == got
                got += 1
        assert 0 < got < 400
        round_trip(tx, stalled, dst, b"again.")  # read again: served again
    alive(fabric, 2)


def test_clients_that_leave_mid_stream_free_everything_and_their_fd_is_reused_cleanly(fabric):
    dst, src = parse_ula(fabric.wait_ula(2)), parse_ula(fabric.wait_ula(1))
    wait_for(lambda: ulp(fabric, 2)["clients"] == 0, what="no clients")
    fds0 = fds(fabric, 2)
    with UlpClient(fabric.ulp_path(1)) as tx, UlpClient(fabric.ulp_path(1)) as back:
        tx.bind(ET)
        back.bind(ET2)
        for k in range(30):
            leaver = UlpClient(fabric.ulp_path(2))
            leaver.bind(ET)
            for _ in range(40):  # RECVs arriving while it goes: some read, the rest left unread
                tx.send(dst, bytes(16384), ethertype=ET)
            for _ in range(k % 5):
                leaver.recv(timeout=10)
            for _ in range(k % 7):  # SENDs it leaves in its socket as it closes
                leaver.send(src, b"leaving%d." % k, ethertype=ET2)
            leaver.close()
        wait_for(lambda: ulp(fabric, 2)["clients"] == 0, what="the leavers gone")
        with UlpClient(fabric.ulp_path(2)) as rx:  # most likely on a leaver's fd number
            rx.bind(ET)
            while True:  # Messages still in flight to the old binding may come: none is corrupt
                try:
                    f = rx.recv(timeout=1)
                except TimeoutError:
                    break
                assert f.op is Op.RECV and f.payload == bytes(16384), f
            for k in range(10):
                round_trip(tx, rx, dst, b"fresh%d." % k)
        left = sum(k % 7 for k in range(30))
        seen = 0
        back.sock.settimeout(2)
        while True:  # every SEND left in a closing socket was still read and sent
            try:
                f = back.recv(timeout=2)
            except TimeoutError:
                break
            seen += f.op is Op.RECV and f.payload.startswith(b"leaving")
        assert seen == left, (seen, left)
    wait_for(lambda: ulp(fabric, 2)["clients"] == 0, what="no clients")
    wait_for(lambda: fds(fabric, 2) == fds0, what=f"gsnd2's fds back to {fds0}")
    alive(fabric, 2)
