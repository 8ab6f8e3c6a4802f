"""The Lua dissectors on real traffic: tcpdump on a host's cable in network namespaces
while gsnd, harpd, stpd and pktwayd work, then tshark -X lua_script:wireshark/*.lua."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import pytest

from lab.netns import BIN, Fabric, poll
from daemons.runtime.control import request
from stpd.client import StClient
from tests.tshark import experts, needs_tshark, read_pcap, rewrite_pcap, tshark_json, values

pytestmark = needs_tshark
HARP_OPTIONS = "lis gsn0 192.0.2.0/24\nrole gsn0 auto\nserver gsn0 00:10:3b:ff:ff:e0\n"


def start_capture(fab: Fabric, i: int, name: str, iface: str = "ul0", bpf: str = "udp") -> Path:
    """tcpdump in host i's namespace (default: its cable to the switch, every UDP
    datagram), each packet written as it arrives."""
    path = fab.tmp / f"{name}.pcap"
    fab.spawn(name, i, "tcpdump", "-n", "--immediate-mode", "-i", iface, "-s", "0", "-U", "-w", str(path), bpf)
    poll(lambda: "listening on" in fab.logs[name].read_text(errors="replace"), 10, what=f"{name} listening")
    return path


def capture_stats(fab: Fabric, name: str) -> list[tuple[int, int]]:
    """Every (captured, received by filter) statistics block tcpdump wrote to its log."""
    log = fab.logs[name].read_text(errors="replace")
    captured = re.findall(r"(\d+) packets? captured", log)
    received = re.findall(r"(\d+) packets? received by filter", log)
    return [(int(c), int(r)) for c, r in zip(captured, received)]


def stop_capture(fab: Fabric, name: str) -> None:
    """Stop tcpdump once it has written all it was given: packets still in its capture
    ring when it is interrupted are lost.  SIGUSR1 makes it print its statistics: done
    when it has captured all its filter received, or (on lo, where the filter also counts
    each packet's outgoing copy, which is not captured) nothing new since the last ones."""
    def drained() -> bool:
        before = len(capture_stats(fab, name))
        fab.procs[name].send_signal(signal.SIGUSR1)
        stats = poll(lambda: (st := capture_stats(fab, name)) and len(st) > before and st, 5,
                     what=f"{name} statistics")
        return stats[-1][0] == stats[-1][1] or (len(stats) >= 2 and stats[-1] == stats[-2])

    poll(drained, 10, interval=0.1, what=f"{name} to write every packet it received")
    fab.kill(name, signal.SIGINT)


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """One fabric, two hosts: HARP registration and resolution, a ping, an ST transfer,
    all captured on host 2's cable to the switch."""
    with Fabric(2, broadcast=False, static={"00:10:3b:ff:ff:e0": 1}, prefix="ws") as fab:
        ulas = fab.up(v6=False)
        pcap = start_capture(fab, 2, "tcpdump2")
        fab.start_harpd(1, HARP_OPTIONS)
        fab.start_harpd(2, HARP_OPTIONS)
        # host 2 registers with the server (on host 1) first: an address asked for before
        # that is NAKed, and the kernel then waits out its negative cache
        poll(lambda: "192.0.2.2" in fab.gsnarp(1, "-a", "-n").stdout, 20, what="host 2 registered")
        ping = fab.ns_exec(1, "ping", "-c", "1", "-W", "5", "192.0.2.2", check=False)
        assert ping.returncode == 0, ping.stdout + ping.stderr
        apis = fab.start_stpds(ulas)
        src, dst = fab.tmp / "st.bin", fab.tmp / "in"
        dst.mkdir()
        src.write_bytes(bytes(range(256)) * 400)
        rx = subprocess.Popen([str(BIN / "stp"), "--socket", apis[1], "recv", str(dst)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        try:
            poll(lambda: 5001 in StClient(apis[1]).status()["listeners"], 10, what="stp recv listening")
            tx = subprocess.run([str(BIN / "stp"), "--socket", apis[0], "send", str(src), "192.0.2.2"],
                                capture_output=True, text=True, timeout=60)
            assert tx.returncode == 0, tx.stderr
            rx.communicate(timeout=30)
        finally:
            if rx.poll() is None:
                rx.kill()
                rx.wait()
        assert (dst / "st.bin").read_bytes() == src.read_bytes()
        stop_capture(fab, "tcpdump2")
        keep = tmp_path_factory.mktemp("dissect") / "fabric.pcap"
        keep.write_bytes(pcap.read_bytes())
        yield keep, ulas, tshark_json(keep)


def test_cable_shim_and_micropackets(captured):
    _, _, js = captured
    assert set(values(js, "gsn.cable_id")) == {"2"}  # --cable-id of host 2's gsnd
    assert {"1", "2", "4"} <= set(values(js, "gsn.mp.type"))  # DATA, HEADER, CREDIT
    assert set(values(js, "gsn.mp.lcrc_ok")) == {"1"}
    assert set(values(js, "gsn.msg.ecrc_ok")) == {"1"}


def test_ping_inside_gsn_messages(captured):
    _, ulas, js = captured
    echo = [p for p in js if "8" in values(p, "icmp.type")]
    reply = [p for p in js if "0" in values(p, "icmp.type")]
    assert echo and reply
    m = values(echo[0], "gsn_msg")[0]
    assert m["gsn.msg.vc"] == "1" and m["gsn.msg.ethertype"] == "0x0800"
    assert m["gsn.msg.s_ula"] == ulas[0] and m["gsn.msg.d_ula"] == ulas[1]
    assert m["gsn.msg.llc.dsap"] == "0xaa" and m["gsn.msg.snap.oui"] == "0x000000"
    assert "192.0.2.2" in values(echo[0], "ip.dst")


def test_harp_exchange(captured):
    _, ulas, js = captured
    ops = set(values(js, "harp.op"))
    assert ops & {"1", "8"} and ops & {"2", "9"}  # a request and its reply crossed host 2's cable
    assert set(values(js, "harp.hrd")) == {"28"}
    assert "192.0.2.2" in values(js, "harp.rpa")
    assert ulas[1] in values(js, "harp.rha") + values(js, "harp.tha")


def test_st_transfer(captured):
    _, _, js = captured
    ops = set(values(js, "st.op"))
    assert {"0x0001", "0x0002", "0x001b"} <= ops  # RC, CA, DATA
    assert set(values(js, "st.checksum_ok")) <= {"1"}
    rc = [p for p in js if "0x0001" in values(p, "st.op")][0]
    assert "0x00001389" in values(rc, "st.d_id") + values(rc, "st.s_id")  # stp's ULP port 5001 rides in RC


def test_flipped_byte_in_real_capture_is_lcrc_bad(captured, tmp_path):
    path, _, js = captured
    linktype, recs = read_pcap(path)
    frame = next(int(p["_source"]["layers"]["frame"]["frame.number"]) for p in js if "8" in values(p, "icmp.type"))
    head, pkt = recs[frame - 1]
    bad = bytearray(pkt)
    trailer = 32 if values(js[frame - 1], "gsn.auth.counter") else 0  # a keyed cable's MAC trailer comes last
    bad[-10 - trailer] ^= 0x40  # inside the last micropacket's control word (ECRC)
    recs[frame - 1] = (head, bytes(bad))
    out = tshark_json(rewrite_pcap(path, tmp_path / "bad.pcap", recs, linktype))[frame - 1]
    assert values(out, "gsn.mp.lcrc_ok")[-1] == "0"
    assert any("LCRC mismatch" in e for e in experts(out))


def test_packetway_between_two_pktwayds():
    """Two pktwayd processes, twins joined by their own GSN cable over UDP, captured on
    that cable: their routing-table exchange (RRP in EEP packets, in GSN Messages with
    EtherType 0x88B6)."""
    with Fabric(1, prefix="wa") as fa, Fabric(1, prefix="wb") as fb:
        ula_a, ula_b = fa.up(v6=False), fb.up(v6=False)
        ip_a, ip_b = fa.link_to(fb, 1, 1, 251)
        controls = []
        for fab, me, twin, san, local, peer, node in ((fa, 0x50, 0x51, 0x100, ip_a, ip_b, (0x40, ula_a[0])),
                                                      (fb, 0x51, 0x50, 0x101, ip_b, ip_a, (0x60, ula_b[0]))):
            control, cfg = fab.tmp / "pktwayd.sock", fab.tmp / "pktwayd.toml"
            cfg.write_text(f"""
[router]
name = "r{me:x}"
control = "{control}"
liveness = 0.3

[twin]
addr = {twin}
local = "{local}:7351"
peer = "{peer}:7351"

[[half]]
addr = {me}
san_id = {san}
ulp = "{fab.ulp_path(1)}"
[[half.node]]
addr = {node[0]}
ula = "{node[1]}"
""")
            controls.append(control)
        pcap = start_capture(fa, 1, "tcpdump-twin", iface=f"x{fa.tag}251a"[-15:])  # the twin cable's veth
        for fab in (fa, fb):
            fab.spawn("pktwayd", 1, str(BIN / "pktwayd"), "-c", str(fab.tmp / "pktwayd.toml"))
        for control in controls:
            poll(lambda c=control: c.exists() and all(
                h.get("twin_alive") and len(h["rts"]) == 2 for h in request(str(c), {"cmd": "routes"})["halves"]),
                 15, what="twins alive, each holding its LRT and its twin's")
        stop_capture(fa, "tcpdump-twin")
        js = tshark_json(pcap)
    msgs = [m for m in values(js, "gsn_msg") if m.get("gsn.msg.ethertype") == "0x88b6"]
    assert msgs and all(m["gsn.msg.ecrc_ok"] == "1" for m in msgs)
    assert {m["gsn.msg.s_ula"] for m in msgs} == {"02:50:57:00:00:50", "02:50:57:00:00:51"}  # twin ULAs
    assert set(values(js, "gsn.mp.lcrc_ok")) == {"1"}
    assert set(values(js, "pktway.dialect")) == {"pw0"} and set(values(js, "pktway.pt")) >= {"0x0002"}  # RRP
    assert {"0x000050", "0x000051"} <= set(values(js, "pktway.sa"))
    assert "9" in values(js, "pktway.te.rrp")  # RTBL: the twins hand each other their routing tables
    assert {"0x000100", "0x000101"} <= set(values(js, "pktway.rrp.san_id"))  # both routing tables (RTHD)
    assert {"0x000040", "0x000060"} <= set(values(js, "pktway.rrp.addr"))  # the nodes in them


def test_messageway_on_an_emulated_san():
    """A node on an emulated SAN (pktway-san, UDP on loopback) speaking MessageWay v5 sends
    to a GSN host through pktwayd; the datagrams to and from the SAN switch decode as
    MessageWay behind the SAN's native header, whose first byte is the port."""
    with Fabric(1, prefix="wm") as fa:
        ula = fa.up(v6=False)
        ctl, san_ctl = fa.tmp / "router.sock", fa.tmp / "san.sock"
        (fa.tmp / "router.toml").write_text(f"""
[router]
name = "gm"
control = "{ctl}"

[[half]]
addr = 0x50
san_id = 0x100
ulp = "{fa.ulp_path(1)}"
[[half.node]]
addr = 0x40
ula = "{ula[0]}"

[[half]]
kind = "udp"
addr = 0x51
san_id = 0x200
dialect = "mw5"
switch = "127.0.0.1:7410"
local = "127.0.0.1:7411"
port = 1
[[half.node]]
addr = 0x60
port = 2
""")
        pcap = start_capture(fa, 1, "tcpdump-san", iface="lo", bpf="udp and portrange 7410-7412")
        fa.spawn("san", 1, str(BIN / "pktway-san"), "--listen", "127.0.0.1:7410", "--port", "1=127.0.0.1:7411",
                 "--port", "2=127.0.0.1:7412", "--control", str(san_ctl))
        fa.spawn("pktwayd", 1, str(BIN / "pktwayd"), "-c", str(fa.tmp / "router.toml"))
        poll(lambda: ctl.exists() and san_ctl.exists() and all(
            h["up"] for h in request(str(ctl), {"cmd": "routes"})["halves"]), 15, what="pktwayd's halves up")
        sent = fa.ns_exec(1, str(BIN / "pktway"), "send", "--san", "127.0.0.1:7410,127.0.0.1:7412,2", "--addr", "0x60",
                          "--router", "1", "--dialect", "mw5", "0x40", "hello from the SAN", check=False)
        assert sent.returncode == 0, sent.stderr
        stop_capture(fa, "tcpdump-san")
        js = tshark_json(pcap)
    user = [p for p in js if "0x0006" in values(p, "pktway.pt")]
    assert user, "the node's packet is on the capture"
    assert set(values(user, "pktway.dialect")) == {"mw5"}
    assert {"1", "2"} <= set(values(user, "pktway.san.port"))  # to the router's port, delivered with the way back
    assert "0x000040" in values(user, "pktway.dt") and "0x000060" in values(user, "pktway.sa")
    assert not experts(user)
