"""Two GSN fabrics (two switches) joined by one pktwayd router, real processes:
hosts exchange EEP packets by L3 and along planned L2 routes; the CLI queries work."""

import subprocess

import pytest

from lab.netns import BIN, Fabric, poll
from daemons.runtime.control import request
from daemons.wire.ula import parse_ula
from daemons.ulpclient import UlpClient
from pktwayd.constants import ETHERTYPE_PKTWAY
from pktwayd.node import Node

H_A, R_A, H_B, R_B = 0x40, 0x50, 0x60, 0x51


@pytest.fixture
def net():
    with Fabric(2, prefix="pa") as fa, Fabric(2, prefix="pb") as fb:
        ula_a, ula_b = fa.up(v6=False), fb.up(v6=False)
        cfg = fa.tmp / "pktwayd.toml"
        control = fa.tmp / "pktwayd.sock"
        cfg.write_text(f"""
[router]
name = "rab"
control = "{control}"

[[half]]
addr = {R_A}
san_id = 0x100
mtu = 2048
ulp = "{fa.ulp_path(2)}"
[[half.node]]
addr = {H_A}
ula = "{ula_a[0]}"
name = "alpha"

[[half]]
addr = {R_B}
san_id = 0x101
mtu = 1024
dialect = "mw5"
ulp = "{fb.ulp_path(2)}"
[[half.node]]
addr = {H_B}
ula = "{ula_b[0]}"
""")
        proc = subprocess.Popen([str(BIN / "pktwayd"), "-c", str(cfg)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            poll(lambda: control.exists(), 10, what="pktwayd control socket")
            poll(lambda: all(h["ulp_connected"] and len(h["rts"]) == 2
                             for h in request(str(control), {"cmd": "routes"})["halves"]), 10,
                 what="both halves up, each holding its LRT and its twin's")
            yield fa, fb, ula_a, ula_b, str(control)
        finally:
            proc.kill()
            proc.wait()


def test_l3_and_planned_l2_across_two_fabrics(net):
    fa, fb, ula_a, ula_b, control = net
    # fabric B speaks MessageWay v5 (16-bit addresses): the router translates at its B half
    with Node(fa.ulp_path(1), H_A, parse_ula(ula_a[1])) as a, \
            Node(fb.ulp_path(1), H_B, parse_ula(ula_b[1]), dialect="mw5") as b:
        with UlpClient(fb.ulp_path(1)) as tap:  # what really crosses fabric B
            tap.bind(ETHERTYPE_PKTWAY)
            a.send(H_B, b"hello over L3")
            assert b.recv().data.rstrip(b"\0") == b"hello over L3"
            wire = tap.recv(5).payload
        assert wire[3] == 5 and wire[:2] == H_B.to_bytes(2, "big")  # MessageWay v5: DA(16) Prio Version=5
        routes = a.route(H_B)
        q, hops, mtu = routes[0]
        assert q == 2 and mtu == 1024 and [h.route for h in hops] == [parse_ula(ula_b[0])]  # the L2RH is the ULA
        a.send(H_B, b"hello over L2", route=hops)
        got = b.recv()
        assert got.data.rstrip(b"\0") == b"hello over L2" and got.sa == H_A
        b.send(H_A, b"and back")
        assert a.recv().data.rstrip(b"\0") == b"and back"
        a.send(0x7777, b"nobody")  # unknown destination: ERR/UNK back to the source
        err = a.recv()
        assert err.pt == 1 and err.te == 1


def test_cli_route_routes_and_send(net):
    fa, fb, ula_a, ula_b, control = net
    r = subprocess.run([str(BIN / "pktway"), "route", "--ulp", fa.ulp_path(1), "--addr", hex(H_A), "--router",
                        ula_a[1], hex(H_B)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "Q=2 MTU=1024" in r.stdout
    r = subprocess.run([str(BIN / "pktway"), "routes", control], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "SAN 0x000101" in r.stdout and "RCVF=0x50,0x51" in r.stdout
    assert "twin 0x51 alive" in r.stdout
    listener = subprocess.Popen([str(BIN / "pktway"), "listen", "--ulp", fb.ulp_path(1), "--addr", hex(H_B),
                                 "--router", ula_b[1], "--dialect", "mw5"], stdout=subprocess.PIPE, text=True)
    # the listener announces itself (INFO to Hey-You): once half B has registered it, it listens
    poll(lambda: request(control, {"cmd": "routes"})["halves"][1]["counters"].get("nodes_registered"), 10,
         what="the listener's announcement")
    r = subprocess.run([str(BIN / "pktway"), "send", "--l2", "--ulp", fa.ulp_path(1), "--addr", hex(H_A),
                        "--router", ula_a[1], hex(H_B), "via the CLI"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    out, _ = listener.communicate(timeout=15)
    assert "from 0x000040" in out and "via the CLI" in out


def test_cli_find_by_name(net):
    fa, fb, ula_a, ula_b, control = net
    r = subprocess.run([str(BIN / "pktway"), "find", "--ulp", fb.ulp_path(1), "--addr", hex(H_B), "--router",
                        ula_b[1], "--dialect", "mw5", "--name", "alpha"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "0x000040" in r.stdout and "alpha" in r.stdout, r.stderr
    r = subprocess.run([str(BIN / "pktway"), "find", "--ulp", fb.ulp_path(1), "--addr", hex(H_B), "--router",
                        ula_b[1], "--dialect", "mw5", "--capability", "9"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "no such node" in r.stderr
