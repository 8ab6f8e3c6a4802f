"""Fabrics of several gsn-switch processes in network namespaces: a ring of 3 and a
2x2 mesh, hosts on every switch; ping and broadcast across switches, nothing on an
idle loop but keepalives, re-routing around a cut inter-switch cable, a switch
killed with -9 and restarted."""

import re
import signal
import subprocess
import time

import pytest

from daemons import constants as C
from lab.netns import SwitchedFabric, poll
from daemons.ulpclient import UlpClient
from daemons.wire.ulp import Op

ET = 0x88B5


def ping(fab, src, dst, count=1):
    return fab.ns_exec(src, "ping", "-c", str(count), "-i", "0.2", "-W", "2", f"192.0.2.{dst}", check=False,
                       timeout=30).returncode == 0


def broadcast_counts(fab, sender, payload=b"to everyone"):
    """Send one broadcast Message from host ``sender``; how many copies each host got in 1.5 s."""
    clients = {i: UlpClient(fab.ulp_path(i)) for i in range(1, fab.n + 1)}
    try:
        for c in clients.values():
            c.bind(ET)
        clients[sender].send(C.ULA_BROADCAST, payload, vc=1, ethertype=ET)
        counts = {}
        deadline = time.monotonic() + 1.5
        for i, c in clients.items():
            n = 0
            while True:
                try:
                    f = c.recv(timeout=max(0.05, deadline - time.monotonic()))
                except TimeoutError:
                    break
                if f.op is Op.RECV and f.payload == payload:
                    n += 1
            counts[i] = n
        return counts
    finally:
        for c in clients.values():
            c.close()


def through_switches(fab):
    """(Messages + Admin micropackets, datagrams) received by all switch ports so far."""
    upper = dgrams = 0
    for k in fab.switch_ids:
        st = fab.switch_status(k)
        upper += sum(p["counters"].get("rx_messages", 0) + p["counters"].get("rx_admin", 0)
                     for p in st["ports"].values())
        dgrams += sum(p["cable"].get("rx_datagrams", 0) for p in st["ports"].values())
    return upper, dgrams


def bring_up(fab, ip=True):
    fab.start_switch()
    for i in range(1, fab.n + 1):
        fab.start_gsnd(i)
    for i in range(1, fab.n + 1):
        fab.wait_ula(i, timeout=20)
    poll(fab.converged, 30, interval=0.2, what="every switch's fabric map")


@pytest.fixture
def ring():
    with SwitchedFabric(hosts=[1, 2, 3], links=[(1, 2), (2, 3), (3, 1)], prefix="r") as fab:
        bring_up(fab)
        yield fab


def test_ring_idle_carries_only_keepalives_then_ping_and_broadcast(ring):
    m = ring.fabric_map(1)
    assert m["manager"] == 1 and len(m["switches"]) == 3 and len(m["links"]) == 3
    assert sum(ln["tree"] for ln in m["links"]) == 2 and len(m["endpoints"]) == 3
    # idle loop: no Message and no Admin crosses any switch in 2 s (keepalives are link-level)
    # dt spans both reads of the counters, so it bounds the window each switch counted in
    # (a read is slow on a loaded machine: the window is not just the sleep)
    t0 = time.monotonic()
    upper0, dgrams0 = through_switches(ring)
    time.sleep(2.0)
    (upper1, dgrams1), dt = through_switches(ring), time.monotonic() - t0
    print(f"idle ring of 3 switches: {upper1 - upper0} Messages/Admin, {dgrams1 - dgrams0} datagrams "
          f"(keepalives) received by the 9 switch ports in {dt:.1f} s")
    assert upper1 == upper0
    # keepalives only: one per port each KEEPALIVE_S at most, nothing like a storm
    assert dgrams1 - dgrams0 <= 9 * (dt / C.KEEPALIVE_S + 2)
    for i in (1, 2, 3):
        assert broadcast_counts(ring, i, b"bcast %d" % i) == {1: 1, 2: 1, 3: 1}
    for i in (1, 2, 3):
        ring.ip_address(i, v6=None)
    for a in (1, 2, 3):
        for b in (1, 2, 3):
            if a != b:
                assert ping(ring, a, b), f"ping {a} -> {b}"


def test_cut_inter_switch_cable_reroutes_within_two_dead_intervals(ring):
    for i in (1, 2):
        ring.ip_address(i, v6=None)
    assert ping(ring, 1, 2)
    direct = 21  # cable 1 joins switches 1 and 2, port 21 at both ends
    ula2 = ring.wait_ula(2)
    assert {e["ula"]: e["port"] for e in ring.switch_status(1)["table"]}[ula2] == direct
    p = subprocess.Popen(["ip", "netns", "exec", ring.host_ns[0], "ping", "-D", "-i", "0.1", "-W", "1",
                          "192.0.2.2"], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(1.5)
        t_cut = time.time()
        ring.cut(1)
        time.sleep(2 * C.DEAD_INTERVAL_S + 3)
    finally:
        p.send_signal(signal.SIGINT)
        out = p.communicate(timeout=10)[0]
    replies = [float(t) for t in re.findall(r"^\[(\d+\.\d+)\] \d+ bytes from", out, re.M)]
    after = [t for t in replies if t > t_cut]
    assert after, out[-2000:]
    outage = after[0] - max([t for t in replies if t <= t_cut], default=t_cut)
    print(f"ping outage across the cut: {outage:.2f} s (bound {2 * C.DEAD_INTERVAL_S} s)")
    assert outage <= 2 * C.DEAD_INTERVAL_S, outage
    assert {e["ula"]: e["port"] for e in ring.switch_status(1)["table"]}[ula2] == 23  # via switch 3
    ring.mend(1)
    poll(lambda: {e["ula"]: e["port"] for e in ring.switch_status(1)["table"]}[ula2] == direct, 15,
         interval=0.2, what="the shortest path back")
    assert ping(ring, 1, 2)


def test_switch_kill9_and_restart_rejoins(ring):
    for i in (1, 2, 3):
        ring.ip_address(i, v6=None)
    assert ping(ring, 1, 2)
    ring.kill("switch2", signal.SIGKILL)
    poll(lambda: len(ring.fabric_map(1)["switches"]) == 2 and ring.fabric_map(1)["phase"] == "idle",
         2 * C.DEAD_INTERVAL_S + 5, interval=0.2, what="switch 1 to map the fabric without switch 2")
    assert ping(ring, 1, 3)
    ring.start_switch(2)
    ring.wait_ula(2, timeout=20)
    poll(ring.converged, 20, interval=0.2, what="the fabric with switch 2 again")
    assert ping(ring, 1, 2, count=2) and ping(ring, 3, 2)


def test_mesh_2x2_any_host_pings_any_host_broadcast_once():
    with SwitchedFabric(hosts=[1, 2, 3, 4, 4], links=[(1, 2), (2, 4), (4, 3), (3, 1)], prefix="q") as fab:
        bring_up(fab)
        assert broadcast_counts(fab, 5) == {i: 1 for i in range(1, 6)}
        for i in range(1, 6):
            fab.ip_address(i, v6=None)
        for a in range(1, 6):
            for b in range(1, 6):
                if a != b:
                    assert ping(fab, a, b), f"ping {a} -> {b}"
