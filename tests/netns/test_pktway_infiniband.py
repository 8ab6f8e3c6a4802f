"""PacketWay between a GSN fabric and an InfiniBand-style fabric: one pktwayd router
whose second half is a port (kind "infiniband") on a fabric of ib-sm and ib-switch;
the IB host is a `pktway --ib` node.  L2RH on the IB side = DLID + QPN."""

import json
import subprocess

import pytest

from lab.netns import BIN, Fabric, gsn_router_toml, poll
from daemons.runtime.control import request
from daemons.wire.ula import parse_ula
from ib.constants import QPN_PACKETWAY
from ib.udport import route
from pktwayd.node import Node

H_A, R_A, R_I, H_I = 0x40, 0x50, 0x51, 0x61
G_R, G_H = 0x0002C903000000A1, 0x0002C903000000B2
LID_R, LID_H = 7, 9  # from the SM's state file: LIDs are stable across restarts
SM = "127.0.0.1:4791"
HI_IB = f"{G_H:#x},127.0.0.1:7602,127.0.0.1:7502,{SM}"


@pytest.fixture
def net():
    with Fabric(2, prefix="pi") as fa:
        ula_a = fa.up(v6=False)
        t = fa.tmp
        (t / "sm").mkdir()
        (t / "sm" / "lids.json").write_text(json.dumps({"lids": {f"{G_R:#018x}": LID_R, f"{G_H:#018x}": LID_H}}))
        (t / "sw.toml").write_text(f"""
[switch]
guid = "0x1001"
sm = "{SM}"
runtime_dir = "{t}/sw-ib"
[[port]]
number = 1
local = "127.0.0.1:7501"
peer = "127.0.0.1:7601"
[[port]]
number = 2
local = "127.0.0.1:7502"
peer = "127.0.0.1:7602"
""")
        ctl = t / "router.sock"
        gsn_half = gsn_router_toml("gi", ctl, [(R_A, 0x100, 8192, fa.ulp_path(2), [(H_A, ula_a[0])])])
        (t / "router.toml").write_text(gsn_half + f"""
[[half]]
kind = "infiniband"
addr = {R_I}
san_id = 0x300
mtu = 255
guid = "{G_R:#x}"
local = "127.0.0.1:7601"
switch = "127.0.0.1:7501"
sm = "{SM}"
[[half.node]]
addr = {H_I}
lid = {LID_H}
name = "ib-host"
""")
        fa.spawn("ib-sm", 2, str(BIN / "ib-sm"), "--listen", SM, "--state-file", str(t / "sm" / "lids.json"),
                 "--runtime-dir", str(t / "sm"))
        fa.spawn("ib-switch", 2, str(BIN / "ib-switch"), "-c", str(t / "sw.toml"))
        fa.spawn("pktwayd", 2, str(BIN / "pktwayd"), "-c", str(t / "router.toml"))
        poll(lambda: ctl.exists(), 10, what="pktwayd control socket")
        poll(lambda: all(h["up"] and len(h["rts"]) == 2 for h in request(str(ctl), {"cmd": "routes"})["halves"]),
             15, what="both halves up (the IB half once the SM gave it its LID)")
        yield fa, ula_a, str(ctl)


def test_gsn_and_infiniband_hosts_talk_by_l3_and_l2(net):
    fa, ula_a, ctl = net
    listener = subprocess.Popen(["ip", "netns", "exec", fa.host_ns[1], str(BIN / "pktway"), "listen", "--ib", HI_IB,
                                 "--router", str(LID_R), "--addr", hex(H_I), "--count", "2"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        poll(lambda: request(ctl, {"cmd": "routes"})["halves"][1]["counters"].get("nodes_registered"), 15,
             what="the IB host's announcement")
        sw = str(fa.tmp / "sw-ib" / "control.sock")
        poll(lambda: str(LID_H) in request(sw, {"cmd": "status"})["lft"], 5, what="the SM routing the IB host's LID")
        with Node(fa.ulp_path(1), H_A, parse_ula(ula_a[1])) as a:
            a.send(H_I, b"L3 from GSN")
            q, hops, mtu = a.route(H_I)[0]  # the twin's L2RH for H_I: DLID + QPN on the IB fabric
            assert [h.route for h in hops] == [route(LID_H, QPN_PACKETWAY)] and mtu == 255
            a.send(H_I, b"L2 from GSN", route=hops)
            out, err = listener.communicate(timeout=20)
            assert listener.returncode == 0, err
            assert "L3 from GSN" in out and "L2 from GSN" in out
            r = fa.ns_exec(2, str(BIN / "pktway"), "send", "--ib", HI_IB, "--router", str(LID_R), "--addr", hex(H_I),
                           hex(H_A), "from InfiniBand", check=False, timeout=30)
            assert r.returncode == 0, r.stderr
            assert a.recv(10).data.rstrip(b"\0") == b"from InfiniBand"
        half = request(ctl, {"cmd": "routes"})["halves"][1]
        assert half["kind"] == "infiniband" and half["counters"].get("rx_packets", 0) >= 2
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()
