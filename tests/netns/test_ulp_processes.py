"""gsnd's ULP socket between real processes: switch + 2 gsnd in namespaces.
A slow reader loses nothing (the sender is held back through the fabric); one that
stops reading past the bound has its drops counted and the sender gets ERROR
frames; the 4 MiB limit holds end to end."""

import socket
import threading
import time

import pytest

from daemons import constants as C
from lab.netns import Fabric
from daemons.ulpclient import UlpClient
from daemons.wire.ula import parse_ula
from daemons.wire.ulp import Op

ET = 0x88B5


@pytest.fixture(scope="module")
def fabric():
    with Fabric(2) as fab:
        fab.start_switch()
        for i in (1, 2):
            fab.start_gsnd(i)
        for i in (1, 2):
            fab.wait_ula(i)
        yield fab


def states(fab) -> dict:
    """Counters to tell where Messages went, for failure messages."""
    out = {f"gsnd{i}": {"link": st["link"]["counters"], "core": st["counters"], "reassembly": st["reassembly"],
                        "ulp": st["ulp"]} for i in (1, 2) if (st := fab.gsnd_status(i))}
    out["switch"] = {p: v["link"]["counters"] | v["counters"] for p, v in fab.switch_status()["ports"].items()}
    return out


def delivery(fab, i):
    return fab.gsnd_status(i)["ulp"]["delivery"]


def test_a_slow_reader_gets_every_message_in_order(fabric):
    n, size = 2000, 16384  # 32 MB: twice what gsnd's socket to the reader holds
    dst = parse_ula(fabric.wait_ula(2))
    with UlpClient(fabric.ulp_path(2)) as rx, UlpClient(fabric.ulp_path(1)) as tx:
        rx.bind(ET)
        tx.bind(ET)

        def send():
            for k in range(n):
                tx.send(dst, k.to_bytes(4, "big") * (size // 4), vc=1, ethertype=ET)

        sender = threading.Thread(target=send)
        sender.start()
        got = []
        while len(got) < n:
            try:
                f = rx.recv(timeout=10)
            except TimeoutError:
                raise AssertionError(f"{len(got)} of {n} arrived, then nothing: {states(fabric)}") from None
            if f.op is Op.RECV:
                got.append(int.from_bytes(f.payload[:4], "big"))
            time.sleep(0.002)
        sender.join(10)
        assert got == list(range(n))
        tx.sock.settimeout(0)
        with pytest.raises(BlockingIOError):  # no ERROR came back to the sender
            tx.sock.recv(100)
    d = delivery(fabric, 2)
    assert d["rx_held"] > 0 and not any(k.startswith("rx_dropped") for k in d), d


def test_a_reader_that_stops_past_the_bound_is_counted_and_the_sender_told(fabric):
    n, size = 600, 60000
    dst = parse_ula(fabric.wait_ula(2))
    before = delivery(fabric, 2).get("rx_dropped_not_reading", 0)
    arrived_before = fabric.gsnd_status(2)["counters"].get("rx_messages", 0)
    with UlpClient(fabric.ulp_path(2)) as rx, UlpClient(fabric.ulp_path(1)) as tx:
        rx.bind(ET)
        tx.bind(ET)
        for k in range(n):
            tx.send(dst, k.to_bytes(4, "big") * (size // 4), vc=1, ethertype=ET)
        told, deadline = 0, time.monotonic() + 30
        while time.monotonic() < deadline:
            st = fabric.gsnd_status(2)  # every Message at gsnd2 before its drops are final
            arrived = st["counters"].get("rx_messages", 0) - arrived_before
            dropped = st["ulp"]["delivery"].get("rx_dropped_not_reading", 0) - before
            while True:
                try:
                    f = tx.recv(timeout=0.2)
                except TimeoutError:
                    break
                if f.op is Op.STATUS:  # a link flap on a loaded machine says so; not ours to judge
                    continue
                assert (f.op, f.vc, f.ethertype, f.ula) == (Op.ERROR, 1, ET, dst), f
                assert b"dropped at " + fabric.wait_ula(2).encode() in f.payload
                told += int(f.payload.split()[0])
            if arrived == n and dropped and told == dropped:
                break
        assert arrived == n and dropped > 0 and told == dropped, (arrived, dropped, told, states(fabric))
        held = 0
        while True:  # what the reader's socket kept, in order, and nothing else
            try:
                f = rx.recv(timeout=0.5)
            except TimeoutError:
                break
            if f.op is Op.STATUS:
                continue
            assert int.from_bytes(f.payload[:4], "big") == held
            held += 1
        assert held + dropped == n


def test_the_ulp_payload_limit_holds_end_to_end(fabric):
    dst = parse_ula(fabric.wait_ula(2))
    with UlpClient(fabric.ulp_path(2)) as rx, UlpClient(fabric.ulp_path(1)) as tx:
        rx.bind(ET)
        tx.bind(ET)
        big = bytes(range(256)) * (C.ULP_MAX_PAYLOAD // 256)
        tx.send(dst, big, vc=3, ethertype=ET)
        tx.send(dst, big + b"!", vc=3, ethertype=ET)
        err = tx.recv(timeout=5)
        assert err.op is Op.ERROR and str(C.ULP_MAX_PAYLOAD).encode() in err.payload
        f = rx.recv(timeout=10)
        assert f.op is Op.RECV and f.payload == big
        with pytest.raises(socket.timeout):
            rx.recv(timeout=1)
