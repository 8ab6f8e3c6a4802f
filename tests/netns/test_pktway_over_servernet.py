"""PacketWay over ServerNet: a pktwayd router whose second half is a ServerNet end node
(receive ring + doorbell, spec §1.8) joins a GSN fabric to a ServerNet SAN (snet-router
processes for fabrics X and Y).  A GSN host and a ServerNet host (pktway CLI with
--servernet) exchange messages through it, both ways."""

import subprocess

import pytest

from lab.netns import BIN, Fabric, gsn_router_toml, poll
from daemons.runtime.control import request
from daemons.wire.ula import parse_ula
from pktwayd.constants import PT
from pktwayd.node import Node
from servernet.ring import route

H_A, R_A, R_S, H_S = 0x40, 0x50, 0x51, 0x60
SN_R, SN_H = 0x04001, 0x08001
ROUTER = {"x": 7600, "y": 7601}


def snet_toml(me, peer, x, y, name):
    return f"""
[node]
id = {me:#x}
name = "{name}"
[fabric.x]
local = "127.0.0.1:{x}"
router = "127.0.0.1:{ROUTER['x']}"
[fabric.y]
local = "127.0.0.1:{y}"
router = "127.0.0.1:{ROUTER['y']}"
[[peer]]
id = {peer:#x}
[[window]]
name = "pktway-ring"
page = 0x400
pages = 16
per_source = true
[[window]]
name = "pktway-bell"
page = 0x410
access = "w"
interrupt = true
"""


@pytest.fixture
def net():
    with Fabric(2, prefix="pws") as fa:
        ula_a = fa.up(v6=False)
        ctl = fa.tmp / "router.sock"
        (fa.tmp / "snet-r.toml").write_text(snet_toml(SN_R, SN_H, 7610, 7611, "pw-half"))
        (fa.tmp / "snet-h.toml").write_text(snet_toml(SN_H, SN_R, 7620, 7621, "sn-host"))
        gsn_half = gsn_router_toml("gs", ctl, [(R_A, 0x100, 8192, fa.ulp_path(2), [(H_A, ula_a[0])])])
        (fa.tmp / "router.toml").write_text(gsn_half + f"""
[[half]]
kind = "servernet"
addr = {R_S}
san_id = 0x200
mtu = 64
servernet = "{fa.tmp / 'snet-r.toml'}"
[[half.node]]
addr = {H_S}
did = {SN_H:#x}
name = "sn-host"
""")
        for f, (r, h) in {"x": (7610, 7620), "y": (7611, 7621)}.items():
            fa.spawn(f"snet-router-{f}", 2, str(BIN / "snet-router"), "--fabric", f, "--listen",
                     f"127.0.0.1:{ROUTER[f]}", "--port", f"0=127.0.0.1:{r}", "--port", f"1=127.0.0.1:{h}",
                     "--route", f"{SN_R:#x}=0", "--route", f"{SN_H:#x}=1",
                     "--control", str(fa.tmp / f"router-{f}.sock"))
        fa.spawn("pktwayd", 2, str(BIN / "pktwayd"), "-c", str(fa.tmp / "router.toml"))
        poll(lambda: ctl.exists(), 10, what="pktwayd's control socket")
        poll(lambda: all(h["up"] and len(h["rts"]) == 2 for h in request(str(ctl), {"cmd": "routes"})["halves"]),
             10, what="both halves up with their twin's LRT")
        yield fa, ula_a, str(ctl)


def pktway_sn(fa, *args, timeout=30):
    return fa.ns_exec(2, str(BIN / "pktway"), *args, "--servernet", str(fa.tmp / "snet-h.toml"), "--router",
                      hex(SN_R), "--addr", hex(H_S), check=False, timeout=timeout)


def test_gsn_host_and_servernet_host_exchange_messages(net):
    fa, ula_a, ctl = net
    listener = subprocess.Popen(["ip", "netns", "exec", fa.host_ns[1], str(BIN / "pktway"), "listen", "--servernet",
                                 str(fa.tmp / "snet-h.toml"), "--router", hex(SN_R), "--addr", hex(H_S),
                                 "--count", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        poll(lambda: request(ctl, {"cmd": "routes"})["halves"][1]["counters"].get("nodes_registered"), 15,
             what="the ServerNet host's announcement over ServerNet")
        # the half's paths to the host went down while the host was not there yet; they come back
        poll(lambda: {p["state"] for p in request(ctl, {"cmd": "routes"})["halves"][1]["servernet_paths"][
            f"{SN_H:#07x}"].values()} == {"UP"}, 10, what="the half's ServerNet paths to the host UP")
        with Node(fa.ulp_path(1), H_A, parse_ula(ula_a[1])) as a:
            a.send(H_S, b"L3 from GSN")
            q, hops, mtu = a.route(H_S)[0]
            assert [h.route for h in hops] == [route(SN_H)] and mtu == 64  # the L2RH is the 8-byte ServerNet route
            a.send(H_S, b"L2 from GSN", route=hops)
            out, err = listener.communicate(timeout=20)
            assert listener.returncode == 0, err
            assert "L3 from GSN" in out and "L2 from GSN" in out

            r = pktway_sn(fa, "send", hex(H_A), "from ServerNet")
            assert r.returncode == 0, r.stderr
            assert a.recv(10).data.rstrip(b"\0") == b"from ServerNet"

            a.send(H_S, bytes(8 * 100))  # over the ServerNet half's 64-word MTU: ERR back to the source
            assert a.recv(10).pt == PT.ERR
        half = request(ctl, {"cmd": "routes"})["halves"][1]["counters"]
        assert half["snet_rx_messages"] >= 2 and half["snet_tx_messages"] >= 2
        # the host returned the slots of the messages it took by credit WRITEs (spec 1.8)
        assert half.get("snet_credit_rx", 0) >= 1 and half.get("snet_slots_returned", 0) >= 2
        assert half.get("snet_tx_X", 0) + half.get("snet_tx_Y", 0) > 0
        for f in ("x", "y"):
            assert not any(k.startswith("drop") for k in request(str(fa.tmp / f"router-{f}.sock"),
                                                                   {"cmd": "status"})["counters"])
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()
