"""sd_notify without a dependency: one datagram to $NOTIFY_SOCKET; the service watchdog."""

from __future__ import annotations

import os
import socket

import trio


def sd_notify(state: str) -> bool:
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.connect(addr)
            s.sendall(state.encode())
        return True
    except OSError:
        return False


class StatusLine:
    """systemd's STATUS= (the line `systemctl status` shows), sent only when it changes."""

    def __init__(self) -> None:
        self.text: str | None = None

    def update(self, text: str) -> None:
        if text != self.text:
            self.text = text
            sd_notify(f"STATUS={text}")


def watchdog_interval() -> float | None:
    """Seconds between WATCHDOG=1 pings (half of $WATCHDOG_USEC), or None when systemd
    does not watch this process: no or a bad $WATCHDOG_USEC, or $WATCHDOG_PID naming
    another process (the variables leaked to a child)."""
    try:
        usec = int(os.environ.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    pid = os.environ.get("WATCHDOG_PID")
    if usec <= 0 or (pid and pid.strip() != str(os.getpid())):
        return None
    return usec / 2e6


async def watchdog() -> None:
    """Ping systemd's watchdog from the daemon's trio loop until cancelled.

    Started beside the daemon in its top nursery: when the loop wedges (a blocking
    call, a busy task that never yields) the pings stop and systemd restarts the
    service (WatchdogSec= with Restart=on-failure)."""
    interval = watchdog_interval()
    if interval is None:
        return
    while True:
        sd_notify("WATCHDOG=1")
        await trio.sleep(interval)
