"""ServerNet as real processes in namespaces: router processes per fabric in the
middle namespace (X: two routers cabled together, Y: one), two end nodes (snetd) in
host namespaces, driven by snetctl.
Writes, reads, a NAK, 16 transactions in flight, a 1 MiB block intact; the X router
killed with SIGKILL mid-block: the block completes on Y, the X paths go HARD_DOWN and
come back UP once the router is restarted."""

import json
import random
import signal
import subprocess
import zlib

import pytest

from lab.netns import BIN, Fabric, poll
from daemons.runtime.control import request

A, B = 0x04001, 0x08001
PORT = {"x": 7500, "y": 7501, "x2": 7502}
LOCAL = {"x": 7510, "y": 7511}
BUF, BELL = 0x100000, 0x300000


def node_toml(fa, i, me, peer, name, peer_name):
    return f"""
[node]
id = {me:#x}
name = "{name}"
control = "{fa.tmp / f'{name}.sock'}"
timeout = 0.2
[fabric.x]
local = "198.18.{i}.2:{LOCAL['x']}"
router = "198.18.{i}.1:{PORT['x'] if i == 1 else PORT['x2']}"
[fabric.y]
local = "198.18.{i}.2:{LOCAL['y']}"
router = "198.18.{i}.1:{PORT['y']}"
[[peer]]
id = {peer:#x}
name = "{peer_name}"
doorbell = {BELL:#x}
[[window]]
name = "buf"
page = 0x100
pages = 256
[[window]]
name = "bell"
page = 0x300
access = "w"
interrupt = true
"""


def start_router(fa, name):
    """Fabric Y: one router for both nodes.  Fabric X: router "x" serves node A and is
    cabled (over loopback) to router "x2", which serves node B."""
    fabric = name[0]
    if name == "y":
        ports = [f"0=198.18.1.2:{LOCAL['y']}", f"1=198.18.2.2:{LOCAL['y']}"]
        routes = [f"{A:#x}=0", f"{B:#x}=1"]
    elif name == "x":
        ports = [f"0=198.18.1.2:{LOCAL['x']}", f"1=127.0.0.1:{PORT['x2']}"]
        routes = [f"{A:#x}=0", f"{B:#x}=1"]
    else:
        ports = [f"0=198.18.2.2:{LOCAL['x']}", f"1=127.0.0.1:{PORT['x']}"]
        routes = [f"{B:#x}=0", "0/0=1"]  # everything else: towards router x
    argv = [str(BIN / "snet-router"), "--fabric", fabric, "--listen", f"0.0.0.0:{PORT[name]}",
            "--control", str(fa.tmp / f"router-{name}.sock")]
    for p in ports:
        argv += ["--port", p]
    for r in routes:
        argv += ["--route", r]
    fa._spawn(f"router-{name}", fa.sw_ns, argv)
    poll(lambda: (fa.tmp / f"router-{name}.sock").exists(), 10, what=f"router {name}")


@pytest.fixture
def san():
    with Fabric(2, prefix="snt") as fa:
        for name in ("x", "x2", "y"):
            start_router(fa, name)
        for i, (me, peer, name, pname) in enumerate([(A, B, "a", "b"), (B, A, "b", "a")], 1):
            (fa.tmp / f"{name}.toml").write_text(node_toml(fa, i, me, peer, name, pname))
            fa.spawn(f"snetd-{name}", i, str(BIN / "snetd"), "-c", str(fa.tmp / f"{name}.toml"))
        poll(lambda: (fa.tmp / "a.sock").exists() and (fa.tmp / "b.sock").exists(), 10, what="both nodes")
        yield fa


def snetctl(fa, node, *args, check=True, timeout=120):
    r = subprocess.run([str(BIN / "snetctl"), "-s", str(fa.tmp / f"{node}.sock"), *args], capture_output=True,
                       text=True, timeout=timeout)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def status(fa, node):
    return request(str(fa.tmp / f"{node}.sock"), {"cmd": "status"})


def path_state(fa, node, peer, fabric):
    return status(fa, node)["paths"][f"{peer:#07x}"][fabric]


def test_writes_reads_nak_and_sixteen_in_flight(san):
    fa = san
    snetctl(fa, "a", "write", "b", hex(BUF + 8), "--hex", "5365727665724e6574")
    assert snetctl(fa, "a", "read", "b", hex(BUF + 6), "12").stdout.strip() == "0000" + b"ServerNet".hex() + "00"
    bad = snetctl(fa, "a", "read", "b", "0x900000", "8", check=False)
    assert bad.returncode == 1 and "nak" in bad.stderr
    assert status(fa, "b")["counters"]["avt"]["nak_bad_address"] == 1
    data = random.Random(1).randbytes(4096)
    snetctl(fa, "b", "write", "a", hex(BUF), "--hex", data.hex())
    assert bytes.fromhex(snetctl(fa, "b", "read", "a", hex(BUF), "4096").stdout.strip()) == data
    st = status(fa, "b")
    assert st["tids_high_water"] == 16 and st["tids_in_use"] == 0  # 64 READs, 16 at a time
    assert st["counters"]["bte"]["tx_X"] > 0 and st["counters"]["bte"]["tx_Y"] > 0  # both fabrics at once
    routers = [request(str(fa.tmp / f"router-{f}.sock"), {"cmd": "status"}) for f in ("x", "x2", "y")]
    assert [r["fabric"] for r in routers] == ["X", "X", "Y"]
    assert all(r["counters"]["port0_rx"] > 0 and r["counters"]["port1_rx"] > 0
               and not any(k.startswith("drop") for k in r["counters"]) for r in routers)


def test_one_mib_block_survives_the_x_router_killed_and_x_fails_back(san):
    fa = san
    length, seed = 1 << 20, 42
    blk = subprocess.Popen([str(BIN / "snetctl"), "-s", str(fa.tmp / "a.sock"), "block", "b", hex(BUF), "--random",
                            str(length), "--seed", str(seed), "--json"], stdout=subprocess.PIPE, text=True)
    try:
        poll(lambda: status(fa, "b")["counters"]["node"].get("rx_X", 0) > 1000, 30, what="the block under way")
        fa.kill("router-x", signal.SIGKILL)
        out, _ = blk.communicate(timeout=120)
    finally:
        if blk.poll() is None:
            blk.kill()
            blk.wait()
    r = json.loads(out)
    assert r["ok"] and r["length"] == length and r["packets"]["Y"] > r["packets"]["X"] > 0
    irq = request(str(fa.tmp / "b.sock"), {"cmd": "interrupts"})
    (block,) = irq["blocks"]
    expect = random.Random(seed).randbytes(length)
    assert block["intact"] and block["crc32"] == zlib.crc32(expect) and block["length"] == length
    assert bytes.fromhex(snetctl(fa, "a", "read", "b", hex(BUF + length - 256), "256").stdout.strip()) == expect[-256:]
    poll(lambda: path_state(fa, "a", B, "X")["state"] in ("HARD_DOWN", "PROBING"), 10, what="a->b on X hard down")
    assert path_state(fa, "a", B, "X")["counters"]["to_hard_down"] >= 1
    assert path_state(fa, "a", B, "Y")["state"] == "UP"
    start_router(fa, "x")
    poll(lambda: path_state(fa, "a", B, "X")["state"] == "UP", 10, what="a->b on X back UP")
    before = status(fa, "a")["counters"]["bte"]["tx_X"]
    snetctl(fa, "a", "write", "b", hex(BUF), "--hex", "00" * 1024)
    assert status(fa, "a")["counters"]["bte"]["tx_X"] > before  # X carries traffic again
