"""structlog setup (console on a TTY, JSON otherwise, with syslog priority prefixes when
stderr is the journal) and rate-limited drop logs."""

from __future__ import annotations

import logging
import os
import sys
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

import structlog
from structlog.typing import Processor

RATE_LIMIT_EVENTS = 5  # warnings/errors with the same event name per interval ...
RATE_LIMIT_INTERVAL_S = 10.0  # ... the rest are counted and reported with the next one let through
RATE_LIMIT_KEYS = 1024  # event names remembered (oldest forgotten first)
_LIMITED_LEVELS = frozenset({"warning", "error", "critical", "exception"})


class RateLimiter:
    """structlog processor: at most ``burst`` events of level warning or above with the
    same (level, event) -- and counter, for CounterLog's "drop" -- per ``interval`` seconds.  The ones beyond are dropped and
    counted; the first one let through afterwards carries ``suppressed=<count>``."""

    def __init__(self, burst: int = RATE_LIMIT_EVENTS, interval: float = RATE_LIMIT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic, max_keys: int = RATE_LIMIT_KEYS) -> None:
        self.burst = burst
        self.interval = interval
        self.clock = clock
        self.max_keys = max_keys
        self.windows: OrderedDict[tuple, list] = OrderedDict()  # key -> [window start, sent, suppressed]
        self.suppressed_total = 0

    def __call__(self, logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        level = event_dict.get("level", method_name)
        if level not in _LIMITED_LEVELS:
            return event_dict
        # CounterLog's "drop" events are already limited per counter: one key per counter
        key = (level, str(event_dict.get("event")), str(event_dict.get("counter", "")))
        now = self.clock()
        w = self.windows.get(key)
        if w is None:
            w = self.windows[key] = [now, 0, 0]
            if len(self.windows) > self.max_keys:
                self.windows.popitem(last=False)
        else:
            self.windows.move_to_end(key)
        if now - w[0] >= self.interval:
            w[0], w[1] = now, 0
        if w[1] >= self.burst:
            w[2] += 1
            self.suppressed_total += 1
            raise structlog.DropEvent
        w[1] += 1
        if w[2]:
            event_dict["suppressed"] = w[2]
            w[2] = 0
        return event_dict


# sd-daemon(3) priority prefixes, read by journald from a service's stdout/stderr
PRIORITY = {"debug": 7, "info": 6, "warning": 4, "error": 3, "exception": 3, "critical": 2}
LEVELS = ("debug", "info", "warning", "error")
_level = logging.INFO  # the level in force; setup() and set_level() change it


def stderr_is_journal(stream=None) -> bool:
    """True when ``stream`` (stderr) is the connection systemd gave to journald: $JOURNAL_STREAM
    is "DEV:INODE" of that very descriptor (a child whose stderr was redirected is not)."""
    stream = sys.stderr if stream is None else stream
    try:
        dev, ino = (int(x) for x in os.environ.get("JOURNAL_STREAM", "").split(":"))
        st = os.fstat(stream.fileno())
    except (ValueError, OSError, AttributeError):
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)


class JournalPrefix:
    """Wraps a renderer: each line starts with ``<N>``, its syslog priority, so that
    journald stores it at that priority (``journalctl -p warning`` works)."""

    def __init__(self, renderer) -> None:
        self.renderer = renderer

    def __call__(self, logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> str:
        priority = PRIORITY.get(event_dict.get("level", method_name), 6)
        return f"<{priority}>{self.renderer(logger, method_name, event_dict)}"


def setup(level: str = "info", json: bool | None = None, file=None,
          rate_limiter: RateLimiter | None = None) -> None:
    """Log to ``file`` (stderr) at ``level``.  Loggers are not cached, so calling this
    again (a reload) changes the level of every module's logger at once."""
    global _level
    file = sys.stderr if file is None else file
    journal = stderr_is_journal(file)
    if json is None:
        json = journal or not file.isatty()
    tail: list[Processor]
    if json:  # exceptions as a "exception" string holding the traceback
        tail = [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    else:  # the console renderer prints exc_info's traceback itself
        tail = [structlog.dev.ConsoleRenderer(colors=False)]
    if journal:
        tail[-1] = JournalPrefix(tail[-1])
    _level = getattr(logging, level.upper(), logging.INFO)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            rate_limiter or RateLimiter(),
            structlog.processors.TimeStamper(fmt="iso"),
            *tail,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_level),
        logger_factory=structlog.PrintLoggerFactory(file=file),
        cache_logger_on_first_use=False,
    )


def current_level() -> int:
    return _level


def set_level(level: int) -> None:
    """Change only the level (the processors stay as they are)."""
    global _level
    _level = level
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(level))


DROP_WORDS = ("drop", "bad", "error", "violation", "stale", "mismatch", "discard", "invalid", "foreign", "unrouted",
              "stray", "down", "aborted", "refused", "wrong_port", "unauthenticated", "truncated",
              "reflected", "replayed", "old_session", "too_old")


def is_drop(counter: str) -> bool:
    """Whether a counter's name says something was lost or refused (logged as a "drop",
    exported as gsn_drops_total, listed by gsnctl show)."""
    return any(w in counter for w in DROP_WORDS)


class CounterLog:
    """Logs each new drop reason when it first appears, then at most once per
    ``interval`` seconds with how many more happened since."""

    def __init__(self, log, interval: float = 10.0) -> None:
        self.log = log
        self.interval = interval
        self.seen: Counter[str] = Counter()
        self.last_logged: dict[str, float] = {}

    def update(self, name: str, counters: Mapping[str, int], now: float) -> None:
        for key, value in counters.items():
            full = f"{name}.{key}"
            prev = self.seen[full]
            if value == prev:
                continue
            if full not in self.last_logged or now - self.last_logged[full] >= self.interval:
                if is_drop(key):
                    self.log.warning("drop", counter=full, new=value - prev, total=value)
                self.seen[full] = value
                self.last_logged[full] = now
