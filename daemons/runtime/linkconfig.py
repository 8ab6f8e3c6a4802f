"""The optional [link] table shared by gsnd and gsn-switch configs."""

from __future__ import annotations

from .. import constants as C
from ..link.link import Timers
from .config import ConfigError, Section, in_range


def parse_link(source: str, data: dict) -> tuple[Timers, tuple[int, ...]]:
    sec = Section(source, "link", data)
    ms = lambda key, default, lo, hi: sec.get(key, float, default * 1000, check=in_range(lo, hi)) / 1000  # noqa: E731
    timers = Timers(
        ack_delay=ms("ack_delay_ms", C.ACK_DELAY_S, 0.01, 1000),
        rtx_timeout=ms("rtx_timeout_ms", C.RTX_TIMEOUT_S, 0.1, 60000),
        rtx_limit=sec.get("rtx_limit", int, C.RTX_LIMIT, check=in_range(1, 1000)),
        rtx_timeout_max=ms("rtx_timeout_max_ms", C.RTX_TIMEOUT_MAX_S, 0.1, 600000),
        rtx_timeout_min=ms("rtx_timeout_min_ms", C.RTX_TIMEOUT_MIN_S, 0.1, 60000),
        reset_interval=ms("reset_interval_ms", C.RESET_INTERVAL_S, 1, 60000),
        keepalive=ms("keepalive_ms", C.KEEPALIVE_S, 1, 60000),
        dead_interval=ms("dead_interval_ms", C.DEAD_INTERVAL_S, 10, 600000),
    )
    buffers = sec.get("buffers", list, list(C.VC_BUFFER_MPS))
    if len(buffers) != C.NUM_VCS or not all(isinstance(b, int) and 1 <= b <= 1 << 20 for b in buffers):
        raise ConfigError(f"{source}: link.buffers: expected 4 integers 1..1048576 (micropackets per VC)")
    sec.finish()
    if timers.rtx_timeout_min > timers.rtx_timeout_max:
        raise ConfigError(f"{source}: link.rtx_timeout_min_ms: must not exceed rtx_timeout_max_ms")
    if timers.dead_interval <= timers.keepalive:
        raise ConfigError(f"{source}: link.dead_interval_ms: must exceed keepalive_ms")
    return timers, tuple(buffers)
