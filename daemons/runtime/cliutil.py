"""CLI helpers shared by the daemons' and tools' command lines."""

from __future__ import annotations

import sys
from typing import TypeVar
from collections.abc import Callable

import click

T = TypeVar("T")
DISTRIBUTION = "gsn-revival"
EX_UNAVAILABLE = 69
EX_NOPERM = 77


def installed_version() -> str:
    """The installed gsn-revival version (from its metadata), or "unknown" when run
    from a tree that was never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown"


def version_option(f):
    """``--version``: print "PROG VERSION" and exit (every console script has it)."""

    def _show(ctx: click.Context, _param, value: bool) -> None:
        if value and not ctx.resilient_parsing:
            click.echo(f"{ctx.find_root().info_name} {installed_version()}")
            ctx.exit()

    return click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_show,
                        help="Show the version and exit.")(f)


def reach_daemon(prog: str, sock: str, daemon: str, fn: Callable[[], T]) -> T:
    """Run ``fn`` (which talks to ``daemon`` on ``sock``); exit 69 if it is not running,
    77 if we may not talk to it, with one line on stderr."""
    try:
        return fn()
    except (FileNotFoundError, ConnectionRefusedError):
        click.echo(f"{prog}: {sock}: {daemon} is not running", err=True)
        sys.exit(EX_UNAVAILABLE)
    except PermissionError:
        click.echo(f"{prog}: {sock}: permission denied (root or the daemon's group)", err=True)
        sys.exit(EX_NOPERM)


def metrics_option(f):
    """``--metrics HOST:PORT``: serve Prometheus metrics there (off by default)."""
    return click.option("--metrics", "metrics", metavar="HOST:PORT",
                        help="Serve Prometheus metrics at http://HOST:PORT/metrics (off by default; "
                             "bind it to a management address, e.g. 127.0.0.1:9640).")(f)
