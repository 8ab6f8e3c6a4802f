"""gsnctl admin: --hops validated (0..255, one line), --route P1,P2,... carried through
gsnd's control socket into the Admin ROUTE field and followed by the switch."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from daemons import gsnctl
from daemons.constants import AdminCmd, ElementType
from daemons.runtime.control import request

BIN = Path(sys.executable).parent


@pytest.fixture
def sent(monkeypatch):
    reqs = []

    def fake(path, req, timeout=5.0):
        reqs.append(req)
        return {"ok": True, "responses": [{"command": "I_AM", "status": 0, "args": "01"}]}

    monkeypatch.setattr(gsnctl, "request", fake)
    return reqs


@pytest.mark.parametrize("argv,expect", [
    ([], {"hops": 1}),
    (["--hops", "0"], {"hops": 0}),
    (["--hops", "255"], {"hops": 255}),
    (["--route", "3"], {"hops": 2, "route": [3]}),
    (["--route", "3,1,0x10"], {"hops": 4, "route": [3, 1, 16]}),
    (["--route", "3", "--hops", "5"], {"hops": 5, "route": [3]}),
])
def test_admin_request_sent(sent, argv, expect):
    r = CliRunner().invoke(gsnctl.main, ["-s", "/x.ctl", "admin", "WHAT_ARE_YOU", *argv])
    assert r.exit_code == 0, r.output
    assert sent == [{"cmd": "admin", "command": "WHAT_ARE_YOU", "args": "", **expect}]
    assert r.output == "I_AM status=0 args=01\n"


def test_admin_args_hex_with_colons(sent):
    r = CliRunner().invoke(gsnctl.main, ["-s", "/x.ctl", "admin", "GET_PORT", "02:47:53:01:03:00"])
    assert r.exit_code == 0 and sent[0]["args"] == "024753010300"


@pytest.mark.parametrize("argv,needle", [
    (["--hops", "-1"], "--hops -1: outside 0..255"),
    (["--hops", "256"], "--hops 256: outside 0..255"),
    (["--hops", "two"], "--hops 'two': expected a whole number 0..255"),
    (["--route", "3,x"], "--route '3,x': expected port numbers"),
    (["--route", "255"], "--route: port 255 is outside 0..254"),
    (["--route", "1,2,3,4,5,6,7,8"], "--route: at most 7 ports"),
    (["--route", "3", "--hops", "1"], "--route has 1 ports but --hops 1 passes 0 switches"),
    (["zz"], "ARGS 'zz': expected up to 16 bytes of hex"),
])
def test_admin_bad_options_are_one_line(sent, argv, needle):
    r = CliRunner().invoke(gsnctl.main, ["-s", "/x.ctl", "admin", "WHAT_ARE_YOU", *argv])
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and needle in r.stderr, r.stderr
    assert sent == []


# --- gsnd's handler -------------------------------------------------------------------------
def _free_udp() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_gsnd_answers_hop_0_itself_and_checks_the_route(autojump_clock, tmp_path):
    from daemons.gsnd import config as gconfig
    from daemons.gsnd.daemon import CONTROL_SCHEMA, Gsnd
    from daemons.runtime.control import handle
    from collections import Counter

    cfg = gconfig.load(None, dict(interface="gsn0", local=f"127.0.0.1:{_free_udp()}", peer="127.0.0.1:9",
                                  runtime_dir=str(tmp_path), no_tap=True))
    d = Gsnd(cfg)
    counters = Counter()
    try:
        # used to be "internal error: ubyte format requires 0 <= number <= 255"
        r = await handle({"cmd": "admin", "command": "what_are_you", "hops": 0}, d._control, CONTROL_SCHEMA, counters)
        assert r["ok"] and r["responses"][0]["command"] == "I_AM"
        assert int(r["responses"][0]["args"][:2], 16) == ElementType.ENDPOINT
        r = await handle({"cmd": "admin", "command": "ARE_YOU_THERE", "hops": 0}, d._control, CONTROL_SCHEMA,
                         counters)
        assert r["responses"][0]["command"] == AdminCmd.I_AM_HERE.name
        r = await handle({"cmd": "admin", "command": "WHAT_ARE_YOU", "hops": 1, "route": [3]}, d._control,
                         CONTROL_SCHEMA, counters)
        assert r == {"ok": False, "error": "admin: a route of 1 ports needs at least 2 hops (one per switch the "
                                           "request passes)"}
        r = await handle({"cmd": "admin", "command": "WHAT_ARE_YOU", "hops": 256}, d._control, CONTROL_SCHEMA,
                         counters)
        assert r == {"ok": False, "error": "bad request: admin.hops: 256 is outside 0..255"}
        assert counters["internal_error"] == 0
    finally:
        d.transport.close()


# --- through real processes: gsnctl -> gsnd -> gsn-switch -> the endpoint on port 2 ----------
def _wait(fn, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            v = fn()
            if v:
                return v
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError("timed out")


class Fabric:
    """A real gsn-switch (id 7) with two ports and a real gsnd (--no-tap) on each."""

    def __init__(self, tmp_path, port2_extra: str = "") -> None:
        self.tmp = tmp_path
        sw1, sw2, ep1, ep2 = (_free_udp() for _ in range(4))
        conf = tmp_path / "sw.toml"
        conf.write_text(f'[switch]\nid = 7\nruntime_dir = "{tmp_path}/sw"\nlog_level = "error"\n'
                        f'[[port]]\nnumber = 1\nlocal = "127.0.0.1:{sw1}"\npeer = "127.0.0.1:{ep1}"\n'
                        f'[[port]]\nnumber = 2\nlocal = "127.0.0.1:{sw2}"\npeer = "127.0.0.1:{ep2}"\n{port2_extra}')
        self.procs = [subprocess.Popen([str(BIN / "gsn-switch"), "-c", str(conf)], stderr=subprocess.PIPE)]
        for i, (local, peer) in enumerate([(ep1, sw1), (ep2, sw2)]):
            self.procs.append(subprocess.Popen(
                [str(BIN / "gsnd"), "--no-tap", "-i", f"gsn{i}", "--local", f"127.0.0.1:{local}", "--peer",
                 f"127.0.0.1:{peer}", "--cable-id", str(i + 1), "--runtime-dir", str(tmp_path), "--log-level",
                 "error"], stderr=subprocess.PIPE))

    def __enter__(self) -> Fabric:
        try:
            for i in (0, 1):
                _wait(lambda: self.ula(i))
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait(10)

    def ula(self, i: int) -> str:
        return request(f"{self.tmp}/gsn{i}.ctl", {"cmd": "status"})["status"]["ula"]

    def gsnctl_admin(self, i: int, *argv):
        return subprocess.run([str(BIN / "gsnctl"), "-s", f"{self.tmp}/gsn{i}.ctl", "admin", *argv],
                              capture_output=True, text=True, timeout=20)

    def switch(self) -> dict:
        return request(f"{self.tmp}/sw/control.sock", {"cmd": "status"})["status"]


def test_gsnctl_admin_route_reaches_the_endpoint_behind_the_switch(tmp_path):
    with Fabric(tmp_path) as fab:
        r = fab.gsnctl_admin(0, "WHAT_ARE_YOU", "--route", "2")
        assert r.returncode == 0, r.stderr
        ula2 = fab.ula(1).replace(":", "")
        assert r.stdout == f"I_AM status=0 args=0101{ula2}{'0' * 16}\n"  # an endpoint, 1 port, its ULA
        r = fab.gsnctl_admin(0, "WHAT_ARE_YOU")  # hop 1: the switch
        assert r.stdout.startswith("I_AM status=0 args=0202")
        r = fab.gsnctl_admin(0, "WHAT_ARE_YOU", "--hops", "0")  # this host's own adapter
        assert r.returncode == 0 and r.stdout.startswith("I_AM status=0 args=0101"), r.stderr
        r = fab.gsnctl_admin(0, "WHAT_ARE_YOU", "--route", "9")  # no port 9: the switch says so
        assert r.stdout == "INVALID_ADMIN status=2 args=04" + "0" * 30 + "\n"


def _table(status: dict) -> dict:
    return {e["ula"]: e["port"] for e in status["table"]}


def test_gsnctl_admin_change_route_from_an_ordinary_host_is_refused(tmp_path):
    """Issue 12: host 2 used to move host 1's ULA to its own port with CHANGE_ROUTE."""
    with Fabric(tmp_path) as fab:
        ula1 = fab.ula(0)
        r = fab.gsnctl_admin(1, "CHANGE_ROUTE", f"{ula1}:00:02")
        assert r.stdout == "INVALID_ADMIN status=1 args=09" + "0" * 30 + "\n", r.stderr
        r = fab.gsnctl_admin(1, "CHANGE_ROUTE", f"{ula1}:00:02", "--route", "1")  # nor through the switch
        assert r.stdout == "INVALID_ADMIN status=1 args=09" + "0" * 30 + "\n", r.stderr
        st = fab.switch()
        assert _table(st)[ula1] == 1
        assert st["ports"]["2"]["counters"]["admin_refused_not_management"] == 2
        assert st["ports"]["2"]["management"] is False
        r = fab.gsnctl_admin(1, "GET_PORT", ula1)  # queries still answered
        assert r.stdout.startswith(f"PORT_ID status=0 args={ula1.replace(':', '')}0001")


def test_gsnctl_admin_change_route_from_the_management_port_is_obeyed(tmp_path):
    alias = "02:aa:bb:cc:dd:ee"
    with Fabric(tmp_path, port2_extra="management = true\n") as fab:
        r = fab.gsnctl_admin(1, "CHANGE_ROUTE", f"{alias}:00:01")
        assert r.stdout == f"ROUTE_STATUS status=0 args={alias.replace(':', '')}0001" + "0" * 16 + "\n", r.stderr
        r = fab.gsnctl_admin(0, "CHANGE_ROUTE", f"{alias}:00:02")  # port 1 is still an ordinary host's
        assert r.stdout.startswith("INVALID_ADMIN status=1 args=09")
        st = fab.switch()
        assert _table(st)[alias] == 1 and st["ports"]["2"]["management"] is True


# --- who may send Admin (issue 12, item 4) ----------------------------------------------------
async def test_admin_needs_root_or_gsnds_user_status_and_ulas_stay_open():
    """A member of the socket's group (uid 65534 here) may ask for status and ULAs but
    not send Admin requests (it could reassign ULAs, redirect the switch); root may."""
    from functools import partial

    import trio

    from daemons.gsnd import config as gconfig
    from daemons.gsnd.daemon import CONTROL_SCHEMA, Gsnd
    from daemons.runtime.control import serve_control
    from tests.asuser import as_user, shared_dir, to_group

    with shared_dir() as d:
        cfg = gconfig.load(None, dict(interface="gsn0", local=f"127.0.0.1:{_free_udp()}", peer="127.0.0.1:9",
                                      runtime_dir=str(d), no_tap=True))
        g = Gsnd(cfg)
        ctl = str(d / "gsn0.ctl")
        admin = {"cmd": "admin", "command": "WHAT_ARE_YOU", "hops": 0}
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(partial(serve_control, ctl, g._control, CONTROL_SCHEMA,
                                            counters=g.control_counters))
                to_group(ctl)

                def ask(req):
                    return trio.to_thread.run_sync(lambda: as_user(lambda: request(ctl, req)))

                r = await ask(admin)
                assert r == {"ok": False, "error": "admin: uid 65534 may not send Admin requests (root or gsnd's "
                                                   "own user only)"}
                assert g.control_counters["refused_admin_unprivileged"] == 1
                assert (await ask({"cmd": "status"}))["ok"]
                assert (await ask({"cmd": "ulas"}))["error"].startswith("no answer to LIST_ULAS")  # no link here
                r = await trio.to_thread.run_sync(lambda: request(ctl, admin))  # root
                assert r["ok"] and r["responses"][0]["command"] == "I_AM"
                assert g.control_counters["refused_admin_unprivileged"] == 1
                nursery.cancel_scope.cancel()
        finally:
            g.transport.close()
