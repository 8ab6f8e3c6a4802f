"""`gsnctl show` against real daemons: a switch and two hosts in namespaces, harpd and
stpd on host 1, traffic across (ping), then one screen (text and --json)."""

from __future__ import annotations

import json
import subprocess

import pytest

from lab.netns import BIN, Fabric, poll

OPTIONS = "lis gsn0 192.0.2.0/24\nrole gsn0 auto\nserver gsn0 00:10:3b:ff:ff:e0\n"


@pytest.fixture
def host():
    with Fabric(2, broadcast=False, static={"00:10:3b:ff:ff:e0": 1}, prefix="sh") as fab:
        ulas = fab.up(v6=False)
        for i in (1, 2):
            fab.start_harpd(i, OPTIONS, "--timer-scale", "0.01")
        fab.start_stpd(1)
        # the runtime root an operator's host has: /run/{gsnd,gsn-switch,harpd,stpd}
        root = fab.tmp / "run"
        root.mkdir()
        (root / "gsnd").symlink_to(fab.runtime(1))
        (root / "gsn-switch").symlink_to(fab.tmp / "sw")
        (root / "harpd").symlink_to(fab.tmp / "h1" / "harpd")
        (root / "stpd").symlink_to(fab.tmp / "h1" / "stpd")
        yield fab, root, ulas


def show(root, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "gsnctl"), "show", "--run-dir", str(root), *args], capture_output=True,
                          text=True, timeout=60)


def test_show_one_screen(host):
    fab, root, ulas = host
    poll(lambda: fab.ns_exec(1, "ping", "-c", "1", "-W", "1", "192.0.2.2", check=False).returncode == 0, 20,
         what="ping 192.0.2.2 through harpd")
    pinger = subprocess.Popen(["ip", "netns", "exec", fab.host_ns[0], "ping", "-i", "0.05", "-s", "1400",
                               "192.0.2.2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        r = show(root, "--json", "--interval", "1")
    finally:
        pinger.terminate()
        pinger.wait()
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    g = data["gsnd"]["gsn0"]
    assert g["ok"] and g["link"] == "up" and g["ula"] == ulas[0]
    assert 0 <= g["cable"]["last_heard_s"] < 1.0  # keepalives every 100 ms
    assert g["rates"]["tx_bytes"] > 1400 * 5 and g["rates"]["rx_bytes"] > 1400 * 5  # ~20 pings/s each way
    assert g["per_vc"]["tx_messages"][1] > 0  # IP rides on VC1
    peers = {p["ula"]: p for p in g["peers"]}
    assert peers[ulas[0]]["self"] and peers[ulas[0]]["port"] == 1
    assert peers[ulas[1]]["port"] == 2 and peers[ulas[1]]["ips"] == ["192.0.2.2"]
    sw = data["switch"]
    assert sw["ok"] and [p["link"] for p in sw["ports"].values()] == ["up", "up"]
    assert sw["ports"]["1"]["ulas"] == [ulas[0], "00:10:3b:ff:ff:e0"] or \
        set(sw["ports"]["1"]["ulas"]) == {ulas[0], "00:10:3b:ff:ff:e0"}
    assert sw["ports"]["2"]["rx_mps"] > 0
    assert data["harpd"]["ok"] and data["harpd"]["interfaces"]["gsn0"]["lis"][0]["lis"] == "192.0.2.0/24"
    assert data["stpd"] == {"socket": str(root / "stpd" / "api.sock"), "ok": True, "connections": 0,
                            "listeners": [], "scope": "all", "drops": {}}

    text = show(root, "--interval", "0")
    assert text.returncode == 0, text.stderr
    out = text.stdout
    assert out.startswith(f"gsnd: gsn0\n  ULA: {ulas[0]}   link: up   neighbour: switch")
    assert f"  peer: {ulas[1]}\n    switch port: 2\n    ip: 192.0.2.2" in out
    assert "rates: (no interval)" in out and "gsn-switch: 1   broadcast off" in out
    assert "  port 2: up   peer 198.18.2.2:6400   last heard " in out, out
    assert "harpd:\n  gsn0: LIS 192.0.2.0/24   ip 192.0.2.1" in out and "stpd: connections 0" in out


def test_show_names_a_daemon_that_is_gone(host):
    fab, root, _ = host
    fab.kill("harpd1", 9)  # its socket file stays behind: a crashed daemon
    poll(lambda: (root / "harpd" / "control.sock").exists(), what="harpd socket left by kill -9")
    r = show(root, "--interval", "0")
    assert r.returncode == 0, r.stderr
    assert "harpd: not answering: Connection refused" in r.stdout
    assert "gsnd: gsn0\n  ULA: " in r.stdout
