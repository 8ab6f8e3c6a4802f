"""Declarative request schemas for the control sockets.

Each daemon declares ONE ``Schema`` next to its control handler::

    SCHEMA = Schema({
        "status": {},
        "admin": {"command": Str(32), "hops": Int(0, 255, optional=True)},
    })

``Schema.validate(req)`` checks a decoded JSON request at the socket's edge and
raises ``SchemaError`` (one line, no traceback) for: a request that is not an
object, a missing or unknown ``cmd``, an unknown or missing field, a wrong type
(``true`` is not an integer, ``1`` is not a string), an integer or float out of
range, NaN/Infinity, a string or list too long.  What passes has exactly the
declared shape, so a handler never sees a wrong type.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Mapping

CMD_MAX_LEN = 32


class SchemaError(ValueError):
    """A request that does not fit the socket's schema (the message is one line)."""


@dataclass(frozen=True)
class Field:
    optional: bool = field(default=False, kw_only=True)
    nullable: bool = field(default=False, kw_only=True)

    def check(self, name: str, value: Any) -> None:
        if value is None:
            if not self.nullable:
                raise SchemaError(f"{name}: must not be null")
            return
        self._check(name, value)

    def _check(self, name: str, value: Any) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class Int(Field):
    lo: int = 0
    hi: int = 2**32 - 1

    def _check(self, name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SchemaError(f"{name}: expected an integer, got {_kind(value)}")
        if not self.lo <= value <= self.hi:
            raise SchemaError(f"{name}: {_short(value)} is outside {self.lo}..{self.hi}")


@dataclass(frozen=True)
class Float(Field):
    lo: float = 0.0
    hi: float = 1e9

    def _check(self, name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SchemaError(f"{name}: expected a number, got {_kind(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise SchemaError(f"{name}: must be finite")
        if not self.lo <= value <= self.hi:
            raise SchemaError(f"{name}: {_short(value)} is outside {self.lo}..{self.hi}")


@dataclass(frozen=True)
class Bool(Field):
    def _check(self, name: str, value: Any) -> None:
        if not isinstance(value, bool):
            raise SchemaError(f"{name}: expected true or false, got {_kind(value)}")


@dataclass(frozen=True)
class Str(Field):
    max_len: int = 64
    pattern: str | None = None

    def _check(self, name: str, value: Any) -> None:
        if not isinstance(value, str):
            raise SchemaError(f"{name}: expected a string, got {_kind(value)}")
        if len(value) > self.max_len:
            raise SchemaError(f"{name}: longer than {self.max_len} characters")
        if self.pattern is not None and re.fullmatch(self.pattern, value) is None:
            raise SchemaError(f"{name}: {value!r} is not of the form {self.pattern}")


@dataclass(frozen=True)
class List(Field):
    item: Field = field(default_factory=lambda: Int())
    max_len: int = 16

    def _check(self, name: str, value: Any) -> None:
        if not isinstance(value, list):
            raise SchemaError(f"{name}: expected a list, got {_kind(value)}")
        if len(value) > self.max_len:
            raise SchemaError(f"{name}: more than {self.max_len} items")
        for i, v in enumerate(value):
            self.item.check(f"{name}[{i}]", v)


class Schema:
    """op (the ``cmd`` value) -> {field name: Field}."""

    def __init__(self, ops: Mapping[str, Mapping[str, Field]]) -> None:
        for op, fields in ops.items():
            if len(op) > CMD_MAX_LEN or "cmd" in fields:
                raise ValueError(f"schema: bad op {op!r}")
        self.ops = {op: dict(fields) for op, fields in ops.items()}

    def validate(self, req: Any) -> dict:
        if not isinstance(req, dict):
            raise SchemaError(f"request must be a JSON object, got {_kind(req)}")
        cmd = req.get("cmd")
        if not isinstance(cmd, str):
            raise SchemaError(f"cmd: expected a string naming one of {self._names()}")
        fields = self.ops.get(cmd)
        if fields is None:
            raise SchemaError(f"unknown command {_short(cmd)!s}; expected one of {self._names()}")
        for name in req:
            if name != "cmd" and name not in fields:
                raise SchemaError(f"{cmd}: unknown field {_short(name)}")
        for name, spec in fields.items():
            if name not in req:
                if not spec.optional:
                    raise SchemaError(f"{cmd}: missing field {name!r}")
                continue
            spec.check(f"{cmd}.{name}", req[name])
        return req

    def _names(self) -> str:
        return ", ".join(sorted(self.ops))


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "an object"}.get(
        type(value), type(value).__name__)


def _short(value: Any, limit: int = 40) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**limit:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
