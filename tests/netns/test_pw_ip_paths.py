"""IP over PacketWay beyond one GSN<->GSN router: a GSN host and a host on the emulated
datagram SAN (pktway-san, kind "udp") ping and move 64 MiB over TCP through a pktwayd;
and two routers between two GSN fabrics, one of them killed -9, traffic re-routed
over the other."""

import signal
import subprocess
import sys
import time


from lab.netns import BIN, Fabric, poll
from daemons.runtime.control import request
from tests.netns.test_pw_ip import CLIENT, SERVER

H_A, H_S, H_B = 0x40, 0x60, 0x61
SAN = "127.0.0.1:7400"
LIVE = 0.3


def pw0(fab, i, name, ip4, ip6, *args) -> str:
    control = str(fab.tmp / f"{name}.sock")
    fab.spawn(name, i, str(BIN / "pktway"), "ip", "--name", ip4, "--control", control, *args)
    poll(lambda: fab.ns_exec(i, "ip", "link", "show", "pw0", check=False).returncode == 0, 10, what=f"{name}'s pw0")
    fab.ns_exec(i, "ip", "addr", "add", f"{ip4}/24", "dev", "pw0")
    fab.ns_exec(i, "ip", "addr", "add", f"{ip6}/64", "dev", "pw0", "nodad")
    fab.ns_exec(i, "ip", "link", "set", "pw0", "up")
    return control


def tcp_64mib(server_ns: str, run_client, addr: str, mib: int = 64) -> None:
    """``mib`` MiB over one TCP connection; the receiver's byte count and sha256 equal the sender's."""
    server = subprocess.Popen(["ip", "netns", "exec", server_ns, sys.executable, "-c", SERVER],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        sent = run_client(sys.executable, "-c", CLIENT, addr, str(mib)).stdout.split()
        assert server.stdout.readline().split() == sent and sent[0] == str(mib << 20)
    finally:
        server.kill()
        server.wait()


def test_gsn_host_and_emulated_san_host():
    with Fabric(2, prefix="wu") as fa:
        ula_a = fa.up(v6=False)
        ctl = fa.tmp / "router.sock"
        (fa.tmp / "router.toml").write_text(f"""
[router]
name = "gu"
control = "{ctl}"

[[half]]
addr = 0x50
san_id = 0x100
mtu = 8192
ulp = "{fa.ulp_path(2)}"
[[half.node]]
addr = {H_A}
ula = "{ula_a[0]}"

[[half]]
kind = "udp"
addr = 0x51
san_id = 0x200
mtu = 2048
switch = "{SAN}"
local = "127.0.0.1:7401"
port = 1
[[half.node]]
addr = {H_S}
port = 2
""")
        fa.spawn("san", 2, str(BIN / "pktway-san"), "--listen", SAN, "--port", "1=127.0.0.1:7401",
                 "--port", "2=127.0.0.1:7402")
        fa.spawn("pktwayd", 2, str(BIN / "pktwayd"), "-c", str(fa.tmp / "router.toml"))
        poll(lambda: ctl.exists() and all(h["up"] and len(h["rts"]) == 2
                                          for h in request(str(ctl), {"cmd": "routes"})["halves"]),
             10, what="both halves up with their twin's LRT")
        ca = pw0(fa, 1, "pwgsn", "10.77.0.1", "fd77::1", "--ulp", fa.ulp_path(1), "--addr", hex(H_A),
                 "--router", ula_a[1], "--peer", f"10.77.0.2={H_S:#x}", "--peer", f"fd77::2={H_S:#x}")
        cs = pw0(fa, 2, "pwsan", "10.77.0.2", "fd77::2", "--san", f"{SAN},127.0.0.1:7402,2", "--addr", hex(H_S),
                 "--router", "1", "--peer", f"fd77::1={H_A:#x}")
        # the route's MinMTU is the emulated SAN's 2048 words
        poll(lambda: request(ca, {"cmd": "status"})["mtu"] == 2048 * 8 - 24, 10, what="pw0's MTU from the route")
        for args in (("10.77.0.2",), ("-6", "fd77::2")):
            r = fa.ns_exec(1, "ping", "-c", "3", "-i", "0.2", "-W", "5", *args, check=False)
            assert r.returncode == 0, r.stdout + r.stderr
        r = fa.ns_exec(2, "ping", "-c", "2", "-i", "0.2", "-W", "5", "10.77.0.1", check=False)
        assert r.returncode == 0, r.stdout + r.stderr
        tcp_64mib(fa.host_ns[1], lambda *a: fa.ns_exec(1, *a, timeout=300), "10.77.0.2")
        st = request(cs, {"cmd": "status"})
        assert st["counters"]["rx_ipv4"] > 1000 and st["counters"]["rx_ipv6"] >= 3


def router_config(fab, control, me, twin, san, local, peer, nodes) -> str:
    text = f"""
[router]
name = "r{me:x}"
control = "{control}"
liveness = {LIVE}

[twin]
addr = {twin}
local = "{local}:7350"
peer = "{peer}:7350"

[[half]]
addr = {me}
san_id = {san}
mtu = 8192
ulp = "{fab.ulp_path(2 if me in (0x50, 0x51) else 3)}"
"""
    for addr, ula, router in nodes:
        text += f"[[half.node]]\naddr = {addr}\nula = \"{ula}\"\nrouter = {str(router).lower()}\n"
    return text


def test_router_kill_9_reroutes_over_the_second_router():
    with Fabric(3, prefix="wx") as fa, Fabric(3, prefix="wy") as fb:
        ula_a, ula_b = fa.up(v6=False), fb.up(v6=False)
        x_a, x_b = fa.link_to(fb, 2, 2, 60)
        y_a, y_b = fa.link_to(fb, 3, 3, 61)
        ctl = {n: (fa if n.endswith("a") else fb).tmp / f"{n}.sock" for n in ("rxa", "rxb", "rya", "ryb")}
        cfg = {
            "rxa": router_config(fa, ctl["rxa"], 0x50, 0x51, 0x100, x_a, x_b, [(H_A, ula_a[0], False), (0x52, ula_a[2], True)]),
            "rxb": router_config(fb, ctl["rxb"], 0x51, 0x50, 0x101, x_b, x_a, [(H_B, ula_b[0], False), (0x53, ula_b[2], True)]),
            "rya": router_config(fa, ctl["rya"], 0x52, 0x53, 0x100, y_a, y_b, [(H_A, ula_a[0], False), (0x50, ula_a[1], True)]),
            "ryb": router_config(fb, ctl["ryb"], 0x53, 0x52, 0x101, y_b, y_a, [(H_B, ula_b[0], False), (0x51, ula_b[1], True)]),
        }
        for name, text in cfg.items():
            fab, host = (fa if name.endswith("a") else fb), (2 if name.startswith("rx") else 3)
            (fab.tmp / f"{name}.toml").write_text(text)
            fab.spawn(name, host, str(BIN / "pktwayd"), "-c", str(fab.tmp / f"{name}.toml"))

        def half(name):
            try:
                return request(str(ctl[name]), {"cmd": "routes"}, 2.0)["halves"][0]
            except (OSError, KeyError):
                return {}

        # each A half knows SAN B twice: through its twin and through its buddy
        poll(lambda: all((h := half(n)) and h["twin_alive"] and len(h["rts"]) >= 3 for n in ctl), 20,
             what="every half: twin alive, SAN B (or A) by two paths")
        # A uses router X, B uses router Y: the packets go A -X-> B and come back B -Y-> A
        pw0(fa, 1, "pwa", "10.77.0.1", "fd77::1", "--ulp", fa.ulp_path(1), "--addr", hex(H_A),
            "--router", ula_a[1], "--peer", f"10.77.0.2={H_B:#x}")
        pw0(fb, 1, "pwb", "10.77.0.2", "fd77::2", "--ulp", fb.ulp_path(1), "--addr", hex(H_B),
            "--router", ula_b[2], "--peer", f"10.77.0.1={H_A:#x}")
        r = fa.ns_exec(1, "ping", "-c", "2", "-i", "0.2", "-W", "5", "10.77.0.2", check=False)
        assert r.returncode == 0, r.stdout + r.stderr
        before = half("rxa")["counters"].get("l3_forwarded", 0)
        t0 = time.monotonic()
        fb.kill("rxb", signal.SIGKILL)  # router X's B half dies: X's A half must go through Y
        poll(lambda: fa.ns_exec(1, "ping", "-c", "1", "-W", "1", "10.77.0.2", check=False).returncode == 0, 20,
             interval=0.1, what="ping through the second router")
        outage = time.monotonic() - t0
        h = half("rxa")
        assert not h["twin_alive"] and h["counters"]["l3_forwarded"] > before
        assert all(rt["rcvf"][1] == 0x52 for rt in h["rts"] if rt["san_id"] == 0x101)  # SAN B only via buddy Y
        print(f"re-routed after {outage:.2f} s")
        assert outage < 6 * LIVE + 5
