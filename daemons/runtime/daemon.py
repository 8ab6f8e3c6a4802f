"""Running a daemon: signals (TERM/INT stop, HUP reload), config errors -> exit 78."""

from __future__ import annotations

import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

import structlog
import trio

from ..constants import EX_CONFIG
from .config import ConfigError
from . import reload as reloading
from .notify import watchdog

if TYPE_CHECKING:
    from .metrics import Family

log = structlog.get_logger()
Cfg = TypeVar("Cfg")


class Daemon(Protocol):
    """What ``serve`` runs: ``run`` started in a nursery (it calls ``task_status.started()``)."""

    def run(self, *, task_status: Any = ...) -> Awaitable[None]: ...


@runtime_checkable
class Measured(Protocol):
    """A daemon with Prometheus metrics (``--metrics``)."""

    def metrics(self) -> list[Family]: ...


def raise_nofile_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (clients, cables and sockets
    all need descriptors); returns the soft limit now in force."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass  # e.g. a nr_open below the hard limit: keep what we have
    return soft


def run(main: Callable[[trio.Nursery], Awaitable[None]], reload: reloading.Reloader | None = None) -> None:
    """Run ``main(nursery)`` until SIGTERM/SIGINT; SIGHUP (or "reload" on the control
    socket) calls ``reload`` (``reload.reload_now``).  Every daemon (gsnd, gsn-switch,
    pktwayd, pktway-san, harpd, stpd) starts here, so this is where the descriptor
    limit is raised."""
    raise_nofile_limit()
    reloading.install(reload)

    async def _top() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_signals, nursery.cancel_scope)
            nursery.start_soon(watchdog)  # WATCHDOG=1 from this loop while systemd asks for it
            await main(nursery)

    async def _signals(scope: trio.CancelScope) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as sigs:
            async for sig in sigs:
                if sig == signal.SIGHUP:
                    reloading.reload_now()
                else:
                    log.info("stopping", signal=signal.Signals(sig).name)
                    scope.cancel()
                    return

    try:
        try:
            trio.run(_top)
        except BaseExceptionGroup as group:
            raise _leaf(group) from None
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(EX_CONFIG) from None
    except PermissionError as exc:
        if exc.strerror is None:  # already one line naming the cause (e.g. daemons.io.tap)
            print(f"error: {exc}", file=sys.stderr)
        else:
            print(f"error: {exc.filename or ''}: permission denied (run as root or with CAP_NET_ADMIN)",
                  file=sys.stderr)
        raise SystemExit(77) from None
    except OSError as exc:
        if exc.strerror is None:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(71) from None
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"error: {exc.strerror or exc}{where}", file=sys.stderr)
        raise SystemExit(71) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None


def _leaf(exc: BaseException) -> BaseException:
    """The first real exception inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def level_reloader(level: str) -> reloading.Reloader:
    """The reload of a daemon whose log level is given on its command line only:
    nothing to re-read, but the reload is acknowledged with the level in force."""
    return lambda: {"log_level": level, "source": "command line"}


def metrics_address(text: str | None) -> tuple[str, int] | None:
    """--metrics HOST:PORT, or None; a malformed one is a configuration error (exit 78)."""
    if text is None:
        return None
    from .metrics import parse_listen

    try:
        return parse_listen(text)
    except ValueError as exc:
        raise ConfigError(f"--metrics: {exc}") from None


async def start_metrics(nursery: trio.Nursery, listen: tuple[str, int] | None, daemon: Measured) -> None:
    """Serve ``daemon.metrics()`` at ``listen`` (nothing when None)."""
    if listen is None:
        return
    from .metrics import serve_metrics

    where = await nursery.start(lambda task_status: serve_metrics(listen, daemon.metrics, task_status=task_status))
    log.info("metrics.listening", address=f"{where[0]}:{where[1]}")


def serve(load_config: Callable[[], Cfg], label: str, make_daemon: Callable[[Cfg], Daemon], *,
          check: bool = False, metrics: str | None = None) -> None:
    """The common daemon entry point: load the configuration (one line and exit 78
    when it is bad), stop after ``--check``, set up logging, run ``make_daemon(cfg).run``
    until a signal.  A reload loads the configuration again and applies its log level
    (a bad file is refused with one line and changes nothing)."""
    from . import log as logsetup
    from .config import fail

    try:
        cfg = load_config()
        listen = metrics_address(metrics)
    except ConfigError as exc:
        fail(exc)
    if check:
        print(f"{label}: ok")
        return
    logsetup.setup(getattr(cfg, "log_level", "info"))

    def _reload() -> dict:
        level = getattr(load_config(), "log_level", "info")
        logsetup.setup(level)
        return {"log_level": level, "source": label}

    async def _main(nursery):
        d = make_daemon(cfg)
        await nursery.start(d.run)
        if listen is not None:
            if not isinstance(d, Measured):
                raise TypeError(f"{label}: --metrics for a daemon without metrics()")
            await start_metrics(nursery, listen, d)

    run(_main, _reload)
