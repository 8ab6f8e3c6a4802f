"""IP across two unlike SANs through one PacketWay router: pw0 (pktway ip) on a GSN host
and on a host of an InfiniBand-style fabric (ib-sm + ib-switch, the host a UD port),
or on a host of a ServerNet SAN (snet-router for fabrics X and Y, the host an end node
with a receive ring).  IPv4 and IPv6 ping both ways, 64 MiB over TCP with equal sha256
(GSN -> IB and GSN -> ServerNet), IP multicast membership from the kernel, the ICMP error when the IB half's MTU shrinks."""

import json
import subprocess
import sys

import pytest

from lab.netns import BIN, Fabric, poll
from daemons.runtime.control import request
from tests.netns.test_pktway_over_servernet import ROUTER, snet_toml
from tests.netns.test_pw_ip_paths import pw0, tcp_64mib

H_A, R_A, R_X, H_X = 0x40, 0x50, 0x51, 0x61
IP_A, IP_X, IP6_A, IP6_X = "10.77.0.1", "10.77.0.2", "fd77::1", "fd77::2"

# --- InfiniBand-style fabric -------------------------------------------------------------
G_R, G_H = 0x0002C903000000A1, 0x0002C903000000B2
LID_R, LID_H = 7, 9  # fixed by the SM's state file
SM = "127.0.0.1:4791"
HOST_IB = f"{G_H:#x},127.0.0.1:7602,127.0.0.1:7502,{SM}"
IB_MTU = 255  # words: 2040 bytes, an IB UD packet of 2048
GROUP = "239.1.2.3"
LOGICAL = "0xe10203"  # its PacketWay logical address
RECEIVER = f"""
import socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("", 5555)); s.settimeout(15)
s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton("{GROUP}") + socket.inet_aton("{IP_X}"))
print("ready", flush=True); data, src = s.recvfrom(100); print(src[0], data.decode(), flush=True)
"""
SENDER = f"""
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("{IP_A}"))
for _ in range(20):
    s.sendto(b"to the group", ("{GROUP}", 5555)); time.sleep(0.2)
"""


def gsn_half(fa, ula_a) -> str:
    return f"""
[[half]]
addr = {R_A}
san_id = 0x100
mtu = 8192
ulp = "{fa.ulp_path(2)}"
[[half.node]]
addr = {H_A}
ula = "{ula_a[0]}"
"""


def ib_router(fa, ula_a, mtu: int) -> str:
    return f"""
[router]
name = "gib"
control = "{fa.tmp / 'router.sock'}"
{gsn_half(fa, ula_a)}
[[half]]
kind = "infiniband"
addr = {R_X}
san_id = 0x300
mtu = {mtu}
guid = "{G_R:#x}"
local = "127.0.0.1:7601"
switch = "127.0.0.1:7501"
sm = "{SM}"
[[half.node]]
addr = {H_X}
lid = {LID_H}
"""


def start_router(fa, text: str, name: str = "pktwayd") -> str:
    ctl = fa.tmp / "router.sock"
    ctl.unlink(missing_ok=True)
    (fa.tmp / f"{name}.toml").write_text(text)
    fa.spawn(name, 2, str(BIN / "pktwayd"), "-c", str(fa.tmp / f"{name}.toml"))
    def up() -> bool:
        try:
            return all(h["up"] and len(h["rts"]) == 2 for h in request(str(ctl), {"cmd": "routes"})["halves"])
        except OSError:  # not listening yet (the socket file comes first)
            return False

    poll(up, 15, what="both halves up with their twin's LRT")
    return str(ctl)


def start_ib(fa) -> None:
    t = fa.tmp
    (t / "sm").mkdir()
    (t / "sm" / "lids.json").write_text(json.dumps({"lids": {f"{G_R:#018x}": LID_R, f"{G_H:#018x}": LID_H}}))
    ports = "".join(f'[[port]]\nnumber = {n}\nlocal = "127.0.0.1:750{n}"\npeer = "127.0.0.1:760{n}"\n' for n in (1, 2))
    (t / "sw.toml").write_text(f'[switch]\nguid = "0x1001"\nsm = "{SM}"\nruntime_dir = "{t}/sw-ib"\n{ports}')
    fa.spawn("ib-sm", 2, str(BIN / "ib-sm"), "--listen", SM, "--state-file", str(t / "sm" / "lids.json"),
             "--runtime-dir", str(t / "sm"))
    fa.spawn("ib-switch", 2, str(BIN / "ib-switch"), "-c", str(t / "sw.toml"))


def ping(fab, i, *args, count=3):
    r = fab.ns_exec(i, "ping", "-c", str(count), "-i", "0.2", "-W", "5", *args, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


@pytest.fixture
def ib_net():
    with Fabric(2, prefix="wi") as fa:
        ula_a = fa.up(v6=False)
        start_ib(fa)
        ctl = start_router(fa, ib_router(fa, ula_a, IB_MTU))
        ca = pw0(fa, 1, "pwgsn", IP_A, IP6_A, "--ulp", fa.ulp_path(1), "--addr", hex(H_A), "--router", ula_a[1],
                 "--peer", f"{IP_X}={H_X:#x}", "--peer", f"{IP6_X}={H_X:#x}", "--mtu-recheck", "0")
        # the IB host knows nobody: it finds A by asking its router (TELL by name)
        cx = pw0(fa, 2, "pwib", IP_X, IP6_X, "--ib", HOST_IB, "--router", str(LID_R), "--addr", hex(H_X))
        yield fa, ula_a, ctl, ca, cx


def test_gsn_and_infiniband_hosts_ping_and_move_64mib(ib_net):
    fa, _ula_a, ctl, ca, cx = ib_net
    # the route's MinMTU is the IB half's 255 words: 2040 bytes less the EEP header and TAIL
    poll(lambda: request(ca, {"cmd": "status"})["mtu"] == IB_MTU * 8 - 24, 15, what="pw0's MTU from the route")
    ping(fa, 1, IP_X)
    ping(fa, 1, "-6", IP6_X)
    ping(fa, 2, IP_A)  # resolved through the router, or learnt from A's packets
    ping(fa, 1, "-M", "do", "-s", str(IB_MTU * 8 - 24 - 28), IP_X, count=1)  # a full-size packet fits
    tcp_64mib(fa.host_ns[1], lambda *a: fa.ns_exec(1, *a, timeout=300), IP_X)
    st = request(cx, {"cmd": "status"})
    assert st["counters"]["rx_ipv4"] > 1000 and st["counters"]["rx_ipv6"] >= 3
    assert st["learned"][IP_A] == H_A
    half = request(ctl, {"cmd": "routes"})["halves"][1]
    assert half["kind"] == "infiniband" and half["counters"]["tx_packets"] > 1000


def test_ip_multicast_reaches_a_member_across_the_router(ib_net):
    """UDP to 239.1.2.3 from the GSN host: pw0 sends it to logical 0xE10203, the router
    copies it to the member it knows from the IB host's INFO (LADR), whose pw0 delivers it.
    Membership is the kernel's: the receiving socket's IP_ADD_MEMBERSHIP on pw0 makes the
    IB host a member, and its end (the socket closed) ends it."""
    fa, _ula_a, ctl, ca, cx = ib_net
    assert LOGICAL not in request(cx, {"cmd": "status"})["groups"]
    rx = subprocess.Popen(["ip", "netns", "exec", fa.host_ns[1], sys.executable, "-c", RECEIVER],
                          stdout=subprocess.PIPE, text=True)
    try:
        assert rx.stdout.readline().strip() == "ready"
        poll(lambda: LOGICAL in request(cx, {"cmd": "status"})["groups"], 10, what="the kernel's join followed")
        tx = subprocess.Popen(["ip", "netns", "exec", fa.host_ns[0], sys.executable, "-c", SENDER])
        try:
            assert rx.stdout.readline().split() == [IP_A, "to", "the", "group"]
        finally:
            tx.kill()
            tx.wait()
    finally:
        rx.kill()
        rx.wait()
    assert request(ca, {"cmd": "status"})["counters"]["tx_group_ipv4"] >= 1
    assert request(cx, {"cmd": "status"})["counters"]["rx_ipv4"] >= 1
    copies = request(ctl, {"cmd": "routes"})["halves"][0]["counters"]["group_copies"]
    assert copies >= 1
    poll(lambda: LOGICAL not in request(cx, {"cmd": "status"})["groups"], 10, what="the kernel's leave followed")
    before, sent = request(cx, {"cmd": "status"})["counters"]["rx_ipv4"], request(ca, {"cmd": "status"})["counters"]
    fa.ns_exec(1, sys.executable, "-c", SENDER.replace("range(20)", "range(5)"))
    assert request(ca, {"cmd": "status"})["counters"]["tx_group_ipv4"] >= sent["tx_group_ipv4"] + 5
    assert request(ctl, {"cmd": "routes"})["halves"][0]["counters"]["group_copies"] == copies  # no member left
    assert request(cx, {"cmd": "status"})["counters"]["rx_ipv4"] == before


def test_ib_half_mtu_shrink_gives_icmp(ib_net):
    fa, ula_a, _ctl, ca, _cx = ib_net
    poll(lambda: request(ca, {"cmd": "status"})["mtu"] == IB_MTU * 8 - 24, 15, what="pw0's MTU from the route")
    ping(fa, 1, "-M", "do", "-s", "1900", IP_X, count=1)
    fa.kill("pktwayd", 9)  # the router comes back with 1024-byte packets on the IB side
    start_router(fa, ib_router(fa, ula_a, 128), name="pktwayd2")
    for _ in range(3):
        r = fa.ns_exec(1, "ping", "-c", "1", "-W", "2", "-M", "do", "-s", "1900", IP_X, check=False)
    assert "mtu = 1000" in r.stdout + r.stderr or "mtu=1000" in r.stdout + r.stderr, r.stdout + r.stderr
    st = request(ca, {"cmd": "status"})
    assert st["counters"]["icmp_too_big_v4"] >= 1 and st["route_mtu"][hex(H_X)] == 1000
    ping(fa, 1, "-M", "do", "-s", "900", IP_X, count=1)  # what fits still goes through


def snet_router(fa, ula_a) -> str:
    return f"""
[router]
name = "gsn-snet"
control = "{fa.tmp / 'router.sock'}"
{gsn_half(fa, ula_a)}
[[half]]
kind = "servernet"
addr = {R_X}
san_id = 0x200
mtu = 512
servernet = "{fa.tmp / 'snet-r.toml'}"
[[half.node]]
addr = {H_X}
did = {SN_H:#x}
"""


SN_R, SN_H = 0x04001, 0x08001


def test_gsn_and_servernet_hosts_ping_both_ways():
    with Fabric(2, prefix="wn") as fa:
        ula_a = fa.up(v6=False)
        (fa.tmp / "snet-r.toml").write_text(snet_toml(SN_R, SN_H, 7610, 7611, "pw-half"))
        (fa.tmp / "snet-h.toml").write_text(snet_toml(SN_H, SN_R, 7620, 7621, "sn-host"))
        for f, (r, h) in {"x": (7610, 7620), "y": (7611, 7621)}.items():
            fa.spawn(f"snet-router-{f}", 2, str(BIN / "snet-router"), "--fabric", f, "--listen",
                     f"127.0.0.1:{ROUTER[f]}", "--port", f"0=127.0.0.1:{r}", "--port", f"1=127.0.0.1:{h}",
                     "--route", f"{SN_R:#x}=0", "--route", f"{SN_H:#x}=1")
        ctl = start_router(fa, snet_router(fa, ula_a))
        ca = pw0(fa, 1, "pwgsn", IP_A, IP6_A, "--ulp", fa.ulp_path(1), "--addr", hex(H_A), "--router", ula_a[1],
                 "--peer", f"{IP_X}={H_X:#x}", "--peer", f"{IP6_X}={H_X:#x}")
        cs = pw0(fa, 2, "pwsn", IP_X, IP6_X, "--servernet", str(fa.tmp / "snet-h.toml"), "--router", hex(SN_R),
                 "--addr", hex(H_X), "--peer", f"{IP6_A}={H_A:#x}")
        # the ServerNet half's 512 words (one ring slot, 4096 bytes) bound the route
        poll(lambda: request(ca, {"cmd": "status"})["mtu"] == 512 * 8 - 24, 15, what="pw0's MTU from the route")
        poll(lambda: {p["state"] for p in request(ctl, {"cmd": "routes"})["halves"][1]["servernet_paths"][
            f"{SN_H:#07x}"].values()} == {"UP"}, 15, what="the half's ServerNet paths to the host UP")
        ping(fa, 1, IP_X)
        ping(fa, 1, "-6", IP6_X)
        ping(fa, 2, IP_A)
        ping(fa, 1, "-M", "do", "-s", str(512 * 8 - 24 - 28), IP_X, count=1)
        st = request(cs, {"cmd": "status"})
        assert st["counters"]["rx_ipv4"] >= 4 and st["counters"]["rx_ipv6"] >= 3
        assert st["counters"]["snet_rx_messages"] >= 7
        # 64 MiB GSN -> ServerNet with equal sha256 (52 s at load 25 once the node engine wrote the
        # receive ring in C; 87 s before, every 64-byte WRITE through Python)
        tcp_64mib(fa.host_ns[1], lambda *a: fa.ns_exec(1, *a, timeout=300), IP_X)


SAN = "127.0.0.1:7400"
LIVE = 0.3


def split_half(fa, name, me, twin, nodes, *, gsn_host=None, san_port=None) -> str:
    """One half-router in a process of its own, joined to its twin by a cable over loopback."""
    ctl = fa.tmp / f"{name}.sock"
    text = (f'[router]\nname = "{name}"\ncontrol = "{ctl}"\nliveness = {LIVE}\n'
            f'[twin]\naddr = {twin}\nlocal = "127.0.0.1:{7300 + me}"\npeer = "127.0.0.1:{7300 + twin}"\n')
    if gsn_host is not None:
        text += f'[[half]]\naddr = {me}\nsan_id = 0x100\nmtu = 8192\nulp = "{fa.ulp_path(gsn_host)}"\n'
        text += "".join(f'[[half.node]]\naddr = {a}\nula = "{u}"\nrouter = {str(r).lower()}\n' for a, u, r in nodes)
    else:
        text += (f'[[half]]\nkind = "udp"\naddr = {me}\nsan_id = 0x200\nmtu = 2048\nswitch = "{SAN}"\n'
                 f'local = "127.0.0.1:{7400 + san_port}"\nport = {san_port}\n')
        text += "".join(f'[[half.node]]\naddr = {a}\nport = {p}\nrouter = {str(r).lower()}\n' for a, p, r in nodes)
    (fa.tmp / f"{name}.toml").write_text(text)
    fa.spawn(name, 2, str(BIN / "pktwayd"), "-c", str(fa.tmp / f"{name}.toml"))
    return str(ctl)


def test_router_kill_9_reroutes_across_unlike_sans():
    """GSN fabric A and the datagram SAN joined by two routers, X and Y, each split in two
    processes (one half per SAN, twins cabled over loopback).  A's pw0 uses X, the SAN
    host's pw0 uses Y; X's SAN half is killed -9: X's GSN half re-routes through its
    buddy Y, and the ping comes back."""
    X_A, X_S, Y_A, Y_S = 0x50, 0x51, 0x52, 0x53
    with Fabric(3, prefix="wk") as fa:
        ula = fa.up(v6=False)
        fa.spawn("san", 2, str(BIN / "pktway-san"), "--listen", SAN,
                 *(a for p in (1, 2, 3) for a in ("--port", f"{p}=127.0.0.1:{7400 + p}")))
        ctl = {
            "xa": split_half(fa, "xa", X_A, X_S, [(H_A, ula[0], False), (Y_A, ula[2], True)], gsn_host=2),
            "xs": split_half(fa, "xs", X_S, X_A, [(H_X, 2, False), (Y_S, 3, True)], san_port=1),
            "ya": split_half(fa, "ya", Y_A, Y_S, [(H_A, ula[0], False), (X_A, ula[1], True)], gsn_host=3),
            "ys": split_half(fa, "ys", Y_S, Y_A, [(H_X, 2, False), (X_S, 1, True)], san_port=3),
        }

        def half(name):
            try:
                return request(ctl[name], {"cmd": "routes"}, 2.0)["halves"][0]
            except (OSError, KeyError):
                return {}

        poll(lambda: all((h := half(n)) and h["twin_alive"] and len(h["rts"]) >= 3 for n in ctl), 30,
             what="every half: twin alive, the other SAN by two paths")
        pw0(fa, 1, "pwa", IP_A, IP6_A, "--ulp", fa.ulp_path(1), "--addr", hex(H_A), "--router", ula[1],
            "--peer", f"{IP_X}={H_X:#x}")
        pw0(fa, 2, "pws", IP_X, IP6_X, "--san", f"{SAN},127.0.0.1:7402,2", "--addr", hex(H_X), "--router", "3",
            "--peer", f"{IP_A}={H_A:#x}")
        ping(fa, 1, IP_X, count=2)
        before = half("xa")["counters"].get("l3_forwarded", 0)
        fa.kill("xs", 9)  # X's SAN half dies: X's GSN half must go through Y
        # a send to the dead twin fails at once (ECONNREFUSED on loopback), so the first ping may get
        # through Y before the liveness timer has marked the twin dead: wait for both, in either order
        poll(lambda: fa.ns_exec(1, "ping", "-c", "1", "-W", "1", IP_X, check=False).returncode == 0, 30,
             interval=0.1, what="ping through the second router")
        try:
            poll(lambda: half("xa").get("twin_alive") is False, 10 + 10 * LIVE, what="X's GSN half: twin dead")
        except AssertionError:
            raise AssertionError(f"xa still has its twin alive: {half('xa')}") from None
        h = half("xa")
        assert h["counters"]["l3_forwarded"] > before
        assert all(rt["rcvf"][1] == Y_A for rt in h["rts"] if rt["san_id"] == 0x200)  # SAN 0x200 via buddy Y only
