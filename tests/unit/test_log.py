"""Logging: tracebacks in JSON logs; repeated warnings/errors rate-limited and counted."""

from __future__ import annotations

import io
import json
import os

import pytest
import structlog

from daemons.runtime import log as logsetup
from daemons.runtime.log import RateLimiter


@pytest.fixture(autouse=True)
def _restore_structlog():
    yield
    structlog.reset_defaults()


def _lines(buf: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in buf.getvalue().splitlines()]


def test_json_log_carries_the_traceback():
    buf = io.StringIO()
    logsetup.setup("info", json=True, file=buf)
    log = structlog.get_logger("t1")
    try:
        {}["missing"]
    except KeyError:
        log.exception("control.handler_failed", cmd="status")
    (line,) = _lines(buf)
    assert line["event"] == "control.handler_failed" and line["level"] == "error"
    assert "exc_info" not in line
    assert line["exception"].startswith("Traceback (most recent call last):")
    assert "KeyError: 'missing'" in line["exception"] and "test_log.py" in line["exception"]


def test_repeated_errors_are_rate_limited_with_a_count():
    now = [100.0]
    buf = io.StringIO()
    logsetup.setup("info", json=True, file=buf, rate_limiter=RateLimiter(burst=3, interval=10.0,
                                                                         clock=lambda: now[0]))
    log = structlog.get_logger("t2")
    for _ in range(50):
        log.error("kernel.failed", op="replace")
    log.warning("other.event")
    for _ in range(20):
        log.info("chatty")  # info is never limited
    lines = _lines(buf)
    assert [line["event"] for line in lines].count("kernel.failed") == 3
    assert [line["event"] for line in lines].count("chatty") == 20
    assert [line["event"] for line in lines].count("other.event") == 1
    now[0] += 10.0
    log.error("kernel.failed", op="replace")
    last = _lines(buf)[-1]
    assert last["event"] == "kernel.failed" and last["suppressed"] == 47


def test_rate_limiter_remembers_a_bounded_number_of_events():
    rl = RateLimiter(burst=1, interval=10.0, clock=lambda: 0.0, max_keys=8)
    for i in range(100):
        rl(None, "error", {"event": f"e{i}", "level": "error"})
    assert len(rl.windows) == 8


def test_drop_counters_are_limited_per_counter():
    rl = RateLimiter(burst=1, interval=10.0, clock=lambda: 0.0)
    for name in ("a.drop_x", "b.drop_y"):
        assert rl(None, "warning", {"event": "drop", "counter": name, "level": "warning"})
    try:
        rl(None, "warning", {"event": "drop", "counter": "a.drop_x", "level": "warning"})
    except structlog.DropEvent:
        pass
    else:
        raise AssertionError("not limited")
    assert rl.suppressed_total == 1


def test_switch_security_counters_are_logged_as_drops():
    """Issue 12: a refused Admin and a response from the wrong port are drops too."""
    logged = []

    class Log:
        def warning(self, event, **kw):
            logged.append(kw["counter"])

    cl = logsetup.CounterLog(Log())
    cl.update("port2", {"admin_refused_not_management": 1, "admin_response_wrong_port": 1,
                        "drop_spoofed_source": 1, "rx_admin": 3}, 0.0)
    assert sorted(logged) == ["port2.admin_refused_not_management", "port2.admin_response_wrong_port",
                              "port2.drop_spoofed_source"]


def _journal_stream(monkeypatch, f) -> None:
    st = os.fstat(f.fileno())
    monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")


def test_journal_lines_carry_their_priority(tmp_path, monkeypatch):
    """stderr is the journal ($JOURNAL_STREAM names it): every line starts with <N> (sd-daemon(3)),
    so journald files warnings at priority 4 and `journalctl -p warning` shows them."""
    with open(tmp_path / "journal", "w+") as f:
        _journal_stream(monkeypatch, f)
        assert logsetup.stderr_is_journal(f)
        logsetup.setup("debug", file=f)
        log = structlog.get_logger("j")
        log.debug("d")
        log.info("i")
        log.warning("w")
        log.error("e")
        log.critical("c")
        f.seek(0)
        lines = f.read().splitlines()
    assert [line[:3] for line in lines] == ["<7>", "<6>", "<4>", "<3>", "<2>"]
    assert [json.loads(line[3:])["event"] for line in lines] == ["d", "i", "w", "e", "c"]


def test_not_the_journal_when_stderr_was_redirected(tmp_path, monkeypatch):
    """$JOURNAL_STREAM inherited by a process whose stderr is another file: no prefix."""
    with open(tmp_path / "journal", "w") as journal, open(tmp_path / "other", "w+") as other:
        _journal_stream(monkeypatch, journal)
        assert not logsetup.stderr_is_journal(other)
        logsetup.setup("info", file=other)
        structlog.get_logger("j").warning("w")
        other.seek(0)
        assert json.loads(other.read())["event"] == "w"


def test_terminal_output_unchanged(monkeypatch):
    """On a TTY: the console renderer, no <N> prefix, even with $JOURNAL_STREAM set (e.g. an
    operator's shell started from a unit)."""
    import pty

    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as tty:
        monkeypatch.setenv("JOURNAL_STREAM", "1:1")
        logsetup.setup("info", file=tty)
        structlog.get_logger("t").warning("link.down", interface="gsn0")
        tty.flush()
        out = os.read(master, 4096).decode()
    os.close(master)
    assert not out.startswith("<") and "[warning  ]" in out and "link.down" in out and "interface=gsn0" in out
