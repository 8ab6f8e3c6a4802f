"""A GSN fabric joined to another kind of SAN: a generic datagram SAN (pktway-san,
one UDP switch, numbered ports) and a GSN fabric, one pktwayd router between them.
Hosts exchange packets by L3 and along a planned L2 route whose last L2RH is a
datagram-SAN port; MTU and garbage are handled.  (ServerNet proper:
test_pktway_over_servernet.py.)"""

import json
import subprocess

import pytest

from lab.netns import BIN, Fabric, gsn_router_toml, poll
from daemons.runtime.control import request
from daemons.wire.ula import parse_ula
from pktwayd.constants import PT, ErrTE
from pktwayd.node import Node
from pktwayd.udpsan import native

H_A, R_A, R_S, H_S = 0x40, 0x50, 0x51, 0x60
SAN = "127.0.0.1:7400"
HS_SAN = f"{SAN},127.0.0.1:7402,2"


@pytest.fixture
def net():
    with Fabric(2, prefix="sn") as fa:
        ula_a = fa.up(v6=False)
        ctl, san_ctl = fa.tmp / "router.sock", fa.tmp / "san.sock"
        gsn_half = gsn_router_toml("gs", ctl, [(R_A, 0x100, 8192, fa.ulp_path(2), [(H_A, ula_a[0])])])
        (fa.tmp / "router.toml").write_text(gsn_half + f"""
[[half]]
kind = "udp"
addr = {R_S}
san_id = 0x200
mtu = 512
switch = "{SAN}"
local = "127.0.0.1:7401"
port = 1
[[half.node]]
addr = {H_S}
port = 2
name = "san-host"
""")
        fa.spawn("san", 2, str(BIN / "pktway-san"), "--listen", SAN, "--port", "1=127.0.0.1:7401",
                 "--port", "2=127.0.0.1:7402", "--control", str(san_ctl))
        fa.spawn("pktwayd", 2, str(BIN / "pktwayd"), "-c", str(fa.tmp / "router.toml"))
        poll(lambda: ctl.exists() and san_ctl.exists(), 10, what="pktwayd and pktway-san control sockets")
        poll(lambda: all(h["up"] and len(h["rts"]) == 2 for h in request(str(ctl), {"cmd": "routes"})["halves"]),
             10, what="both halves up with their twin's LRT")
        yield fa, ula_a, str(ctl), str(san_ctl)


def pktway_in_ns(fa, *args, timeout=30):
    return fa.ns_exec(2, str(BIN / "pktway"), *args, check=False, timeout=timeout)


def test_gsn_and_datagram_san_hosts_talk_by_l3_and_l2(net):
    fa, ula_a, ctl, san_ctl = net
    listener = subprocess.Popen(["ip", "netns", "exec", fa.host_ns[1], str(BIN / "pktway"), "listen", "--san", HS_SAN,
                                 "--router", "1", "--addr", hex(H_S), "--count", "2"], stdout=subprocess.PIPE, text=True)
    try:
        poll(lambda: request(ctl, {"cmd": "routes"})["halves"][1]["counters"].get("nodes_registered"), 10,
             what="the datagram-SAN host's announcement")
        with Node(fa.ulp_path(1), H_A, parse_ula(ula_a[1])) as a:
            a.send(H_S, b"L3 from GSN")
            routes = a.route(H_S)  # the twin's L2RH for H_S is SAN port 2
            q, hops, mtu = routes[0]
            assert [h.route for h in hops] == [native(2)] and mtu == 512 and q == 2
            a.send(H_S, b"L2 from GSN", route=hops)
            out, _ = listener.communicate(timeout=15)
            assert listener.returncode == 0
            assert "L3 from GSN" in out and "L2 from GSN" in out

            r = pktway_in_ns(fa, "send", "--san", HS_SAN, "--router", "1", "--addr", hex(H_S), hex(H_A),
                             "from the SAN")
            assert r.returncode == 0, r.stderr
            assert a.recv(10).data.rstrip(b"\0") == b"from the SAN"

            a.send(H_S, bytes(8 * 600))  # over the SAN half's 512-word MTU: ERR to the source, no SAR
            err = a.recv(10)
            assert err.pt == PT.ERR and err.te == ErrTE.GENERAL

            r = pktway_in_ns(fa, "find", "--san", HS_SAN, "--router", "1", "--addr", hex(H_S), "--name", "san-host")
            assert r.returncode == 0 and hex(H_S) in r.stdout.replace("0x0000", "0x")
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()


def test_datagram_san_switch_counts_garbage(net):
    fa, ula_a, ctl, san_ctl = net
    junk = ("import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('127.0.0.1', 7402));"
            "[s.sendto(d, ('127.0.0.1', 7400)) for d in (b'', b'\\x01', b'\\x01\\x08\\x00x', b'\\x09\\x03\\x00x')];"
            "u=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.sendto(b'\\x01\\x03\\x00x', ('127.0.0.1', 7400))")
    assert fa.ns_exec(2, "python3", "-c", junk, check=False).returncode == 0
    counters = poll(lambda: (c := request(san_ctl, {"cmd": "status"})["counters"]).get("drop_unknown_sender") and c,
                    10, what="the switch's drop counters")
    assert counters["drop_bad_header"] == 3 and counters["drop_no_such_port"] == 1
    # and a garbage EEP packet through the switch reaches the router, which counts it
    bad = "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('127.0.0.1', 7402));" \
          "s.sendto(b'\\x01\\x03\\x00' + bytes(range(40)), ('127.0.0.1', 7400))"
    fa.ns_exec(2, "python3", "-c", bad)
    poll(lambda: any(k.startswith("rx_bad") for k in request(ctl, {"cmd": "routes"})["halves"][1]["counters"]), 10,
         what="the router's count of the malformed packet")
    assert json.dumps(request(ctl, {"cmd": "routes"}))  # still answering


def test_memory_board_and_embedded_packet_from_the_cli(net):
    """pktway memory-write / memory-read against a node serving a memory board (listen
    --memory), and pktway embed: an embedded packet L3 to the node, unwrapped there."""
    fa, ula_a, ctl, _san_ctl = net
    listener = subprocess.Popen(["ip", "netns", "exec", fa.host_ns[1], str(BIN / "pktway"), "listen", "--san", HS_SAN,
                                 "--router", "1", "--addr", hex(H_S), "--memory", "64", "--count", "1"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    gsn = ("--ulp", fa.ulp_path(1), "--addr", hex(H_A), "--router", ula_a[1])
    try:
        poll(lambda: request(ctl, {"cmd": "routes"})["halves"][1]["counters"].get("nodes_registered"), 10,
             what="the datagram-SAN host's announcement")
        w = fa.ns_exec(1, str(BIN / "pktway"), "memory-write", *gsn, hex(H_S), "8", "ca:fe:00:42", check=False)
        assert w.returncode == 0, w.stderr
        r = poll(lambda: (x := fa.ns_exec(1, str(BIN / "pktway"), "memory-read", *gsn, hex(H_S), "6", "6",
                                          "--timeout", "2", check=False)).returncode == 0 and x, 10,
                 what="the memory board's answer")
        assert r.stdout.strip() == "0000cafe0042"
        out_of_range = fa.ns_exec(1, str(BIN / "pktway"), "memory-read", *gsn, hex(H_S), "60", "8", "--timeout", "1",
                                  check=False)
        assert out_of_range.returncode == 1 and "no answer" in out_of_range.stderr
        bad = fa.ns_exec(1, str(BIN / "pktway"), "memory-write", *gsn, hex(H_S), "0", "zz", check=False)
        assert bad.returncode == 2 and "not hex bytes" in bad.stderr and "Traceback" not in bad.stderr
        e = fa.ns_exec(1, str(BIN / "pktway"), "embed", *gsn, hex(H_S), hex(H_S), "wrapped hello", check=False)
        assert e.returncode == 0, e.stderr
        out, err = listener.communicate(timeout=20)
        assert listener.returncode == 0, err
        assert f"from {H_A:#08x} pt=0x0006 te=0: b'wrapped hello'" in out, out
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()
