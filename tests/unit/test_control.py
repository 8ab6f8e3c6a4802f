"""The shared control socket: bounded clients, idle timeouts, schema at the edge,
descriptor exhaustion, and not stealing a live daemon's socket."""

from __future__ import annotations

import errno
import json
import os
import resource
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import trio

from daemons.runtime import control
from daemons.runtime.control import SocketInUse, bind_unix, parse_request, request, serve_control
from daemons.runtime.schema import Bool, Float, Int, List, Schema, SchemaError, Str

BIN = Path(sys.executable).parent
SCHEMA = Schema({"status": {}, "echo": {"n": Int(0, 10, optional=True)}})


async def _handler(req: dict) -> dict:
    return {"ok": True, "echo": req}


def _connect(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(path)
    return s


def _line(s: socket.socket) -> dict | None:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(4096)
        if not chunk:
            return None
        buf += chunk
    return json.loads(buf)


async def _ask(path: str, raw: bytes) -> dict | None:
    def _do():
        with _connect(path) as s:
            s.sendall(raw)
            return _line(s)
    return await trio.to_thread.run_sync(_do)


async def test_idle_clients_beyond_the_cap_are_refused_then_time_out(tmp_path):
    path = str(tmp_path / "c.sock")
    counters: Counter = Counter()
    async with trio.open_nursery() as nursery:
        await nursery.start(lambda task_status: serve_control(path, _handler, SCHEMA, counters=counters,
                                                             max_clients=4, idle_timeout=0.5,
                                                             task_status=task_status))
        idle = [_connect(path) for _ in range(10)]
        # the six beyond the cap get one error line and are closed at once
        refused = []
        for s in idle[4:]:
            reply = await trio.to_thread.run_sync(_line, s)
            refused.append(reply)
        assert all(r == {"ok": False, "error": "busy: 4 control clients already connected; try again"}
                   for r in refused)
        assert counters["refused_busy"] == 6
        # the four served ones time out and are told so
        for s in idle[:4]:
            assert (await trio.to_thread.run_sync(_line, s))["error"].startswith("timeout:")
        assert counters["timed_out"] == 4
        # and the socket answers again
        assert await _ask(path, b'{"cmd": "status"}\n') == {"ok": True, "echo": {"cmd": "status"}}
        for s in idle:
            s.close()
        nursery.cancel_scope.cancel()


async def test_requests_are_checked_at_the_edge(tmp_path):
    path = str(tmp_path / "c.sock")
    counters: Counter = Counter()
    async with trio.open_nursery() as nursery:
        await nursery.start(lambda task_status: serve_control(path, _handler, SCHEMA, counters=counters,
                                                             task_status=task_status))
        cases = {
            b'{"cmd": "echo", "n": NaN}\n': "NaN is not a number JSON allows",
            b'{"cmd": "echo", "n": Infinity}\n': "Infinity is not a number JSON allows",
            b'{"cmd": "echo", "n": true}\n': "echo.n: expected an integer, got a boolean",
            b'{"cmd": "echo", "n": 11}\n': "echo.n: 11 is outside 0..10",
            b'{"cmd": "echo", "n": ' + b"9" * 5000 + b"}\n": "bad request",
            b'{"cmd": "echo", "x": 1}\n': "echo: unknown field 'x'",
            b'{"cmd": "reboot"}\n': "unknown command 'reboot'; expected one of echo, status",
            b'[1, 2]\n': "request must be a JSON object, got a list",
            b"[" * 100000 + b"\n": "bad request",
            b"\xff\xfe\n": "bad request",
        }
        for raw, needle in cases.items():
            reply = await _ask(path, raw)
            assert reply["ok"] is False and needle in reply["error"], (raw[:40], reply)
            assert "\n" not in reply["error"]
        assert counters["bad_request"] == len(cases)
        assert counters["internal_error"] == 0
        nursery.cancel_scope.cancel()


async def test_handler_bug_is_an_internal_error_reply_not_a_crash(tmp_path):
    path = str(tmp_path / "c.sock")
    counters: Counter = Counter()

    async def broken(req):
        raise KeyError("oops")

    async with trio.open_nursery() as nursery:
        await nursery.start(lambda task_status: serve_control(path, broken, SCHEMA, counters=counters,
                                                             task_status=task_status))
        reply = await _ask(path, b'{"cmd": "status"}\n')
        assert reply == {"ok": False, "error": "internal error: KeyError: 'oops'"}
        assert counters["internal_error"] == 1
        nursery.cancel_scope.cancel()


def test_schema_types():
    s = Schema({"x": {"i": Int(0, 5), "f": Float(0, 1, optional=True), "b": Bool(optional=True),
                      "s": Str(3, optional=True, nullable=True), "l": List(Int(0, 9), max_len=2, optional=True)}})
    assert s.validate({"cmd": "x", "i": 5, "f": 1, "b": False, "s": None, "l": [9]})
    for bad, msg in [({"cmd": "x"}, "missing field 'i'"), ({"cmd": "x", "i": 1.0}, "expected an integer"),
                     ({"cmd": "x", "i": 1, "f": float("nan")}, "must be finite"),
                     ({"cmd": "x", "i": 1, "b": 1}, "expected true or false"),
                     ({"cmd": "x", "i": 1, "s": "abcd"}, "longer than 3"),
                     ({"cmd": "x", "i": 1, "l": [1, 2, 3]}, "more than 2 items"),
                     ({"cmd": "x", "i": 1, "l": [True]}, "x.l[0]: expected an integer"),
                     ({"cmd": "x", "i": 10**10000}, "an integer of"),
                     ({"cmd": 3}, "cmd: expected a string"), ("x", "must be a JSON object")]:
        with pytest.raises(SchemaError, match=msg.replace("[", r"\[").replace("]", r"\]")):
            s.validate(bad)


def test_parse_request_refuses_non_json_numbers():
    with pytest.raises(ValueError):
        parse_request(b'{"a": -Infinity}')
    assert parse_request(b'{"a": 1.5}') == {"a": 1.5}


# --- bind_unix ------------------------------------------------------------------------------
def test_bind_unix_refuses_a_live_socket_and_replaces_a_stale_one(tmp_path):
    path = str(tmp_path / "d.sock")
    live = bind_unix(path)
    live.listen(1)
    with pytest.raises(SocketInUse) as exc:
        bind_unix(path)
    assert exc.value.errno == errno.EADDRINUSE
    assert "already running" in exc.value.strerror
    live.close()  # the file stays: a crashed daemon's leftover
    assert os.path.exists(path)
    again = bind_unix(path)
    again.close()
    (tmp_path / "plain").write_text("x")
    with pytest.raises(SocketInUse, match="not a socket"):
        bind_unix(str(tmp_path / "plain"))
    assert (tmp_path / "plain").read_text() == "x"


def test_bind_unix_seqpacket_live(tmp_path):
    path = str(tmp_path / "u.sock")
    live = bind_unix(path, socket.SOCK_SEQPACKET)
    live.listen(1)
    with pytest.raises(SocketInUse):
        bind_unix(path, socket.SOCK_SEQPACKET)
    with pytest.raises(SocketInUse, match="another type"):
        bind_unix(path, socket.SOCK_STREAM)  # e.g. a control path that is also the ULP path
    live.close()


# --- real daemon processes ------------------------------------------------------------------
def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _low_nofile(n: int):
    def _set():
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
    return _set


def _start_gsnd(tmp_path: Path, nofile: int | None = None) -> subprocess.Popen:
    argv = [str(BIN / "gsnd"), "--no-tap", "--local", f"127.0.0.1:{_free_udp_port()}",
            "--peer", f"127.0.0.1:{_free_udp_port()}", "--ula", "02:00:00:00:00:01",
            "--runtime-dir", str(tmp_path), "--log-level", "error"]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_low_nofile(nofile) if nofile else None)


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"daemon exited {proc.returncode}: {proc.stderr.read()}")
        try:
            if request(str(path), {"cmd": "status"}, 2.0).get("ok"):
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{path} never answered")


@pytest.mark.parametrize("nofile,refusal", [(40, "refused_no_fds"), (100, "refused_busy")])
def test_gsnd_survives_idle_flood_with_few_descriptors(tmp_path, nofile, refusal):
    """1,024 idle clients used to end a daemon with exit 71 (EMFILE); here the limit is 40
    descriptors (out of them before the client cap) or 100 (the cap first) and 120 idle
    clients: the daemon stays up, refuses and counts, and answers once the idle ones have
    timed out."""
    proc = _start_gsnd(tmp_path, nofile=nofile)
    ctl = tmp_path / "gsn0.ctl"
    clients = []
    try:
        _wait_for(ctl, proc)
        for _ in range(120):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            try:
                s.connect(str(ctl))
            except OSError:
                s.close()
                continue
            clients.append(s)
        time.sleep(0.5)
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(control.IDLE_TIMEOUT_S + 1.0)
        assert proc.poll() is None, proc.stderr.read()
        for s in clients:
            s.close()
        # Every idle client ends up counted: refused, timed out, or (accepted late, on a
        # loaded machine, after the test hung up) closed without a request.
        outcomes = ("refused_busy", "refused_no_fds", "timed_out", "closed_without_request")
        c: dict = {}
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                reply = request(str(ctl), {"cmd": "status"}, 2.0)
            except OSError:
                reply = {}
            if reply.get("ok"):
                c = reply["status"]["control"]
                if sum(c.get(k, 0) for k in outcomes) >= len(clients):
                    break
            time.sleep(0.2)
        assert c, "gsnd never answered after the flood"
        assert c.get("timed_out", 0) >= 1
        assert c.get(refusal, 0) >= 1, c
        assert len(clients) > control.MAX_CLIENTS  # the flood went past the cap
        assert sum(c.get(k, 0) for k in outcomes) >= len(clients), (len(clients), c)
        shown = subprocess.run([str(BIN / "gsnctl"), "-s", str(ctl), "status"], capture_output=True, text=True,
                               timeout=20)
        assert "control socket:" in shown.stdout and "timed_out" in shown.stdout, shown
    finally:
        for s in clients:
            s.close()
        proc.terminate()
        proc.wait(10)


def test_second_gsnd_on_the_same_sockets_is_refused(tmp_path):
    first = _start_gsnd(tmp_path)
    try:
        _wait_for(tmp_path / "gsn0.ctl", first)
        second = _start_gsnd(tmp_path)
        out, err = second.communicate(timeout=20)
        assert second.returncode == 71
        assert err.count("\n") == 1 and "Traceback" not in err
        assert "already running" in err and str(tmp_path) in err
        assert request(str(tmp_path / "gsn0.ctl"), {"cmd": "status"})["ok"]
    finally:
        first.terminate()
        first.wait(10)


def test_second_harpd_is_refused_and_the_first_still_answers(tmp_path):
    """A second harpd used to unlink the first one's control socket and take over."""
    options = Path(__file__).resolve().parents[2] / "etc" / "harpd.options"
    argv = [str(BIN / "harpd"), "-f", str(options), "--runtime-dir", str(tmp_path), "--state-dir", str(tmp_path),
            "--gsnd-runtime", str(tmp_path / "gsnd"), "--log-level", "error"]
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(tmp_path / "control.sock", first)
        second = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        assert second.returncode == 71
        assert second.stderr == (f"error: Address already in use (a daemon is already running on it) "
                                 f"({tmp_path}/control.sock)\n")
        assert request(str(tmp_path / "control.sock"), {"cmd": "table"}) == {"ok": True, "table": []}
        status = request(str(tmp_path / "control.sock"), {"cmd": "status"})
        assert status["control"]["requests"] >= 3 and "gsn0" in status["status"]
    finally:
        first.terminate()
        first.wait(10)


def _soft_nofile(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no Max open files line")


@pytest.mark.parametrize("daemon", ["gsnd", "harpd"])
def test_daemons_raise_the_soft_descriptor_limit_to_the_hard_one(tmp_path, daemon):
    def _limits():
        resource.setrlimit(resource.RLIMIT_NOFILE, (40, 2048))

    if daemon == "gsnd":
        argv = [str(BIN / "gsnd"), "--no-tap", "--local", f"127.0.0.1:{_free_udp_port()}", "--peer",
                f"127.0.0.1:{_free_udp_port()}", "--ula", "02:00:00:00:00:01", "--runtime-dir", str(tmp_path)]
        ctl = tmp_path / "gsn0.ctl"
    else:
        argv = [str(BIN / "harpd"), "-f", str(Path(__file__).resolve().parents[2] / "etc" / "harpd.options"),
                "--runtime-dir", str(tmp_path), "--state-dir", str(tmp_path), "--gsnd-runtime", str(tmp_path)]
        ctl = tmp_path / "control.sock"
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=_limits)
    try:
        _wait_for(ctl, proc)
        assert _soft_nofile(proc.pid) == 2048
    finally:
        proc.terminate()
        proc.wait(10)
