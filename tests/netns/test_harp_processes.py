"""HARP with real processes: 4 hosts on a non-broadcast switch; the kernel's
neighbour requests on gsn0 are answered through harpd and the HARP server."""

import json
import shutil
import signal
import socket
from ipaddress import IPv4Address
from pathlib import Path

import pytest

from daemons.constants import ETHERTYPE_ARP, VC_IP
from lab.netns import BIN, Fabric, poll
from daemons.ulpclient import UlpClient
from daemons.wire.ula import parse_ula
from harpd.constants import Op
from harpd.wire import Harp

OPTIONS = "lis gsn0 192.0.2.0/24\nrole gsn0 auto\nserver gsn0 00:10:3b:ff:ff:e0\n"
SCALE = "0.01"  # every HARP timer x0.01: reregistration 9 s, server expiry 12 s


def ping(fab, src, dst, count=1):
    return fab.ns_exec(src, "ping", "-c", str(count), "-i", "0.2", "-W", "2", dst, check=False)


def table(fab, i):
    r = fab.gsnarp(i, "-a", "-n")
    assert r.returncode == 0, r.stderr
    return {line.split()[0]: line.split() for line in r.stdout.splitlines()[1:]}


@pytest.fixture
def lis():
    with Fabric(4, broadcast=False, static={"00:10:3b:ff:ff:e0": 1}) as fab:
        fab.up(v6=False)
        for i in (1, 2, 3):  # host 4 runs no HARP at all
            fab.start_harpd(i, OPTIONS, "--timer-scale", SCALE)
        poll(lambda: {"192.0.2.1", "192.0.2.2", "192.0.2.3"} <= set(table(fab, 1)), 15,
             what="hosts 1-3 registered with the HARP server on host 1")
        yield fab


def harpd_counters(fab, i):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(str(fab.tmp / f"h{i}" / "harpd" / "control.sock"))
        s.sendall(b'{"cmd": "status"}\n')
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            assert chunk, "harpd closed the control socket"
            buf += chunk
    return json.loads(buf)["status"]["gsn0"]["counters"]


def test_rogue_host_cannot_poison_harp(lis):
    """Issue 12 item 3: host 4 (no harpd) sends HARP through its own gsnd, which stamps
    its own S_ULA: a NAK in the server's words to host 2 removes nothing, a reply
    redirecting 192.0.2.3 is ignored, a registration of 192.0.2.3 in host 3's name is
    refused by the server.  Each is counted."""
    ula2, ula3, ula4 = (lis.wait_ula(i) for i in (2, 3, 4))
    # the entry the rogue will try to remove or redirect (pinged again if a 9 s reregistration
    # round on a loaded machine replaced it between the ping and the read)
    poll(lambda: ping(lis, 2, "192.0.2.3").returncode == 0 and
         f"192.0.2.3 lladdr {ula3}" in lis.ns_exec(2, "ip", "neigh", "show", "dev", "gsn0").stdout,
         20, what="host 2 resolved 192.0.2.3 through HARP")
    ip2, ip3 = IPv4Address("192.0.2.2"), IPv4Address("192.0.2.3")
    with UlpClient(lis.ulp_path(4)) as rogue:
        rogue.bind(ETHERTYPE_ARP)
        for d_ula, msg in (
                (ula2, Harp(Op.HARP_NAK, ip2, ip3, parse_ula(ula2), bytes(6))),  # "192.0.2.3 is unknown"
                (ula2, Harp(Op.HARP_REPLY, ip3, ip2, parse_ula(ula4), parse_ula(ula2))),  # "... is at host 4"
                ("00:10:3b:ff:ff:e0", Harp(Op.INHARP_REQUEST, ip3, IPv4Address(0), parse_ula(ula3),
                                           parse_ula("00:10:3b:ff:ff:e0")))):  # registered "by host 3"
            rogue.send(parse_ula(d_ula), msg.encode(), vc=VC_IP, ethertype=ETHERTYPE_ARP)
    poll(lambda: harpd_counters(lis, 2).get("rx_harp_nak", 0) >= 1
         and harpd_counters(lis, 2).get("rx_harp_reply", 0) >= 1, 10, what="host 2 got the rogue's NAK and reply")
    assert f"192.0.2.3 lladdr {ula3}" in lis.ns_exec(2, "ip", "neigh", "show", "dev", "gsn0").stdout
    assert table(lis, 2)["192.0.2.3"][1] == ula3
    c = harpd_counters(lis, 2)
    assert c["rx_dropped_nak_not_from_server"] >= 1 and c["rx_dropped_reply_not_from_server"] >= 1
    poll(lambda: harpd_counters(lis, 1).get("rx_dropped_spoofed_sha", 0) >= 1, 10, what="server drops the spoof")
    assert table(lis, 1)["192.0.2.3"][1] == ula3
    assert ping(lis, 2, "192.0.2.3").returncode == 0


def test_kernel_resolves_through_harp_server(lis):
    assert ping(lis, 2, "192.0.2.3", count=3).returncode == 0  # no `ip neigh add` anywhere
    neigh = lis.ns_exec(2, "ip", "neigh", "show", "dev", "gsn0").stdout
    assert "192.0.2.3 lladdr 02:47:53:01:03:00" in neigh
    server = table(lis, 1)
    assert {"192.0.2.1", "192.0.2.2", "192.0.2.3"} <= set(server)
    assert server["192.0.2.3"][1] == "02:47:53:01:03:00" and server["192.0.2.3"][3] == "dynamic"
    assert ping(lis, 3, "192.0.2.1").returncode == 0
    # an address nobody registered: the server NAKs, the kernel gives up
    assert ping(lis, 2, "192.0.2.77").returncode != 0


def test_neighbour_entries_age_and_revalidate(lis):
    assert ping(lis, 2, "192.0.2.3").returncode == 0
    # keep using it past the (scaled) 15-minute cache lifetime: it is revalidated, never lost
    for _ in range(12):
        assert ping(lis, 2, "192.0.2.3").returncode == 0
        __import__("time").sleep(1.0)
    assert "192.0.2.3" in table(lis, 2)


def test_static_entry_for_a_host_without_harp(lis):
    ula4 = lis.wait_ula(4)
    assert ping(lis, 2, "192.0.2.4").returncode != 0  # unknown to HARP
    r = lis.gsnarp(2, "-s", "192.0.2.4", ula4)
    assert r.returncode == 0, r.stderr
    lis.ns_exec(4, "ip", "neigh", "replace", "192.0.2.2", "lladdr", lis.wait_ula(2), "dev", "gsn0")  # host 4's own
    poll(lambda: ping(lis, 2, "192.0.2.4").returncode == 0, 10, what="ping to the static host")
    assert table(lis, 2)["192.0.2.4"][3] == "static"
    # static entries persist across a harpd restart
    lis.kill("harpd2", signal.SIGKILL)
    lis.start_harpd(2, OPTIONS, "--timer-scale", SCALE)
    assert table(lis, 2)["192.0.2.4"][3] == "static"
    assert lis.gsnarp(2, "-d", "192.0.2.4").returncode == 0
    assert lis.gsnarp(2, "-d", "192.0.2.4").returncode == 1
    assert "192.0.2.4" not in table(lis, 2)


def test_server_kill9_and_restart_table_comes_back(lis):
    assert ping(lis, 2, "192.0.2.3").returncode == 0
    lis.kill("harpd1", signal.SIGKILL)
    lis.start_harpd(1, OPTIONS, "--timer-scale", SCALE)
    # clients notice at their next (9 s) reregistration and register again
    poll(lambda: {"192.0.2.2", "192.0.2.3"} <= set(table(lis, 1)), 12, what="server table back")
    assert ping(lis, 3, "192.0.2.2").returncode == 0


def test_gsnarp_usage_errors(lis):
    assert lis.gsnarp(2, "-s", "10.9.9.9", "02:00:00:00:00:01").returncode == 1  # not in the LIS
    r = lis.gsnarp(2, "-s", "192.0.2.50", "zz")
    assert r.returncode == 1 and "ULA" in r.stderr


OPTIONS6 = OPTIONS + "lis gsn0 2001:db8::/64\n"  # and, implicitly, fe80::/64


def link_local(fab, i):
    out = fab.ns_exec(i, "ip", "-6", "-o", "addr", "show", "dev", "gsn0", "scope", "link").stdout
    return out.split("inet6 ", 1)[1].split("/", 1)[0]


@pytest.fixture
def lis6():
    with Fabric(3, broadcast=False, static={"00:10:3b:ff:ff:e0": 1}) as fab:
        fab.up(v6=True)
        lls = {i: poll(lambda i=i: "inet6 fe80" in fab.ns_exec(i, "ip", "-6", "addr", "show", "dev", "gsn0").stdout
                       and link_local(fab, i), 10, what=f"host {i} link-local") for i in (1, 2, 3)}
        for i in (1, 2, 3):
            fab.start_harpd(i, OPTIONS6, "--timer-scale", SCALE)
        want = {"192.0.2.2", "2001:db8::2", "2001:db8::3", lls[2], lls[3]}
        poll(lambda: want <= set(table(fab, 1)), 15, what="IPv4 and IPv6 registered with the HARP server")
        fab.lls = lls
        yield fab


def pings(fab, i, *args) -> bool:
    """One echo answered within 2 s (polled: on a loaded machine the first resolution
    may outlast the kernel's own probes, and the kernel then tries again)."""
    return fab.ns_exec(i, "ping", "-c", "1", "-W", "2", *args, check=False).returncode == 0


def test_ping6_on_a_non_broadcast_fabric(lis6):
    """Issue 10 item 15: the kernel's IPv6 neighbour requests go to harpd (app_solicit),
    which resolves global and link-local addresses through the HARP server."""
    poll(lambda: pings(lis6, 2, "-6", "2001:db8::3"), 15, what="ping6 2001:db8::3 from host 2")
    neigh = lis6.ns_exec(2, "ip", "-6", "neigh", "show", "dev", "gsn0").stdout
    assert f"2001:db8::3 lladdr {lis6.wait_ula(3)}" in neigh
    poll(lambda: pings(lis6, 3, "-6", f"{lis6.lls[2]}%gsn0"), 15, what="ping6 to host 2's link-local from host 3")
    assert lis6.ns_exec(2, "ping", "-c", "1", "-W", "2", "192.0.2.3", check=False).returncode == 0  # IPv4 still
    # an IPv6 address nobody registered: the server NAKs, the kernel gives up
    assert lis6.ns_exec(2, "ping", "-6", "-c", "1", "-W", "2", "2001:db8::77", check=False).returncode != 0
    row = table(lis6, 1)["2001:db8::3"]
    assert row[1] == lis6.wait_ula(3) and row[2] == "2001:db8::/64" and row[3] == "dynamic"


def test_gsnarp_on_a_broadcast_fabric_names_and_one_host():
    """Issue 10 item 16: on a broadcast fabric the kernel resolves by itself and harpd's
    table stays empty; gsnarp -a shows the kernel's neighbours on gsn0 instead of
    nothing.  Names come from the host's resolver (here the namespace's /etc/hosts)."""
    with Fabric(3) as fab:
        ulas = fab.up(v6=False)
        for i in (2, 3):
            fab.start_harpd(i, OPTIONS, "--timer-scale", SCALE)
        etc = Path("/etc/netns") / fab.host_ns[1]
        etc.mkdir(parents=True)
        try:
            (etc / "hosts").write_text("127.0.0.1 localhost\n192.0.2.3 node3\n")
            poll(lambda: ping(fab, 2, "192.0.2.3").returncode == 0, 15, what="ping over kernel ARP")
            t = table(fab, 2)
            assert t["192.0.2.3"][1] == ulas[2] and t["192.0.2.3"][3] == "kernel" and t["192.0.2.3"][-1] == "gsn0"
            sock = str(fab.tmp / "h2" / "harpd" / "control.sock")

            def gsnarp(*args):
                return fab.ns_exec(2, str(BIN / "gsnarp"), "--socket", sock, *args, check=False)

            r = gsnarp("node3")
            assert r.returncode == 0 and r.stdout.splitlines()[1].startswith(f"node3 (192.0.2.3) {ulas[2]}")
            r = gsnarp("-a")
            assert "node3 (192.0.2.3)" in r.stdout
            r = gsnarp("-n", "node3")
            assert r.returncode == 0 and r.stdout.splitlines()[1].split()[:2] == ["192.0.2.3", ulas[2]]
            r = gsnarp("-n", "192.0.2.77")
            assert r.returncode == 1 and r.stderr == "gsnarp: 192.0.2.77: no entry\n"
        finally:
            shutil.rmtree(etc, ignore_errors=True)
