"""One router whose two halves are two pktwayd processes in two namespaces, joined by
a GSN cable over UDP.  A host registers itself (INFO to Hey-You); packets cross by
L3 both ways; when one half dies its twin notices (unanswered WRUs), withdraws what
it learnt and answers ERR/UNK; when it returns, routes are relearnt."""

import signal
import time

import pytest

from lab.netns import BIN, Fabric, poll, write_cable_key
from daemons.runtime.control import request
from daemons.wire.ula import parse_ula
from pktwayd import messages as M
from pktwayd.constants import PT, ErrTE
from pktwayd.node import Node

H_A, R_A, H_B, R_B = 0x40, 0x50, 0x60, 0x51
LIVE = 0.3  # WRU period: a silent twin is lost after 3 of them


def config(fab, control, me, twin, san, local, peer, key, node=None) -> str:
    text = f"""
[router]
name = "r{me:x}"
control = "{control}"
liveness = {LIVE}

[twin]
addr = {twin}
local = "{local}:7350"
peer = "{peer}:7350"
key_file = "{key}"

[[half]]
addr = {me}
san_id = {san}
mtu = 8192
ulp = "{fab.ulp_path(2)}"
"""
    if node:
        text += f"[[half.node]]\naddr = {node[0]}\nula = \"{node[1]}\"\n"
    return text


def half(control) -> dict:
    try:
        return request(str(control), {"cmd": "routes"}, 2.0)["halves"][0]
    except (OSError, KeyError):
        return {}


def knows(control, addr) -> bool:
    return any(n["addr"] == addr for rt in half(control).get("rts", []) for n in rt["nodes"])


@pytest.fixture
def twins():
    with Fabric(2, prefix="ta") as fa, Fabric(2, prefix="tb") as fb:
        ula_a, ula_b = fa.up(v6=False), fb.up(v6=False)
        ip_a, ip_b = fa.link_to(fb, 2, 2, 250)
        ctl_a, ctl_b = fa.tmp / "ra.sock", fb.tmp / "rb.sock"
        key = write_cable_key(fa.tmp / "twin.key")  # the twin cable is keyed too (both ends: one file)
        (fa.tmp / "ra.toml").write_text(config(fa, ctl_a, R_A, R_B, 0x100, ip_a, ip_b, key, (H_A, ula_a[0])))
        (fb.tmp / "rb.toml").write_text(config(fb, ctl_b, R_B, R_A, 0x101, ip_b, ip_a, key))  # H_B registers itself

        def start_b():
            fb.spawn("pktwayd", 2, str(BIN / "pktwayd"), "-c", str(fb.tmp / "rb.toml"))

        fa.spawn("pktwayd", 2, str(BIN / "pktwayd"), "-c", str(fa.tmp / "ra.toml"))
        start_b()
        for ctl in (ctl_a, ctl_b):
            poll(lambda: (h := half(ctl)) and h["twin_alive"] and len(h["rts"]) == 2, 15,
                 what=f"{ctl.name}: twin alive, LRT + twin's LRT")
        yield fa, fb, ula_a, ula_b, ctl_a, ctl_b, start_b


def test_split_router_forwards_detects_twin_loss_and_relearns(twins):
    fa, fb, ula_a, ula_b, ctl_a, ctl_b, start_b = twins
    with Node(fa.ulp_path(1), H_A, parse_ula(ula_a[1])) as a, \
            Node(fb.ulp_path(1), H_B, parse_ula(ula_b[1]), name=b"beta") as b:
        b.announce()  # power-up registration: R_B's LRT gets H_B, its new SN reaches R_A
        poll(lambda: knows(ctl_a, H_B), 10, what="R_A learns H_B through the twin cable")
        data = bytes(range(256)) * 192  # 48 KiB: one Message on the twin cable
        a.send(H_B, data)
        got = b.recv(10)
        assert got.sa == H_A and got.data[: len(data)] == data
        b.send(H_A, b"back")
        assert a.recv(10).data.rstrip(b"\0") == b"back"
        assert half(ctl_b)["counters"]["nodes_registered"] == 1
        twin_link = request(str(ctl_a), {"cmd": "routes"})["twin_link"]
        assert twin_link["rx_packets"] >= 2  # LRT, the reply, WRUs
        assert twin_link["cable"]["auth"] == "on" and twin_link["udp_rx_auth_ok"] > 0, twin_link

        t0 = time.monotonic()
        fb.kill("pktwayd", signal.SIGKILL)
        poll(lambda: (h := half(ctl_a)) and not h["twin_alive"] and len(h["rts"]) == 1, 10,
             what="R_A declares its twin lost and withdraws its routes")
        assert time.monotonic() - t0 < 6 * LIVE + 1.0
        a.send(H_B, b"anyone?")
        err = a.recv(10)
        assert err.pt == PT.ERR and err.te == ErrTE.UNK and M.records(err) == [M.Addr(H_B)]

        start_b()
        poll(lambda: b.announce() or knows(ctl_a, H_B), 15, interval=0.3, what="routes relearnt after the restart")
        assert half(ctl_a)["counters"]["twin_up"] >= 2
        a.send(H_B, b"again")
        assert b.recv(10).data.rstrip(b"\0") == b"again"
