"""Reload: SIGHUP and the control socket's "reload" re-read the log level of every logger
(none is cached), log one line acknowledging it, and tell systemd RELOADING/READY; a bad
configuration is refused and changes nothing.  Control sockets are unlinked on exit."""

from __future__ import annotations

import io
import json
import os
import socket
from collections import Counter

import pytest
import structlog
import trio

from daemons.runtime import log as logsetup
from daemons.runtime import reload as reloading
from daemons.runtime.config import ConfigError
from daemons.runtime.control import bind_unix, request, serve_control, unlink_unix
from daemons.runtime.schema import Schema
from tests.asuser import NOBODY, as_user, shared_dir, to_group


@pytest.fixture(autouse=True)
def _restore():
    yield
    structlog.reset_defaults()
    reloading.install(None)


@pytest.fixture
def notify(tmp_path, monkeypatch):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify"))
    sock.settimeout(0)
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify"))
    yield lambda: _drain(sock)
    sock.close()


def _drain(sock) -> list[str]:
    out = []
    while True:
        try:
            out.append(sock.recv(4096).decode())
        except BlockingIOError:
            return out


def _events(buf: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in buf.getvalue().splitlines()]


def test_a_module_logger_follows_a_new_level():
    """The logger a module took at import (before setup) obeys every later setup()."""
    log = structlog.get_logger("early")
    buf = io.StringIO()
    logsetup.setup("info", json=True, file=buf)
    log.info("one")
    logsetup.setup("warning", json=True, file=buf)
    log.info("two")
    log.warning("three")
    logsetup.setup("debug", json=True, file=buf)
    log.debug("four")
    assert [e["event"] for e in _events(buf)] == ["one", "three", "four"]


@pytest.mark.parametrize("old,new", [("info", "debug"), ("info", "warning"), ("warning", "info"), ("debug", "error")])
def test_reload_is_acknowledged_at_either_level(old, new, notify):
    buf = io.StringIO()
    logsetup.setup(old, json=True, file=buf)

    def reloader():
        logsetup.setup(new, json=True, file=buf)
        return {"log_level": new, "source": "test.toml"}

    reloading.install(reloader)
    assert reloading.reload_now() == {"ok": True, "reloaded": True, "log_level": new, "source": "test.toml"}
    (ack,) = _events(buf)
    assert ack["event"] == "reload.done" and ack["log_level"] == new and ack["source"] == "test.toml"
    assert notify() == ["RELOADING=1", "READY=1"]
    structlog.get_logger("x").info("after")
    assert ("after" in buf.getvalue()) == (new in ("debug", "info"))


def test_bad_configuration_changes_nothing(notify):
    buf = io.StringIO()
    logsetup.setup("info", json=True, file=buf)

    def reloader():
        raise ConfigError("gsnd.toml:3: expected a value")

    reloading.install(reloader)
    assert reloading.reload_now() == {"ok": False, "error": "reload failed: gsnd.toml:3: expected a value"}
    (line,) = _events(buf)
    assert line["event"] == "reload.failed" and line["level"] == "error"
    assert logsetup.current_level() == 20 and notify() == ["RELOADING=1", "READY=1"]


def test_nothing_to_reload_is_said():
    buf = io.StringIO()
    logsetup.setup("info", json=True, file=buf)
    assert reloading.reload_now() == {"ok": True, "reloaded": False}
    assert _events(buf)[0]["event"] == "reload.ignored"


async def test_control_socket_reload_and_unlink_on_exit():
    """Every control socket answers "reload" (root or the daemon's user only, whatever the
    daemon's schema), and the socket file is gone when the server stops."""
    buf = io.StringIO()
    logsetup.setup("info", json=True, file=buf)
    reloading.install(lambda: {"log_level": "info", "source": "x"})
    with shared_dir() as d:
        path = str(d / "ctl.sock")

        async def handler(req):
            return {"ok": True}

        counters = Counter()
        async with trio.open_nursery() as nursery:
            await nursery.start(lambda task_status: serve_control(path, handler, Schema({"status": {}}),
                                                                  counters=counters, task_status=task_status))
            to_group(path)
            reply = await trio.to_thread.run_sync(request, path, {"cmd": "reload"})
            assert reply == {"ok": True, "reloaded": True, "log_level": "info", "source": "x"}
            other = await trio.to_thread.run_sync(lambda: as_user(lambda: request(path, {"cmd": "reload"})))
            assert other == {"ok": False, "error": f"reload: uid {NOBODY} may not reload the daemon "
                                                   f"(root or its own user only)"}
            bad = await trio.to_thread.run_sync(request, path, {"cmd": "reload", "x": 1})
            assert bad["ok"] is False and bad["error"].startswith("bad request")
            assert os.path.exists(path)
            nursery.cancel_scope.cancel()
        assert not os.path.exists(path)
        assert counters["reloads"] == 1 and counters["refused_reload_unprivileged"] == 1


def test_unlink_spares_a_path_taken_over(tmp_path):
    """A socket path rebound by a newer process is not removed by the old one's exit."""
    path = str(tmp_path / "s.sock")
    old = bind_unix(path)
    os.unlink(path)
    new = bind_unix(path)
    unlink_unix(path, old)
    assert os.path.exists(path)
    unlink_unix(path, new)
    assert not os.path.exists(path)
