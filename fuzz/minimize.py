"""Shrink a crashing input while it keeps crashing the same way."""

from __future__ import annotations

import time
import traceback


def signature(target, data: bytes) -> tuple | None:
    """(exception type, innermost project frame) of the crash, None when it does not crash."""
    try:
        target.one_input(data)
    except Exception as exc:  # noqa: BLE001 - anything not swallowed as a rejection is a crash
        frames = traceback.extract_tb(exc.__traceback__)
        own = [f for f in frames if "/site-packages/" not in f.filename and "/lib/python" not in f.filename]
        f = (own or frames)[-1]
        return type(exc).__name__, "/".join(f.filename.rsplit("/", 2)[-2:]), f.lineno
    return None


def minimize(target, data: bytes, budget_s: float = 30.0) -> bytes:
    want = signature(target, data)
    if want is None:
        return data
    deadline = time.monotonic() + budget_s
    best = bytes(data)
    chunk = max(1, len(best) // 2)
    while chunk >= 1 and time.monotonic() < deadline:  # cut chunks, from the end first (draws past the end are 0)
        i, shrunk = len(best) - chunk, False
        while i >= 0 and time.monotonic() < deadline:
            cand = best[:i] + best[i + chunk :]
            if signature(target, cand) == want:
                best, shrunk = cand, True
            i -= chunk
        if not shrunk:
            chunk //= 2
    for i in range(len(best)):  # simpler bytes: 0, then smaller values
        if time.monotonic() >= deadline:
            break
        for v in (0, 1, best[i] // 2):
            if v < best[i]:
                cand = best[:i] + bytes([v]) + best[i + 1 :]
                if signature(target, cand) == want:
                    best = cand
                    break
    return best
