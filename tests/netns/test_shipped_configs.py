"""The shipped etc/ files run as shipped (issue 17's defects): gsn-switch and gsnd from
etc/gsn-switch.toml and etc/gsnd.toml bring their link up, harpd (etc/harpd.options) and
stpd run on top, every daemon sends READY=1 and STATUS=, a reload (gsnctl reload, SIGHUP)
is acknowledged, and after SIGTERM no socket is left in their runtime directories.
One fresh namespace (its own loopback), so the files' fixed 127.0.0.1 ports are ours."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from daemons.gsnd import config as gconfig
from lab.netns import BIN, poll, sh
from daemons.switch import config as sconfig

ROOT = Path(__file__).resolve().parents[2]
ETC = ROOT / "etc"


def test_shipped_configs_pair_up():
    """Loaded as the daemons load them: gsnd's peer is a switch port whose peer is gsnd, same cable id."""
    g = gconfig.load(str(ETC / "gsnd.toml"), {})
    s = sconfig.load(str(ETC / "gsn-switch.toml"), {})
    (port,) = [p for p in s.ports if p.local == g.peer]
    assert port.peer == g.local and port.cable_id == g.cable_id


class Notify:
    """A datagram socket standing in for systemd's $NOTIFY_SOCKET, one per daemon."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.setblocking(False)
        self.seen: list[str] = []

    def poll(self) -> list[str]:
        while True:
            try:
                self.seen.append(self.sock.recv(4096).decode())
            except BlockingIOError:
                return self.seen

    def status(self) -> str | None:
        st = [m for m in self.poll() if m.startswith("STATUS=")]
        return st[-1].removeprefix("STATUS=") if st else None


@pytest.fixture
def ns():
    name = f"gsnship{os.getpid() % 100000}"
    tmp = Path(tempfile.mkdtemp(prefix="gsn-ship-"))
    sh("ip", "netns", "add", name)
    procs: dict[str, subprocess.Popen] = {}
    try:
        sh("ip", "-n", name, "link", "set", "lo", "up")
        yield name, tmp, procs
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        sh("ip", "netns", "del", name, check=False)
        shutil.rmtree(tmp, ignore_errors=True)


def test_shipped_configs_run(ns):
    name, tmp, procs = ns
    notify: dict[str, Notify] = {}

    def spawn(daemon: str, *argv: str) -> None:
        notify[daemon] = Notify(tmp / f"{daemon}.notify")
        env = dict(os.environ, NOTIFY_SOCKET=str(notify[daemon].path))
        procs[daemon] = subprocess.Popen(["ip", "netns", "exec", name, str(BIN / daemon), *argv], env=env,
                                         stdout=subprocess.DEVNULL, stderr=open(tmp / f"{daemon}.log", "w"))

    def log(daemon: str) -> list[dict]:
        return [json.loads(line) for line in (tmp / f"{daemon}.log").read_text().splitlines() if line.startswith("{")]

    def gsnctl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "gsnctl"), *args], capture_output=True, text=True, timeout=30)

    spawn("gsn-switch", "-c", str(ETC / "gsn-switch.toml"), "--runtime-dir", str(tmp / "sw"))
    spawn("gsnd", "-c", str(ETC / "gsnd.toml"), "--runtime-dir", str(tmp / "gsnd"))
    poll(lambda: (tmp / "gsnd" / "gsn0.ctl").exists() and (tmp / "sw" / "control.sock").exists(), 20,
         what="control sockets")
    # the switch assigns port 1's ULA: the shipped files pair up
    poll(lambda: notify["gsnd"].status() == "link up, ULA 02:47:53:01:01:00", 20, what="gsnd link up with a ULA")
    poll(lambda: notify["gsn-switch"].status() == "1 of 3 ports up, 2 ULAs", 10, what="switch STATUS")
    spawn("harpd", "-f", str(ETC / "harpd.options"), "--runtime-dir", str(tmp / "harpd"),
          "--state-dir", str(tmp / "harpd-state"), "--gsnd-runtime", str(tmp / "gsnd"))
    spawn("stpd", "--ulp", str(tmp / "gsnd" / "gsn0.ulp"), "--api", str(tmp / "stpd" / "api.sock"),
          "--harpd-socket", str(tmp / "harpd" / "control.sock"))
    poll(lambda: (notify["harpd"].status() or "").startswith("gsn0: ULA 02:47:53:01:01:00, 1 LIS"), 20,
         what="harpd STATUS")
    poll(lambda: notify["stpd"].status() == "ULP connected, ULA 02:47:53:01:01:00, 0 connections, 0 API clients",
         20, what="stpd STATUS")
    for daemon, n in notify.items():
        assert n.poll()[0] == "READY=1", daemon

    # reload through the control socket: done when gsnctl returns
    r = gsnctl("-s", str(tmp / "sw" / "control.sock"), "reload")
    assert r.returncode == 0 and r.stdout == f"reloaded: log level info (from {ETC / 'gsn-switch.toml'})\n", r.stderr
    r = gsnctl("--runtime-dir", str(tmp / "gsnd"), "-i", "gsn0", "reload")
    assert r.returncode == 0 and "reloaded: log level info" in r.stdout, r.stderr
    r = gsnctl("-s", str(tmp / "harpd" / "control.sock"), "reload")
    assert r.returncode == 0 and r.stdout == "reloaded: log level info (from command line)\n", r.stderr
    # SIGHUP by pid (the pktwayd@ and stpd units' ExecReload)
    assert gsnctl("reload", "--pid", str(procs["stpd"].pid)).returncode == 0
    for daemon in ("gsn-switch", "gsnd", "harpd", "stpd"):
        poll(lambda: any(e["event"] == "reload.done" for e in log(daemon)), 10, what=f"{daemon} reload.done")
        assert notify[daemon].poll()[-2:] == ["RELOADING=1", "READY=1"], daemon

    for daemon in ("stpd", "harpd", "gsnd", "gsn-switch"):
        procs[daemon].send_signal(signal.SIGTERM)
        assert procs[daemon].wait(10) == 0, (tmp / f"{daemon}.log").read_text()
    left = [str(p) for d in ("sw", "gsnd", "harpd", "stpd") for p in (tmp / d).iterdir()
            if p.is_socket()]
    assert left == []
