"""CLI helpers shared by gsnctl, gsnarp and stp."""

from __future__ import annotations

import sys
from typing import Callable, TypeVar

import click

T = TypeVar("T")
EX_UNAVAILABLE = 69
EX_NOPERM = 77


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
