"""Reloading a running daemon: one path for SIGHUP and the control socket's "reload".

``daemon.run`` installs the daemon's reload function here.  ``reload_now`` tells
systemd (RELOADING=1, then READY=1), runs it, and logs one line acknowledging the
reload with what was re-read (or why it failed).  The control socket answers
``{"cmd": "reload"}`` with the same result, so ``gsnctl reload`` (the units'
``ExecReload=``) waits for the reload to finish and fails when it failed.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from . import log as logsetup
from .config import ConfigError
from .notify import sd_notify

log = structlog.get_logger("reload")

Reloader = Callable[[], dict]
_reloader: Reloader | None = None


def install(fn: Reloader | None) -> None:
    """``fn`` re-reads what the daemon can change at run time and returns what it set,
    e.g. {"log_level": "debug"}; it raises ConfigError when the new configuration is bad."""
    global _reloader
    _reloader = fn


def reload_now() -> dict:
    """Reload; never raises.  Returns {"ok": True, **what was set} or {"ok": False, "error"}."""
    if _reloader is None:
        log.info("reload.ignored", reason="nothing to reload")
        return {"ok": True, "reloaded": False}
    sd_notify("RELOADING=1")
    before = logsetup.current_level()
    try:
        result = _reloader()
    except ConfigError as exc:
        log.error("reload.failed", error=str(exc))
        sd_notify("READY=1")
        return {"ok": False, "error": f"reload failed: {exc}"}
    # The line is written at the more verbose of the old and new levels, so that a
    # reload from info to warning is acknowledged too.
    after = logsetup.current_level()
    if after > before:
        logsetup.set_level(before)
        log.info("reload.done", **result)
        logsetup.set_level(after)
    else:
        log.info("reload.done", **result)
    sd_notify("READY=1")
    return {"ok": True, "reloaded": True, **result}

