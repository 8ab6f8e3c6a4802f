"""Authenticated cables between real processes in namespaces: a keyed fabric and two
gsnds back to back carry IP; a cable whose ends hold different keys never comes up; captured datagrams
replayed from the peer's address, a RESET from the peer's previous run and forged
RESETs are dropped, counted, and leave the link up.  Without keys the same forged
RESET resets the link (so the attacker's datagrams do reach gsnd)."""

import os
import subprocess
import sys
import time
from pathlib import Path

from lab.netns import BIN, Fabric, poll, write_cable_key
from daemons.wire.micropacket import Micropacket
from daemons.wire.shim import Shim
from daemons.constants import MpType

RAWUDP = str(Path(__file__).with_name("rawudp.py"))
SWITCH_PORT, HOST = "198.18.1.1:7000", "198.18.1.2:6400"


def gsnd_cable(fab, i=1):
    st = fab.gsnd_status(i)
    return st and {**st["cable"], **st["cable"]["transport"]}


def port_cable(fab, n=1):
    st = fab.switch_status()
    return st and st["ports"][str(n)]["cable"]


def start_capture(fab, seconds, out):
    """Record switch port 1 -> host 1 datagrams on the switch's veth for ``seconds``."""
    iface = f"s{fab.tag}1"[-15:]
    p = subprocess.Popen(["ip", "netns", "exec", fab.sw_ns, sys.executable, RAWUDP, "capture", iface,
                          SWITCH_PORT, HOST, str(seconds), str(out)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def captured(p, out):
    assert p.wait(30) == 0
    return [bytes.fromhex(line) for line in Path(out).read_text().split()]


def spoof(fab, payloads, path):
    """Send ``payloads`` to host 1's gsnd from the switch port's address (raw IP)."""
    Path(path).write_text("".join(p.hex() + "\n" for p in payloads))
    r = fab.ns_exec(0, sys.executable, RAWUDP, "send", SWITCH_PORT, HOST, str(path))
    assert r.stdout.strip() == str(len(payloads)), r


def forged_reset(cable_id=1):
    """A RESET as an attacker without the key makes it: a fresh nonce, from the switch's address."""
    return Shim(0, cable_id, 0x5EED5EED, 0, 0, 0).encode() + Micropacket(type=MpType.RESET).encode()


def test_a_keyed_fabric_carries_ip_and_shows_auth_on():
    with Fabric(2, prefix="ka") as fab:
        fab.up(v6=False)
        r = fab.ns_exec(1, "ping", "-c", "3", "-i", "0.2", "-W", "2", "192.0.2.2", check=False)
        assert r.returncode == 0, r.stdout + r.stderr
        for i in (1, 2):
            c = gsnd_cable(fab, i)
            assert c["auth"] == "on" and c["rx_auth_ok"] > 0
            # gsnd's data-plane loop seals and opens the keyed cable in C (daemons/_loopseal.h)
            assert fab.gsnd_status(i)["ip"]["dataplane"] is True and c["tx_auth_sealed_dp"] > 0, c
            assert not any(k.startswith("rx_auth_") and k != "rx_auth_ok" for k in c), c
            p = port_cable(fab, i)
            assert p["auth"] == "on" and p["rx_auth_ok"] > 0
        text = subprocess.run([str(BIN / "gsnctl"), "-s", str(fab.runtime(1) / "gsn0.ctl"), "status"],
                              capture_output=True, text=True, timeout=10).stdout
        assert "cable: auth on" in text and "rx_auth_ok" in text
        text = subprocess.run([str(BIN / "gsnctl"), "-s", str(fab.tmp / "sw" / "control.sock"), "status"],
                              capture_output=True, text=True, timeout=10).stdout
        assert text.count("cable: auth on") == 2


def test_mismatched_keys_never_come_up_and_count_bad_macs():
    with Fabric(1, prefix="kb") as fab:
        fab.start_switch()
        fab.start_gsnd(1, key_file=write_cable_key(fab.tmp / "other.key"))
        poll(lambda: (gsnd_cable(fab) or {}).get("rx_auth_bad_mac", 0) >= 10
             and (port_cable(fab) or {}).get("rx_auth_bad_mac", 0) >= 10, 10, what="bad-MAC drops on both ends")
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:  # RESETs every 10 ms, none ever accepted
            st, sw = fab.gsnd_status(1), fab.switch_status()
            assert st["link"]["state"] != "up" and sw["ports"]["1"]["link"]["state"] != "up"
            assert "rx_auth_ok" not in st["cable"]["transport"] and "rx_auth_ok" not in sw["ports"]["1"]["cable"]
            time.sleep(0.1)


def test_replays_old_session_resets_and_forged_resets_are_dropped(tmp_path):
    with Fabric(1, prefix="kc") as fab:
        # the switch's first run, gsnd not started: it sends RESETs every 10 ms
        fab.start_switch()
        cap = start_capture(fab, 0.5, tmp_path / "old")
        old_resets = captured(cap, tmp_path / "old")
        assert len(old_resets) >= 5
        assert all(Micropacket.decode(d[32:72]).type is MpType.RESET for d in old_resets)
        fab.kill("switch")
        fab.start_switch()  # a new session (and link nonce)
        fab.start_gsnd(1)
        fab.wait_ula(1)
        cap = start_capture(fab, 0.6, tmp_path / "cur")  # keepalives of the current session, delivered
        current = captured(cap, tmp_path / "cur")
        assert len(current) >= 3
        before = fab.gsnd_status(1)
        ups = before["link"]["counters"]["link_up"]
        c0 = before["cable"]["transport"]
        spoof(fab, old_resets, tmp_path / "s1")
        spoof(fab, current, tmp_path / "s2")
        spoof(fab, [forged_reset(), forged_reset() + os.urandom(32)], tmp_path / "s3")

        def grew(key, n):
            return gsnd_cable(fab)[key] - c0.get(key, 0) >= n
        poll(lambda: grew("rx_auth_old_session", len(old_resets)) and grew("rx_auth_replayed", len(current))
             and grew("rx_auth_unauthenticated", 1) and grew("rx_auth_bad_mac", 1), 10, what="the drops counted")
        time.sleep(0.3)
        after = fab.gsnd_status(1)
        assert after["link"]["state"] == "up" and after["link"]["counters"]["link_up"] == ups
        assert "link_down_peer_reset" not in after["link"]["counters"]
        c1 = after["cable"]["transport"]
        assert c1["rx_auth_old_session"] - c0.get("rx_auth_old_session", 0) == len(old_resets)
        assert c1["rx_auth_replayed"] - c0.get("rx_auth_replayed", 0) == len(current)
        assert fab.switch_status()["ports"]["1"]["link"]["counters"]["link_up"] == 1


def test_without_keys_the_forged_reset_resets_the_link(tmp_path):
    """The control: the same forged RESET on an unauthenticated cable is obeyed."""
    with Fabric(1, prefix="kd", keys=False) as fab:
        fab.up(v6=False)
        assert gsnd_cable(fab)["auth"] == "off"
        spoof(fab, [forged_reset()], tmp_path / "s")
        poll(lambda: fab.gsnd_status(1)["link"]["counters"].get("link_down_peer_reset", 0) >= 1, 10,
             what="the forged RESET taking the link down")


def test_two_gsnds_back_to_back_with_a_shared_key_pass_ping():
    """No switch: one cable between two hosts, both ends on UDP port 6400 (so the
    directions are told apart by IP address), one key file, --ula on each."""
    with Fabric(1, prefix="ke") as fa, Fabric(1, prefix="kf") as fb:
        ip_a, ip_b = fa.link_to(fb, 1, 1, 251)
        key = write_cable_key(fa.tmp / "b2b.key")
        for fab, me, peer, ula in ((fa, ip_a, ip_b, "02:00:00:00:00:0a"), (fb, ip_b, ip_a, "02:00:00:00:00:0b")):
            fab.spawn("gsnd1", 1, str(BIN / "gsnd"), "--local", f"{me}:6400", "--peer", f"{peer}:6400",
                      "--ula", ula, "--key-file", str(key), "--runtime-dir", str(fab.runtime(1)))
        for fab, n in ((fa, 1), (fb, 2)):
            fab.wait_ula(1)
            fab.ip_address(1, v4=f"192.0.2.{n}/24", v6=None)
        r = fa.ns_exec(1, "ping", "-c", "3", "-i", "0.2", "-W", "2", "192.0.2.2", check=False)
        assert r.returncode == 0, r.stdout + r.stderr
        for fab in (fa, fb):
            c = gsnd_cable(fab)
            assert c["auth"] == "on" and c["rx_auth_ok"] > 0 and "rx_auth_reflected" not in c, c
            assert fab.gsnd_status(1)["ip"]["dataplane"] is True and c["tx_auth_sealed_dp"] > 0, c
