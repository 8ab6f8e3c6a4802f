"""IP over GSN (RFC 2835) between real hosts: ping, full MTU, IPv6, bulk TCP,
tcpdump, kill -9 and restart, a lossy underlay."""

import signal
import textwrap

import pytest

from lab.netns import Fabric, poll

SERVER = textwrap.dedent("""
    import hashlib, socket, sys
    s = socket.socket(socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], 5001)); s.listen(1)
    print('listening', flush=True)
    c, _ = s.accept(); h = hashlib.sha256(); n = 0
    while True:
        b = c.recv(1 << 20)
        if not b: break
        h.update(b); n += len(b)
    print(n, h.hexdigest(), flush=True)
""")

CLIENT = textwrap.dedent("""
    import hashlib, socket, sys
    total = int(sys.argv[2]); chunk = bytes(range(256)) * 4096 * 4  # 4 MiB pattern
    s = socket.create_connection((sys.argv[1], 5001), timeout=120)
    h = hashlib.sha256(); sent = 0
    while sent < total:
        b = chunk[: min(len(chunk), total - sent)]
        s.sendall(b); h.update(b); sent += len(b)
    s.shutdown(socket.SHUT_WR); s.recv(1); s.close()
    print(sent, h.hexdigest(), flush=True)
""")


def tcp_transfer(fab, src, dst, nbytes, addr=None):
    """Send nbytes over TCP from host src to host dst; (sent, digest) == (received, digest)?"""
    import subprocess
    import sys
    addr = addr or f"192.0.2.{dst}"
    ns = fab.host_ns
    srv = subprocess.Popen(["ip", "netns", "exec", ns[dst - 1], sys.executable, "-c", SERVER, addr],
                           stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout.readline().strip() == "listening"
        cli = fab.ns_exec(src, sys.executable, "-c", CLIENT, addr, str(nbytes), timeout=600)
        out, _ = srv.communicate(timeout=60)
    finally:
        srv.kill()
    return cli.stdout.split(), out.split()


@pytest.fixture
def hosts():
    with Fabric(3, keys=False) as fab:  # plain cables: IP takes the compiled data plane (keyed ones: test_cable_auth)
        fab.up()
        yield fab


def ping(fab, src, dst, *extra, count=3):
    return fab.ns_exec(src, "ping", "-c", str(count), "-i", "0.2", "-W", "2", *extra, dst, check=False)


def test_ping_both_ways_ipv6_and_full_mtu(hosts):
    assert ping(hosts, 1, "192.0.2.2").returncode == 0
    assert ping(hosts, 2, "192.0.2.1").returncode == 0
    assert ping(hosts, 3, "2001:db8::1").returncode == 0
    r = ping(hosts, 1, "192.0.2.3", "-M", "do", "-s", "65252", count=2)
    assert r.returncode == 0 and "65260 bytes from" in r.stdout
    r = ping(hosts, 1, "192.0.2.3", "-M", "do", "-s", "65253", count=1)
    assert r.returncode != 0  # one byte over the 65280 MTU cannot leave
    link = hosts.ns_exec(1, "ip", "-o", "link", "show", "gsn0").stdout
    assert "mtu 65280" in link and "02:47:53:01:01:00" in link


def test_bulk_tcp_both_directions_sha256(hosts):
    size = 256 << 20
    sent, got = tcp_transfer(hosts, 1, 2, size)
    assert sent == got and sent[0] == str(size)
    sent, got = tcp_transfer(hosts, 2, 1, size)
    assert sent == got and sent[0] == str(size)
    for i in (1, 2):  # it went through the compiled data plane, counted under the Python path's names
        ip = hosts.gsnd_status(i)["ip"]
        assert ip["dataplane"] is True and ip["counters"]["tx_frames"] > 0 and ip["counters"]["rx_frames"] > 0


def test_tcpdump_sees_plain_ip(hosts):
    import subprocess
    dump = subprocess.Popen(["ip", "netns", "exec", hosts.host_ns[1], "tcpdump", "-l", "-n", "-i", "gsn0", "-c", "2",
                             "icmp"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        poll(lambda: ping(hosts, 1, "192.0.2.2", count=1).returncode == 0 and dump.poll() is not None, 15,
             what="tcpdump to capture the pings")
        out = dump.stdout.read()
    finally:
        dump.kill()
    assert "192.0.2.1 > 192.0.2.2: ICMP echo request" in out


def test_kill9_gsnd_and_restart_interface_and_traffic_come_back(hosts):
    assert ping(hosts, 1, "192.0.2.2").returncode == 0
    hosts.kill("gsnd2", signal.SIGKILL)
    assert ping(hosts, 1, "192.0.2.2", count=1).returncode != 0
    addr = hosts.ns_exec(2, "ip", "-o", "addr", "show", "gsn0").stdout
    assert "192.0.2.2/24" in addr  # the interface kept its configuration
    assert "NO-CARRIER" in hosts.ns_exec(2, "ip", "-o", "link", "show", "gsn0").stdout
    hosts.start_gsnd(2)
    hosts.wait_ula(2)
    poll(lambda: ping(hosts, 1, "192.0.2.2", count=1).returncode == 0, 15, what="ping after restart")
    sent, got = tcp_transfer(hosts, 2, 1, 16 << 20)
    assert sent == got


def test_tcp_over_lossy_underlay():
    """loss 2%, duplicate 1%, reorder 25% (1 ms) on both hosts' cables.  This kernel has
    no sch_netem, so tests/netns/impair.py applies the same impairment in userspace."""
    import sys
    from pathlib import Path
    relay = str(Path(__file__).with_name("impair.py"))
    with Fabric(2, keys=False) as fab:  # the compiled data plane under loss
        fab.start_switch()
        for i in (1, 2):
            fab._spawn(f"impair{i}", fab.host_ns[i - 1], [
                sys.executable, relay, f"198.18.{i}.2:6500", f"198.18.{i}.2:6402", f"198.18.{i}.2:6400",
                f"198.18.{i}.1:7000", "0.02", "0.01", "0.25", str(i)])
            fab.start_gsnd(i, via=6500)
        for i in (1, 2):
            fab.wait_ula(i, timeout=20)
            fab.ip_address(i)
        sent, got = tcp_transfer(fab, 1, 2, 32 << 20)
        assert sent == got and sent[0] == str(32 << 20)
        sent, got = tcp_transfer(fab, 2, 1, 8 << 20)
        assert sent == got
        c = fab.gsnd_status(1)["link"]["counters"]
        assert c.get("rtx_mps", 0) > 0  # the link really recovered losses
