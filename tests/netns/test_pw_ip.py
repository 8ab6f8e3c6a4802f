"""IP over PacketWay, real processes: a pw0 interface (pktway ip) on a host of each of two
GSN fabrics joined by a pktwayd router.  IPv4 and IPv6 ping, a 64 MiB TCP transfer
with equal sha256, resolution by the router (TELL by name), and the ICMP error a
sender gets when a route's MTU shrinks."""

import subprocess
import sys

import pytest

from lab.netns import BIN, Fabric, gsn_router_toml, poll
from daemons.runtime.control import request

H_A, R_A, H_B, R_B = 0x40, 0x50, 0x60, 0x51
IP_A, IP_B, IP6_A, IP6_B = "10.77.0.1", "10.77.0.2", "fd77::1", "fd77::2"

SERVER = """
import hashlib, socket, sys
s = socket.create_server(("0.0.0.0", 5201)); print("ready", flush=True)
c, _ = s.accept(); h = hashlib.sha256(); n = 0
while (b := c.recv(1 << 16)):
    h.update(b); n += len(b)
print(n, h.hexdigest(), flush=True)
"""
CLIENT = """
import hashlib, random, socket, sys
rng = random.Random(16); h = hashlib.sha256(); s = socket.create_connection((sys.argv[1], 5201), timeout=60)
mib = int(sys.argv[2]) if len(sys.argv) > 2 else 64
for _ in range(mib):
    b = rng.randbytes(1 << 20); h.update(b); s.sendall(b)
s.close(); print(mib << 20, h.hexdigest())
"""


def router_config(fa, fb, ula_a, ula_b, mtu_b: int) -> str:
    return gsn_router_toml("pwip", fa.tmp / "pktwayd.sock", [(R_A, 0x100, 2048, fa.ulp_path(2), [(H_A, ula_a[0])]),
                                                           (R_B, 0x101, mtu_b, fb.ulp_path(2), [(H_B, ula_b[0])])])


def start_router(fa, fb, ula_a, ula_b, mtu_b: int = 1024) -> subprocess.Popen:
    cfg = fa.tmp / "pktwayd.toml"
    cfg.write_text(router_config(fa, fb, ula_a, ula_b, mtu_b))
    control = str(fa.tmp / "pktwayd.sock")
    proc = subprocess.Popen([str(BIN / "pktwayd"), "-c", str(cfg)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    poll(lambda: _routes(control) and all(h["ulp_connected"] and len(h["rts"]) == 2 for h in _routes(control)),
         15, what="both halves up, each holding its LRT and its twin's")
    return proc


def _routes(control: str):
    try:
        return request(control, {"cmd": "routes"})["halves"]
    except OSError:
        return None


def pw0(fab, i: int, ula_router: str, addr: int, ip4: str, ip6: str, *args: str) -> str:
    """pw0 whose MTU is set at bring-up only: a shrink must reach the sender as ICMP."""
    control = str(fab.tmp / f"pwip{i}.sock")
    fab.spawn(f"pwip{i}", i, str(BIN / "pktway"), "ip", "--ulp", fab.ulp_path(i), "--addr", hex(addr),
              "--router", ula_router, "--name", ip4, "--control", control, "--mtu-recheck", "0", *args)
    poll(lambda: fab.ns_exec(i, "ip", "link", "show", "pw0", check=False).returncode == 0, 10, what="pw0")
    fab.ns_exec(i, "ip", "addr", "add", f"{ip4}/24", "dev", "pw0")
    fab.ns_exec(i, "ip", "addr", "add", f"{ip6}/64", "dev", "pw0", "nodad")
    fab.ns_exec(i, "ip", "link", "set", "pw0", "up")
    return control


@pytest.fixture
def net():
    with Fabric(2, prefix="wa") as fa, Fabric(2, prefix="wb") as fb:
        ula_a, ula_b = fa.up(v6=False), fb.up(v6=False)
        routers = [start_router(fa, fb, ula_a, ula_b)]
        try:
            # A knows B from configuration; B finds A by asking its router (TELL by name)
            ca = pw0(fa, 1, ula_a[1], H_A, IP_A, IP6_A, "--peer", f"{IP_B}={H_B:#x}", "--peer", f"{IP6_B}={H_B:#x}")
            cb = pw0(fb, 1, ula_b[1], H_B, IP_B, IP6_B, "--peer", f"{IP6_A}={H_A:#x}")
            yield fa, fb, ula_a, ula_b, ca, cb, routers
        finally:
            for router in routers:
                router.kill()
                router.wait()


def test_ping_v4_v6_and_mtu_follows_the_route(net):
    fa, fb, _ula_a, _ula_b, ca, cb, _routers = net
    # MinMTU of the route A -> B is 1024 words: 8192 bytes less the EEP header and TAIL
    poll(lambda: request(ca, {"cmd": "status"})["mtu"] == 8192 - 24, 10, what="pw0's MTU from the route")
    assert "mtu 8168" in fa.ns_exec(1, "ip", "link", "show", "pw0").stdout
    r = fa.ns_exec(1, "ping", "-c", "3", "-i", "0.2", "-W", "5", IP_B, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    r = fa.ns_exec(1, "ping", "-6", "-c", "3", "-i", "0.2", "-W", "5", IP6_B, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    st = request(cb, {"cmd": "status"})
    assert st["counters"]["rx_ipv4"] >= 3 and st["counters"]["rx_ipv6"] >= 3
    # B was never told A's IPv4 address: it learned it from A's packets; from a cold
    # start it resolves by asking the router (TELL by NAME "10.77.0.1")
    r = fb.ns_exec(1, "ping", "-c", "2", "-i", "0.2", "-W", "5", IP_A, check=False)
    assert r.returncode == 0, r.stdout + r.stderr


def test_b_resolves_a_through_the_router(net):
    fa, fb, _ula_a, _ula_b, ca, cb, _routers = net
    r = fb.ns_exec(1, "ping", "-c", "3", "-i", "0.3", "-W", "5", IP_A, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    st = request(cb, {"cmd": "status"})
    assert st["counters"]["tell_sent"] >= 1 and st["counters"]["resolved"] == 1
    assert st["learned"][IP_A] == H_A


def test_tcp_64mib_sha256(net):
    fa, fb, *_ = net
    server = subprocess.Popen(["ip", "netns", "exec", fb.host_ns[0], sys.executable, "-c", SERVER],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        sent = fa.ns_exec(1, sys.executable, "-c", CLIENT, IP_B, timeout=300).stdout.split()
        got = server.stdout.readline().split()
        assert got == sent and sent[0] == str(64 << 20)
    finally:
        server.kill()
        server.wait()


def test_route_mtu_shrink_gives_icmp(net):
    fa, fb, ula_a, ula_b, ca, _cb, routers = net
    poll(lambda: request(ca, {"cmd": "status"})["mtu"] == 8168, 10, what="pw0's MTU from the route")
    assert fa.ns_exec(1, "ping", "-c", "1", "-W", "5", "-M", "do", "-s", "5000", IP_B, check=False).returncode == 0
    # B's SAN now holds only 512 words: the router returns A's 5 KB packets (ERR/GENERAL),
    # A's pw0 asks the route's MTU (GVL2) and tells its IP stack
    routers[0].kill()
    routers[0].wait()
    routers.append(start_router(fa, fb, ula_a, ula_b, mtu_b=512))
    for _ in range(3):
        r = fa.ns_exec(1, "ping", "-c", "1", "-W", "2", "-M", "do", "-s", "5000", IP_B, check=False)
    assert "mtu = 4072" in r.stdout + r.stderr or "mtu=4072" in r.stdout + r.stderr, r.stdout + r.stderr
    st = request(ca, {"cmd": "status"})
    assert st["counters"]["icmp_too_big_v4"] >= 1 and st["route_mtu"][hex(H_B)] == 4096 - 24
    r = fa.ns_exec(1, "ping", "-6", "-c", "1", "-W", "2", "-M", "do", "-s", "5000", IP6_B, check=False)
    assert "mtu" in (r.stdout + r.stderr).lower(), r.stdout + r.stderr
    st = request(ca, {"cmd": "status"})
    assert st["counters"].get("icmp_too_big_v6", 0) >= 1, (st, r.stdout + r.stderr)
    # and a packet that fits still goes through
    assert fa.ns_exec(1, "ping", "-c", "1", "-W", "5", "-M", "do", "-s", "3000", IP_B).returncode == 0
