"""Logging: tracebacks in JSON logs; repeated warnings/errors rate-limited and counted."""

from __future__ import annotations

import io
import json

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
