"""The control-socket schemas of ib-sm, ib-switch and ipoibd (one JSON line each way;
daemons.runtime.control serves them)."""

from __future__ import annotations

from daemons.runtime.schema import Schema, Str

SM_SCHEMA = Schema({"status": {}})
SWITCH_SCHEMA = Schema({"status": {}})
IPOIB_SCHEMA = Schema({
    "status": {},
    "neighbours": {},
    "groups": {},
    "path": {"ip": Str(45, pattern=r"[0-9A-Fa-f.:]+")},
})
