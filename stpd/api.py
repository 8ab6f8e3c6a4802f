"""stpd's local API: a Unix SOCK_SEQPACKET socket (mode 0660).  One packet is one
JSON object; file descriptors ride along as SCM_RIGHTS so that bulk data is never
streamed through the socket: stpd reads and writes the file (or shared memory)
through the passed descriptor (pread/pwrite, so a file truncated behind stpd's back
is an error for that transfer, never a crash).

Requests (``op``) and their answers:

=========  ==============================================  ==================================
op         fields (fd = passed descriptor)                 answer
=========  ==============================================  ==================================
listen     uport                                           {}
accept     uport                                           vc, peer
connect    host (IPv4), uport                              vc
send       vc, length, [dc] + fd  | data (base64, small)   bytes, xid (progress: {"progress": n, "xid"})
recv       vc, max + fd           | max (small, inline)    bytes, xid, [data]
read       vc, length + fd        | length (small, inline) bytes, xid, [data]   (RTR: the peer serves)
serve      vc, [length] + fd      | data (base64, small)   bytes, xid, asked    (answers the next RTR)
abort      vc, xid                                         {}      (END: a transfer fails at both ends)
expose     vc, size + fd (memfd/shm, ftruncate'd)          {}
region     vc, size                                        rid, size
put        vc, rid, offset, data (base64)                  {}
get        vc, rid, offset, length                         data (base64)
fetchop    vc, rid, offset, [function] (inc|dec|clear)     value (the word before the op)
release    vc, rid                                         {}      (END: give the peer's region back)
status     [vc]                                            vcs, counters  (or the peer's slots)
close      vc                                              {}
=========  ==============================================  ==================================

Every answer has ``ok``; failures carry ``error`` (one line).  A connection (vc,
with its transfers and regions) and a listened port belong to the API connection
that made them; requests naming another client's are refused (README, "Security
model").  Every request is
checked against ``SCHEMA`` before stpd acts on it: unknown ops or fields, wrong
types (a bool is not an integer), NaN/Infinity, integers outside the wire field's
range, long strings, nesting and oversized datagrams are refused as
``bad request: ...``.
"""

from __future__ import annotations

import base64
import binascii
import json
import socket
from collections.abc import Sequence
from dataclasses import dataclass

from . import constants as K

MAX_MSG = K.API_MAX_MSG
MAX_FDS = K.API_MAX_FDS


class RequestError(ValueError):
    """A request that does not fit the schema (answered ``bad request: ...``)."""


@dataclass(frozen=True)
class Int:
    lo: int
    hi: int
    required: bool = True


@dataclass(frozen=True)
class Str:
    max_len: int = K.API_MAX_STR
    choices: tuple = ()
    required: bool = True


@dataclass(frozen=True)
class B64:
    max_bytes: int = K.INLINE_MAX
    required: bool = True


ID = Int(*K.U32_ID)
UPORT = Int(0, K.ULP_PORT_MAX)
NBYTES = Int(0, K.API_MAX_BYTES)

SCHEMA: dict[str, dict[str, Int | Str | B64]] = {
    "listen": {"uport": UPORT},
    "accept": {"uport": UPORT},
    "connect": {"host": Str(), "uport": UPORT},
    "send": {"vc": ID, "length": Int(0, K.API_MAX_BYTES, False), "dc": Int(1, 3, False), "data": B64(required=False)},
    "recv": {"vc": ID, "max": NBYTES},
    "read": {"vc": ID, "length": NBYTES},
    "serve": {"vc": ID, "length": Int(0, K.API_MAX_BYTES, False), "data": B64(required=False)},
    "abort": {"vc": ID, "xid": ID},
    "expose": {"vc": ID, "size": Int(1, K.API_MAX_BYTES)},
    "region": {"vc": ID, "size": Int(1, K.API_MAX_BYTES)},
    "put": {"vc": ID, "rid": ID, "offset": NBYTES, "data": B64()},
    "get": {"vc": ID, "rid": ID, "offset": NBYTES, "length": Int(1, K.GET_MAX)},
    "fetchop": {"vc": ID, "rid": ID, "offset": NBYTES, "function": Str(5, ("inc", "dec", "clear"), False)},
    "release": {"vc": ID, "rid": ID},
    "status": {"vc": Int(*K.U32_ID, False)},
    "close": {"vc": ID},
}

BACKSLASH = 0x5C


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 24 else text[:21] + "..."


def _no_constant(name: str):
    raise RequestError(f"{name} is not a number here")


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > K.API_MAX_INT_DIGITS:
        raise RequestError(f"integer of {len(text)} digits")
    return int(text)


def _parse_float(text: str):
    raise RequestError(f"{_short(text)}: no fractions or exponents, integers only")


def brackets(data: bytes, limit: int = K.API_MAX_BRACKETS) -> int:
    """How many '{' and '[' ``data`` has outside JSON strings (counting stops past
    ``limit``).  Linear: one find() per quote, backslash runs looked at once."""
    total = data.count(b"{") + data.count(b"[")
    if total <= limit:  # the usual case: nothing to tell apart
        return total
    count, pos, n = 0, 0, len(data)
    while True:
        q = data.find(b'"', pos)
        end = q if q >= 0 else n
        count += data.count(b"{", pos, end) + data.count(b"[", pos, end)
        if count > limit or q < 0:
            return count
        j = q + 1
        while True:  # the closing quote: one not escaped by an odd run of backslashes
            j = data.find(b'"', j)
            if j < 0:
                return count  # unterminated: json.loads refuses it
            k = j - 1
            while k > q and data[k] == BACKSLASH:
                k -= 1
            if (j - 1 - k) % 2 == 0:
                break
            j += 1
        pos = j + 1


def validate(msg) -> dict:
    """Check a decoded request against ``SCHEMA``; returns it with ``data`` decoded to bytes."""
    if not isinstance(msg, dict):
        raise RequestError("a request is a JSON object")
    op = msg.get("op")
    if not isinstance(op, str) or op not in SCHEMA:
        raise RequestError(f"unknown op {_short(op)}")
    fields = SCHEMA[op]
    out: dict = {"op": op}
    for name in msg:
        if name != "op" and name not in fields:
            raise RequestError(f"{op}: unknown field {_short(name)}")
    for name, spec in fields.items():
        if name not in msg:
            if spec.required:
                raise RequestError(f"{op}: {name} is missing")
            continue
        value = msg[name]
        if isinstance(spec, Int):
            if type(value) is not int:
                raise RequestError(f"{op}: {name} must be an integer, not {type(value).__name__}")
            if not spec.lo <= value <= spec.hi:
                raise RequestError(f"{op}: {name} {_short(value)} is outside {spec.lo}..{spec.hi}")
        elif isinstance(spec, Str):
            if type(value) is not str:
                raise RequestError(f"{op}: {name} must be a string, not {type(value).__name__}")
            if len(value) > spec.max_len:
                raise RequestError(f"{op}: {name} is longer than {spec.max_len} characters")
            if spec.choices and value not in spec.choices:
                raise RequestError(f"{op}: {name} must be one of {', '.join(spec.choices)}")
        else:
            if type(value) is not str:
                raise RequestError(f"{op}: {name} must be a base64 string, not {type(value).__name__}")
            if len(value) > (spec.max_bytes + 2) // 3 * 4:
                raise RequestError(f"{op}: {name} is larger than {spec.max_bytes} bytes")
            try:
                value = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise RequestError(f"{op}: {name} is not base64") from None
        out[name] = value
    return out


def encode(msg: dict) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode()


def decode(data: bytes) -> dict:
    """One datagram -> a validated request.  Bounded work: the size is capped, nesting
    is refused by a cheap scan before json.loads recurses, long integer literals and
    NaN/Infinity never reach int()/float()."""
    if len(data) > MAX_MSG:
        raise RequestError(f"request larger than {MAX_MSG} bytes")
    if brackets(data) > K.API_MAX_BRACKETS:
        raise RequestError("nested too deeply (requests are flat JSON objects)")
    try:
        msg = json.loads(data.decode(), parse_constant=_no_constant, parse_int=_parse_int,
                         parse_float=_parse_float)
    except RequestError:
        raise
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise RequestError(f"not JSON ({str(exc).splitlines()[0][:60]})") from None
    return validate(msg)


def decode_reply(data: bytes) -> dict:
    msg = json.loads(data.decode())
    if not isinstance(msg, dict):
        raise ValueError("an answer is a JSON object")
    return msg


def send_msg(sock: socket.socket, msg: dict, fds: Sequence[int] = ()) -> None:
    data = encode(msg)
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.send(data)


def recv_raw(sock: socket.socket) -> tuple[bytes, list[int], int]:
    """One datagram (one byte more than allowed, to see truncation), its fds and flags."""
    data, fds, flags, _addr = socket.recv_fds(sock, MAX_MSG + 1, MAX_FDS)
    return data, fds, flags


def recv_msg(sock: socket.socket) -> tuple[dict, list[int]]:
    """The client side: one answer (not checked against the request schema)."""
    data, fds, _flags = recv_raw(sock)
    if not data:
        raise EOFError("connection closed")
    return decode_reply(data), fds
