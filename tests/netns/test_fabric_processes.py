"""gsn-switch + 3 gsnd as real processes in separate network namespaces."""

import signal

import pytest

from daemons.constants import DEAD_INTERVAL_S
from daemons.ulpclient import UlpClient
from daemons.wire.ula import parse_ula
from daemons.wire.ulp import Op
from lab.netns import Fabric, poll

ET = 0x88B5


def exchange(fab, src, dst, payloads, vc=1):
    """Send payloads from host src to host dst through the ULP sockets; return what arrived."""
    dst_ula = parse_ula(fab.wait_ula(dst))
    with UlpClient(fab.ulp_path(dst)) as rx, UlpClient(fab.ulp_path(src)) as tx:
        rx.bind(ET)
        tx.bind(ET)
        for p in payloads:
            tx.send(dst_ula, p, vc=vc, ethertype=ET)
        got = []
        while len(got) < len(payloads):
            try:
                f = rx.recv(timeout=5)
            except TimeoutError:
                break
            if f.op is Op.RECV:
                got.append((f.vc, f.payload))
    return got


@pytest.fixture
def fabric():
    with Fabric(3) as fab:
        fab.start_switch()
        for i in (1, 2, 3):
            fab.start_gsnd(i)
        for i in (1, 2, 3):
            fab.wait_ula(i)
        yield fab


def test_hosts_exchange_messages_on_every_vc(fabric):
    ulas = {fabric.wait_ula(i) for i in (1, 2, 3)}
    assert ulas == {"02:47:53:01:01:00", "02:47:53:01:02:00", "02:47:53:01:03:00"}
    for vc, size in ((0, 2000), (1, 60000), (2, 1000), (3, 1_000_000)):
        payloads = [bytes([k]) * size for k in range(5)]
        assert exchange(fabric, 1, 2, payloads, vc=vc) == [(vc, p) for p in payloads]
    assert exchange(fabric, 3, 1, [b"back"]) == [(1, b"back")]
    st = fabric.switch_status()
    assert {e["ula"]: e["port"] for e in st["table"]} == {f"02:47:53:01:0{i}:00": i for i in (1, 2, 3)}


def test_switch_kill9_and_restart_links_and_traffic_resume(fabric):
    assert exchange(fabric, 1, 3, [b"before"]) == [(1, b"before")]
    before = {i: fabric.gsnd_status(i)["link"]["counters"].get("link_up", 0) for i in (1, 2, 3)}
    fabric.kill("switch", signal.SIGKILL)
    poll(lambda: fabric.gsnd_status(1)["link"]["state"] != "up", 5, what="gsnd1 to notice the dead switch")
    fabric.start_switch()
    for i in (1, 2, 3):
        poll(lambda i=i: fabric.gsnd_status(i)["link"]["counters"].get("link_up", 0) > before[i], 10,
             what=f"gsnd{i} link back up")
        fabric.wait_ula(i)
    assert exchange(fabric, 1, 3, [b"after"]) == [(1, b"after")]
    assert exchange(fabric, 2, 1, [b"and back"]) == [(1, b"and back")]
    for i in (1, 2, 3):  # the gsnd processes were never restarted
        assert fabric.procs[f"gsnd{i}"].poll() is None


def test_stopping_a_gsnd_marks_the_switch_port_down(fabric):
    assert fabric.switch_status()["ports"]["2"]["link"]["state"] == "up"
    fabric.kill("gsnd2")
    # the switch notices the silence after the link's dead interval
    poll(lambda: fabric.switch_status()["ports"]["2"]["link"]["state"] != "up", DEAD_INTERVAL_S + 5,
         what="port 2 down")
    assert fabric.switch_status()["ports"]["1"]["link"]["state"] == "up"
    fabric.start_gsnd(2)
    poll(lambda: fabric.switch_status()["ports"]["2"]["link"]["state"] == "up", 10, what="port 2 up again")
    assert exchange(fabric, 1, 2, [b"welcome back"]) == [(1, b"welcome back")]
