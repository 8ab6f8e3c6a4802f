"""The daemons still work under their units' kernel-side sandbox (tests/netns/sandbox.py applies
each unit's SystemCallFilter=, RestrictAddressFamilies=, MemoryDenyWriteExecute=, UMask=,
ProtectProc=/ProcSubset= and PrivateNetwork=), send READY=1 and watchdog pings, and leave
the sockets group members use at 0660 although UMask=0077."""

import os
import shutil
import socket
import stat
import subprocess
import threading
from collections import defaultdict
from pathlib import Path

import pytest

from lab.netns import BIN, Fabric, poll
from daemons.runtime.control import request
from daemons.wire.ula import parse_ula
from pktwayd.node import Node
from stpd.client import StClient

SANDBOX = Path(__file__).with_name("sandbox.py")
UNITS = Path(__file__).resolve().parents[2] / "systemd"
UNIT_OF = {"gsnd": "gsnd@.service", "gsn-switch": "gsn-switch.service", "harpd": "harpd.service",
           "stpd": "stpd.service", "pktwayd": "pktwayd@.service", "ib-sm": "ib-sm.service",
           "ib-switch": "ib-switch@.service", "ipoibd": "ipoibd@.service", "snetd": "snetd@.service",
           "snet-router": "snet-router@.service"}
SYSTEM_PYTHON = "/usr/bin/python3"


def _have_seccomp() -> bool:
    return os.path.exists(SYSTEM_PYTHON) and subprocess.run([SYSTEM_PYTHON, "-c", "import seccomp"],
                                                            capture_output=True).returncode == 0


pytestmark = pytest.mark.skipif(not _have_seccomp() or not shutil.which("systemd-analyze"),
                                reason="needs python3-seccomp (system interpreter) and systemd-analyze")


def sandboxed(argv: list[str]) -> list[str]:
    unit = UNIT_OF.get(Path(argv[0]).name)
    return [SYSTEM_PYTHON, str(SANDBOX), "--unit", str(UNITS / unit), "--", *argv] if unit else argv


class SandboxedFabric(Fabric):
    def _spawn(self, name, ns, argv):
        return super()._spawn(name, ns, sandboxed(argv))


class NotifyListener:
    """$NOTIFY_SOCKET for every daemon started from now on; messages by sender pid (SO_PASSCRED)."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.by_pid: dict[int, list[str]] = defaultdict(list)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        creds_size = socket.CMSG_SPACE(12)
        while not self.stop.is_set():
            try:
                data, anc, _, _ = self.sock.recvmsg(4096, creds_size)
            except TimeoutError:
                continue
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = int.from_bytes(payload[:4], "little")
                    self.by_pid[pid].extend(data.decode().split("\n"))

    def pings(self, pid: int) -> int:
        return self.by_pid[pid].count("WATCHDOG=1")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
        self.sock.close()


@pytest.fixture
def notify(tmp_path, monkeypatch):
    listener = NotifyListener(tmp_path / "notify")
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify"))
    monkeypatch.setenv("WATCHDOG_USEC", "400000")  # a ping every 0.2 s
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    yield listener
    listener.close()


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


HARP_OPTIONS = "lis gsn0 192.0.2.0/24\nrole gsn0 auto\nserver gsn0 00:10:3b:ff:ff:e0\n"


def test_gsnd_switch_harpd_stpd_sandboxed(notify, tmp_path):
    with SandboxedFabric(2, broadcast=False, static={"00:10:3b:ff:ff:e0": 1}) as fab:
        ulas = fab.up(v6=False)  # gsnd: /dev/net/tun TUNSETIFF, rtnetlink MAC/MTU, UDP cable
        for i in (1, 2):
            fab.start_harpd(i, HARP_OPTIONS, "--timer-scale", "0.01")
        poll(lambda: {"192.0.2.1", "192.0.2.2"} <= set(fab.gsnarp(1, "-a").stdout.split()), 15,
             what="both hosts registered with the HARP server")
        # the kernel's neighbour request answered by harpd writing the entry over rtnetlink
        r = fab.ns_exec(2, "ping", "-c", "2", "-i", "0.2", "-W", "2", "192.0.2.1", check=False)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"192.0.2.1 lladdr {ulas[0]}" in fab.ns_exec(2, "ip", "neigh", "show", "dev", "gsn0").stdout
        # stpd in its own network namespace: Unix sockets only, memfd/SCM_RIGHTS, mmap
        apis = fab.start_stpds(ulas)
        src, dst = tmp_path / "blob.bin", tmp_path / "in"
        src.write_bytes(os.urandom(3 << 20))
        dst.mkdir()
        rx = subprocess.Popen([str(BIN / "stp"), "--socket", apis[1], "recv", str(dst)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        poll(lambda: 5001 in StClient(apis[1]).status()["listeners"], 10, what="a listener on 5001")
        tx = subprocess.run([str(BIN / "stp"), "--socket", apis[0], "send", str(src), "192.0.2.2"],
                            capture_output=True, text=True, timeout=120)
        assert tx.returncode == 0, tx.stderr + "".join(fab.logs[n].read_text()[-3000:] for n in ("stpd1", "stpd2"))
        out, err = rx.communicate(timeout=60)
        assert rx.returncode == 0, err
        assert (dst / "blob.bin").read_bytes() == src.read_bytes()

        # UMask=0077, yet every socket a group member (gsnctl, gsnarp, stp) uses is 0660
        for sock in (fab.runtime(1) / "gsn0.ulp", fab.runtime(1) / "gsn0.ctl", fab.tmp / "sw" / "control.sock",
                     fab.tmp / "h1" / "harpd" / "control.sock", apis[0]):
            assert mode(sock) == 0o660, f"{sock}: {oct(mode(sock))}"

        # every daemon said READY=1 and keeps pinging the watchdog from inside the sandbox
        names = ["switch", "gsnd1", "gsnd2", "harpd1", "harpd2", "stpd1", "stpd2"]
        for name in names:
            assert fab.procs[name].poll() is None, f"{name} exited: {fab.logs[name].read_text()[-2000:]}"
        pids = {name: fab.procs[name].pid for name in names}
        poll(lambda: all(notify.pings(pid) >= 3 for pid in pids.values()), 10, what="three pings from each daemon")
        for name, pid in pids.items():
            assert "READY=1" in notify.by_pid[pid], name
            assert "Seccomp:\t2" in Path(f"/proc/{pid}/status").read_text(), f"{name} is not filtered"
        # nothing in the logs about a refused system call or socket family
        for name in names:
            log = fab.logs[name].read_text()
            assert "Operation not permitted" not in log and "Traceback" not in log, f"{name}: {log[-2000:]}"


def test_pktwayd_sandboxed(notify, tmp_path):
    with SandboxedFabric(2, prefix="pa") as fa, SandboxedFabric(2, prefix="pb") as fb:
        ula_a, ula_b = fa.up(v6=False), fb.up(v6=False)
        cfg, control = tmp_path / "pktwayd.toml", tmp_path / "pktwayd" / "rab.sock"
        cfg.write_text(f"""
[router]
name = "rab"
control = "{control}"

[[half]]
addr = 0x50
san_id = 0x100
mtu = 2048
ulp = "{fa.ulp_path(2)}"
[[half.node]]
addr = 0x40
ula = "{ula_a[0]}"

[[half]]
addr = 0x51
san_id = 0x101
mtu = 1024
ulp = "{fb.ulp_path(2)}"
[[half.node]]
addr = 0x60
ula = "{ula_b[0]}"
""")
        log = tmp_path / "pktwayd.log"
        proc = subprocess.Popen(sandboxed([str(BIN / "pktwayd"), "-c", str(cfg)]), stdout=open(log, "wb"),
                                stderr=subprocess.STDOUT)
        try:
            poll(lambda: control.exists(), 10, what="pktwayd control socket")
            poll(lambda: all(h["ulp_connected"] for h in request(str(control), {"cmd": "routes"})["halves"]), 10,
                 what="both halves up")
            with Node(fa.ulp_path(1), 0x40, parse_ula(ula_a[1])) as a, Node(fb.ulp_path(1), 0x60,
                                                                              parse_ula(ula_b[1])) as b:
                a.send(0x60, b"through a sandboxed router")
                assert b.recv().data.rstrip(b"\0") == b"through a sandboxed router"
            assert mode(control) == 0o660
            assert mode(control.parent) == 0o700  # made by pktwayd under UMask=0077 (systemd's is 0750)
            poll(lambda: notify.pings(proc.pid) >= 3, 10, what="pktwayd watchdog pings")
            assert "READY=1" in notify.by_pid[proc.pid]
            assert "Seccomp:\t2" in Path(f"/proc/{proc.pid}/status").read_text()
            assert proc.poll() is None
        finally:
            proc.kill()
            proc.wait()
        assert "Operation not permitted" not in log.read_text() and "Traceback" not in log.read_text(), \
            log.read_text()[-2000:]


def test_ib_sm_switches_ipoibd_sandboxed(notify):
    from tests.netns.test_ipoib_processes import IbFabric

    ibf = IbFabric(SandboxedFabric)
    try:
        ibf.up()  # ipoibd: TAPs, rtnetlink MTU, /proc/net/igmp; ib-sm: state file; switches: UDP only
        r = ibf.ping(1, "192.0.2.3", "-c", "2", "-i", "0.2", "-W", "5")
        assert r.returncode == 0, r.stdout + r.stderr
        assert ibf.ibctl(1, "path", "192.0.2.3")["dest_lid"] == ibf.status(3)["lid"]
        names = ["sm", "swa", "swb", "ipoibd1", "ipoibd2", "ipoibd3"]
        pids = {name: ibf.fab.procs[name].pid for name in names}
        poll(lambda: all(notify.pings(pid) >= 3 for pid in pids.values()), 10, what="three pings from each daemon")
        for name, pid in pids.items():
            assert "READY=1" in notify.by_pid[pid], name
            assert "Seccomp:\t2" in Path(f"/proc/{pid}/status").read_text(), f"{name} is not filtered"
        for sock in (ibf.tmp / "sm" / "control.sock", ibf.tmp / "swa" / "control.sock", ibf.tmp / "h1" / "ib0.ctl"):
            assert mode(sock) == 0o660, f"{sock}: {oct(mode(sock))}"
        for name in names:
            log = ibf.fab.logs[name].read_text()
            assert "Operation not permitted" not in log and "Traceback" not in log, f"{name}: {log[-2000:]}"
    finally:
        ibf.fab.close()


SNET_NODE = """[node]
id = {me:#x}
name = "{name}"
control = "{ctl}"
[fabric.x]
local = "127.0.0.1:{port}"
router = "127.0.0.1:7700"
[fabric.y]
local = "127.0.0.1:{port1}"
router = "127.0.0.1:7701"
[[peer]]
id = {peer:#x}
name = "peer"
doorbell = 0x300000
[[window]]
page = 0x100
[[window]]
page = 0x300
access = "w"
interrupt = true
"""


def test_servernet_sandboxed(notify, tmp_path):
    """snet-router (X, Y) and two snetd under their units' sandbox: traffic, READY=1, watchdog, 0660."""
    with SandboxedFabric(1, prefix="ss") as fa:
        for i, f in enumerate("xy"):
            fa.spawn(f"router-{f}", 1, str(BIN / "snet-router"), "--fabric", f, "--listen", f"127.0.0.1:{7700 + i}",
                     "--port", f"0=127.0.0.1:{7710 + i}", "--port", f"1=127.0.0.1:{7720 + i}", "--route", "0x04001=0",
                     "--route", "0x08001=1", "--control", str(tmp_path / "servernet" / f"{f}.sock"))
        for name, me, peer, port in (("a", 0x04001, 0x08001, 7710), ("b", 0x08001, 0x04001, 7720)):
            cfg = tmp_path / f"{name}.toml"
            cfg.write_text(SNET_NODE.format(me=me, peer=peer, name=name, ctl=tmp_path / "snetd" / f"{name}.sock",
                                            port=port, port1=port + 1))
            fa.spawn(f"snetd-{name}", 1, str(BIN / "snetd"), "-c", str(cfg))
        socks = [tmp_path / "snetd" / "a.sock", tmp_path / "snetd" / "b.sock", tmp_path / "servernet" / "x.sock",
                 tmp_path / "servernet" / "y.sock"]
        poll(lambda: all(p.exists() for p in socks), 10, what="the control sockets")
        r = request(str(socks[0]), {"cmd": "block", "peer": "peer", "address": 0x100000, "length": 4096, "seed": 3})
        assert r["ok"] and set(r["packets"]) == {"X", "Y"}, r
        assert request(str(socks[1]), {"cmd": "interrupts"})["blocks"][0]["intact"]
        names = ["router-x", "router-y", "snetd-a", "snetd-b"]
        pids = {n: fa.procs[n].pid for n in names}
        poll(lambda: all(notify.pings(pid) >= 3 for pid in pids.values()), 10, what="three pings from each daemon")
        for name, pid in pids.items():
            assert "READY=1" in notify.by_pid[pid], name
            assert "Seccomp:\t2" in Path(f"/proc/{pid}/status").read_text(), f"{name} is not filtered"
        assert all(mode(p) == 0o660 for p in socks)
        for name in names:
            log = fa.logs[name].read_text()
            assert "Operation not permitted" not in log and "Traceback" not in log, f"{name}: {log[-2000:]}"
