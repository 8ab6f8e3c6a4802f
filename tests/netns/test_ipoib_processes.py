"""IPoIB over the InfiniBand-style fabric with real processes: ib-sm and two
ib-switches in one namespace, an ipoibd in each of three host namespaces (host 1 on
switch A; hosts 2 and 3 on switch B).  IPv4/IPv6 ping, iperf3, tcpdump on ib0,
shadow ARP against a stopped SM (delayed and failed PathRecords), partitions, SM
kill -9 and restart."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from lab.netns import BIN, Fabric, poll

GUIDS = {i: 0x0002C90300000000 + i for i in (1, 2, 3)}
PARTITIONS = f"""
[[partition]]
name = "default"
pkey = 0x7fff
all = "full"

[[partition]]
name = "red"
pkey = 0x8001
full = ["{GUIDS[1]:#x}", "{GUIDS[2]:#x}"]

[[partition]]
name = "blue"
pkey = 0x8002
full = ["{GUIDS[3]:#x}"]
"""


class IbFabric:
    def __init__(self, fabric=Fabric) -> None:
        self.fab = fabric(3, prefix="ib")
        self.tmp = self.fab.tmp
        (self.tmp / "partitions.toml").write_text(PARTITIONS)
        sw_a = (f"[switch]\nguid = \"0x1001\"\nsm = \"127.0.0.1:4791\"\nruntime_dir = \"{self.tmp}/swa\"\n"
                "[[port]]\nnumber = 1\nlocal = \"198.18.1.1:4701\"\npeer = \"198.18.1.2:4800\"\n"
                "[[port]]\nnumber = 3\nlocal = \"127.0.0.1:4713\"\npeer = \"127.0.0.1:4723\"\n")
        sw_b = (f"[switch]\nguid = \"0x1002\"\nsm = \"127.0.0.1:4791\"\nruntime_dir = \"{self.tmp}/swb\"\n"
                "[[port]]\nnumber = 1\nlocal = \"198.18.2.1:4701\"\npeer = \"198.18.2.2:4800\"\n"
                "[[port]]\nnumber = 2\nlocal = \"198.18.3.1:4701\"\npeer = \"198.18.3.2:4800\"\n"
                "[[port]]\nnumber = 3\nlocal = \"127.0.0.1:4723\"\npeer = \"127.0.0.1:4713\"\n")
        (self.tmp / "swa.toml").write_text(sw_a)
        (self.tmp / "swb.toml").write_text(sw_b)

    def start_sm(self) -> None:
        self.fab._spawn("sm", self.fab.sw_ns, [str(BIN / "ib-sm"), "--listen", "0.0.0.0:4791", "--state-file",
                                                str(self.tmp / "sm" / "lids.json"), "--partitions",
                                                str(self.tmp / "partitions.toml"), "--runtime-dir",
                                                str(self.tmp / "sm")])
        poll(lambda: (self.tmp / "sm" / "control.sock").exists(), what="SM control socket")

    def up(self) -> None:
        self.start_sm()
        for sw in ("swa", "swb"):
            self.fab._spawn(sw, self.fab.sw_ns, [str(BIN / "ib-switch"), "-c", str(self.tmp / f"{sw}.toml")])
        children = {1: ["--child", "0x8001"], 2: ["--child", "0x8001"], 3: ["--child", "0x8002"]}
        for i in (1, 2, 3):
            self.fab.spawn(f"ipoibd{i}", i, str(BIN / "ipoibd"), "--guid", f"{GUIDS[i]:#x}", "--local",
                           f"198.18.{i}.2:4800", "--peer", f"198.18.{i}.1:4701", "--sm", f"198.18.{i}.1:4791",
                           "--runtime-dir", str(self.tmp / f"h{i}"), *children[i])
        for i in (1, 2, 3):
            poll(lambda: (st := self.status(i)) and all(x["carrier"] for x in st["interfaces"]), 15,
                 what=f"host {i} carrier up on every interface")
        for i in (1, 2, 3):
            self.fab.ns_exec(i, "ip", "addr", "add", f"192.0.2.{i}/24", "dev", "ib0")
            self.fab.ns_exec(i, "ip", "addr", "add", f"2001:db8::{i}/64", "dev", "ib0", "nodad")
            self.fab.ns_exec(i, "ip", "link", "set", "ib0", "up")
            child = "ib0.8001" if i < 3 else "ib0.8002"
            self.fab.ns_exec(i, "ip", "addr", "add", f"10.1.0.{i}/24", "dev", child)
            self.fab.ns_exec(i, "ip", "link", "set", child, "up")

    def ibctl(self, i: int | str, *args: str) -> dict | None:
        sock = self.tmp / "sm" / "control.sock" if i == "sm" else self.tmp / f"h{i}" / "ib0.ctl"
        r = subprocess.run([str(BIN / "ibctl"), "-s", str(sock), "--json", *args], capture_output=True, text=True,
                           timeout=10)
        return json.loads(r.stdout) if r.returncode == 0 else None

    def status(self, i):
        return self.ibctl(i, "status")

    def counter(self, i: int, name: str) -> int:
        return (self.status(i) or {}).get("counters", {}).get(name, 0)

    def ping(self, i: int, dst: str, *args: str) -> subprocess.CompletedProcess:
        return self.fab.ns_exec(i, "ping", "-n", *args, dst, check=False, timeout=30)

    def signal_sm(self, sig: int) -> None:
        self.fab.procs["sm"].send_signal(sig)


@pytest.fixture(scope="module")
def ibf():
    f = IbFabric()
    try:
        f.up()
        yield f
    finally:
        f.fab.close()


def test_failed_path_record_drops_the_queue(ibf):
    ibf.signal_sm(signal.SIGSTOP)
    try:
        r = ibf.ping(2, "192.0.2.3", "-c", "1", "-W", "5")
        assert r.returncode != 0, r.stdout
        failed = sum(ibf.counter(i, "paths_failed") for i in (2, 3))
        dropped = sum(ibf.counter(i, "drop_path_failed") for i in (2, 3))
        assert failed >= 1 and dropped >= 1
    finally:
        ibf.signal_sm(signal.SIGCONT)
    assert ibf.ping(2, "192.0.2.3", "-c", "2", "-W", "5").returncode == 0  # queried again, now answered


def test_queued_frames_flushed_in_order_after_a_delayed_path_record(ibf):
    before = sum(ibf.counter(i, "neigh_queued") for i in (1, 3))
    ibf.signal_sm(signal.SIGSTOP)
    try:
        p = subprocess.Popen(["ip", "netns", "exec", ibf.fab.host_ns[0], "ping", "-n", "-c", "3", "-i", "0.2", "-W",
                              "8", "192.0.2.3"], stdout=subprocess.PIPE, text=True)
        # frames wait on a PENDING entry while the SA is silent (within its 3 x 1000 ms)
        poll(lambda: sum(ibf.counter(i, "neigh_queued") for i in (1, 3)) > before, 2.5, interval=0.1,
             what="frames queued on a pending neighbour")
    finally:
        ibf.signal_sm(signal.SIGCONT)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 0, out
    seqs = [int(w.split("=")[1]) for w in out.split() if w.startswith("icmp_seq=")]
    assert seqs == sorted(seqs) and len(seqs) == 3, out


def test_ipv4_ipv6_ping_mtu_and_tcpdump_sees_plain_ip(ibf):
    link = ibf.fab.ns_exec(1, "ip", "link", "show", "ib0").stdout
    assert "mtu 2044" in link and "LOWER_UP" in link
    dump = subprocess.Popen(["ip", "netns", "exec", ibf.fab.host_ns[1], "tcpdump", "-l", "-n", "-i", "ib0", "-c",
                             "2", "icmp"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        time.sleep(1.0)
        r = ibf.ping(1, "192.0.2.2", "-c", "3", "-i", "0.2", "-W", "5")
        assert r.returncode == 0, r.stdout
        out, _ = dump.communicate(timeout=10)
    finally:
        if dump.poll() is None:
            dump.kill()
    assert "IP 192.0.2.1 > 192.0.2.2: ICMP echo request" in out, out
    r6 = ibf.ping(1, "2001:db8::2", "-c", "3", "-i", "0.2", "-W", "5")
    assert r6.returncode == 0, r6.stdout
    assert ibf.ping(3, "2001:db8::1", "-c", "2", "-W", "5").returncode == 0
    # a full-size ping crosses unfragmented at the 2044 MTU
    assert ibf.ping(1, "192.0.2.2", "-c", "1", "-s", "2016", "-M", "do", "-W", "5").returncode == 0
    neigh = ibf.ibctl(1, "neighbours")["neighbours"]
    assert any(n["state"] == "resolved" and len(bytes.fromhex(n["hwaddr"].replace(":", ""))) == 20 for n in neigh)
    text = subprocess.run([str(BIN / "ibctl"), "-s", str(ibf.tmp / "h1" / "ib0.ctl"), "neighbours"],
                          capture_output=True, text=True, timeout=10).stdout
    assert f"LID {ibf.status(2)['lid']}  resolved" in text, text
    path = ibf.ibctl(1, "path", "192.0.2.2")
    assert path and path["dest_lid"] == ibf.status(2)["lid"] and path["mtu"] == 2048
    groups = ibf.ibctl(1, "groups")["groups"]
    assert any(g["mgid"] == "ff12:401b:ffff::ffff:ffff" and g["joined"] for g in groups)
    assert any(g["mgid"].startswith("ff12:601b:ffff:") for g in groups)  # IPv6 groups follow the kernel's


def test_iperf3_over_ib0(ibf):
    from lab.netns import iperf3_run

    gbps = iperf3_run(lambda *a: ibf.fab.ns_exec(1, *a, check=False, timeout=120),
                      ["ip", "netns", "exec", ibf.fab.host_ns[1]], "192.0.2.2", "-t", "2")
    assert gbps > 0.005, gbps


def test_partitions_isolate(ibf):
    assert ibf.ping(1, "10.1.0.2", "-c", "2", "-W", "5").returncode == 0  # red to red
    assert ibf.ping(3, "10.1.0.1", "-c", "2", "-W", "2").returncode != 0  # blue cannot reach red
    assert ibf.ping(1, "10.1.0.3", "-c", "1", "-W", "2").returncode != 0
    st = ibf.status(3)
    assert [i["pkey"] for i in st["interfaces"]] == ["0xffff", "0x8002"]


def test_sm_kill_9_and_restart(ibf):
    lids = {i: ibf.status(i)["lid"] for i in (1, 2, 3)}
    ibf.fab.kill("sm", signal.SIGKILL)
    assert ibf.ping(1, "192.0.2.2", "-c", "2", "-W", "5").returncode == 0  # the switches keep their tables
    ibf.start_sm()
    for i in (1, 2, 3):
        poll(lambda: ibf.counter(i, "sm_reregister") >= 1, 10, what=f"host {i} re-registered")
        assert ibf.status(i)["lid"] == lids[i]  # LIDs from the state file
    assert ibf.ping(1, "192.0.2.3", "-c", "2", "-W", "5").returncode == 0
    assert ibf.ping(2, "2001:db8::3", "-c", "2", "-W", "5").returncode == 0
    sm = ibf.ibctl("sm", "status")
    assert len(sm["ports"]) == 3 and len(sm["switches"]) == 2
