"""CPU time as the benches count it: one process's (``/proc/PID/stat``) and the whole
machine's (``/proc/stat``), in seconds.  Divided by what a run moved, these are its cost
per unit, which a loaded machine distorts far less than the rates."""

from __future__ import annotations

import os

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(*pids: int) -> float:
    """user + system CPU seconds the processes ``pids`` have used so far (a process
    that is gone counts 0.0)."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime
    return total


def machine_busy() -> float:
    """CPU seconds every core has spent busy so far: user, nice, system, irq and
    softirq, without idle, iowait and steal.  Over a run it is the whole path's cost,
    the anchors' programs and the kernel's protocol work included, which the
    per-process figures leave out; on cores that are all busy, rates follow it."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return (sum(v) - v[3] - v[4] - v[7]) / _TICK
