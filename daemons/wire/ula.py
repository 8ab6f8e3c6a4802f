"""ULA text form: ``xx:xx:xx:xx:xx:xx`` (lower or upper case hex)."""

from __future__ import annotations

from ..constants import ULA_ASSIGN_PREFIX


def parse_ula(text: str) -> bytes:
    parts = text.strip().split(":")
    if len(parts) != 6 or not all(len(p) == 2 for p in parts):
        raise ValueError(f"{text!r} is not a ULA (xx:xx:xx:xx:xx:xx)")
    try:
        return bytes(int(p, 16) for p in parts)
    except ValueError:
        raise ValueError(f"{text!r} is not a ULA (xx:xx:xx:xx:xx:xx)") from None


def format_ula(ula: bytes) -> str:
    return ":".join(f"{b:02x}" for b in ula)


def assigned_ula(switch_id: int, port: int) -> bytes:
    """Switch-assigned ULA 02:47:53:<switch-id>:<port>:00, stable across restarts."""
    return ULA_ASSIGN_PREFIX + bytes((switch_id & 0xFF, port & 0xFF, 0))
