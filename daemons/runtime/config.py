"""TOML config loading with one-line errors (file, line or key, problem) and exit 78."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path
from typing import Any, NoReturn
from collections.abc import Callable

from ..constants import EX_CONFIG


class ConfigError(Exception):
    """Bad configuration: the message is the single line an operator sees."""


def fail(exc: ConfigError) -> NoReturn:
    print(f"error: {exc}", file=sys.stderr)
    raise SystemExit(EX_CONFIG)


def load_toml(path: str | Path) -> dict:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
        where = f":{m.group(1)}" if m else ""
        problem = re.sub(r" \(at line.*", "", msg)
        raise ConfigError(f"{p}{where}: {problem}") from None


class Section:
    """Typed access to one table of a config file; every problem names file and key."""

    def __init__(self, source: str, name: str, data: Any) -> None:
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: [{name}] must be a table")
        self.source, self.name, self.data = source, name, data
        self.used: set[str] = set()

    def _where(self, key: str) -> str:
        return f"{self.source}: {self.name}.{key}"

    def get(self, key: str, kind: type, default: Any = None, *, required: bool = False,
            check: Callable[[Any], Any] | None = None) -> Any:
        self.used.add(key)
        if key not in self.data:
            if required:
                raise ConfigError(f"{self._where(key)}: missing (required)")
            return default
        value = self.data[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ConfigError(f"{self._where(key)}: expected {kind.__name__}, got {type(value).__name__} {value!r}")
        if check is not None:
            try:
                value = check(value)
            except ValueError as exc:
                raise ConfigError(f"{self._where(key)}: {exc}") from None
        return value

    def finish(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise ConfigError(f"{self._where(unknown[0])}: unknown key")


LOG_LEVELS = ("debug", "info", "warning", "error")


def one_of(*choices: str) -> Callable[[str], str]:
    """A check for ``Section.get``: the value is one of ``choices``."""

    def check(v: str) -> str:
        if v not in choices:
            raise ValueError(f"{v!r} is not one of {', '.join(choices)}")
        return v

    return check


def in_range(lo: float, hi: float) -> Callable[[Any], Any]:
    def check(v):
        if not lo <= v <= hi:
            raise ValueError(f"{v} is outside {lo}..{hi}")
        return v

    return check
