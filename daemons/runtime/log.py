"""structlog setup (console on a TTY, JSON otherwise) and rate-limited drop logs."""

from __future__ import annotations

import logging
import sys
from collections import Counter

import structlog


def setup(level: str = "info", json: bool | None = None) -> None:
    if json is None:
        json = not sys.stderr.isatty()
    renderer = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper(), logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


class CounterLog:
    """Logs each new drop reason when it first appears, then at most once per
    ``interval`` seconds with how many more happened since."""

    def __init__(self, log, interval: float = 10.0) -> None:
        self.log = log
        self.interval = interval
        self.seen: Counter[str] = Counter()
        self.last_logged: dict[str, float] = {}

    def update(self, name: str, counters: dict, now: float) -> None:
        for key, value in counters.items():
            full = f"{name}.{key}"
            prev = self.seen[full]
            if value == prev:
                continue
            if full not in self.last_logged or now - self.last_logged[full] >= self.interval:
                if any(w in key for w in ("drop", "bad", "error", "violation", "stale", "mismatch", "discard",
                                           "invalid", "foreign", "unrouted", "stray", "down", "aborted")):
                    self.log.warning("drop", counter=full, new=value - prev, total=value)
                self.seen[full] = value
                self.last_logged[full] = now
