"""Prometheus metrics: the text exposition format (version 0.0.4) over a small HTTP/1.1
server on the daemon's own trio loop.  Off unless a daemon is given ``--metrics HOST:PORT``.

Written here rather than taken from prometheus-client: that library serves from its own
thread with a process-global registry and no bound on clients or slow readers, while
every socket of these daemons is bounded and served from the daemon's trio loop; the
format itself is a few lines of text.

Bounded like the control socket: at most ``METRICS_MAX_CLIENTS`` scrapes at once (one
more gets 503 and is closed), ``METRICS_TIMEOUT_S`` to send the request head (at most
``METRICS_MAX_REQUEST`` bytes) and as long to take the answer; only ``GET /metrics`` is
served.  Out of descriptors, accept backs off instead of ending the daemon.  Every
refusal is counted and exposed as ``gsn_metrics_refused_total{reason}``.
"""

from __future__ import annotations

import math
import os
import socket
from collections import Counter
from dataclasses import dataclass, field
from collections.abc import Callable, Iterable, Mapping

import trio

from .oserrors import NO_FDS_ERRNOS, accept_ready
from ..constants import METRICS_MAX_CLIENTS, METRICS_MAX_REQUEST, METRICS_TIMEOUT_S
from .log import is_drop

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
ACCEPT_BACKOFF_S = 0.05


@dataclass
class Family:
    """One metric: its samples are (labels, value)."""

    name: str
    kind: str  # "gauge" or "counter" (then the name ends in _total)
    help: str
    samples: list[tuple[dict, float]] = field(default_factory=list)

    def add(self, value: float, **labels) -> Family:
        self.samples.append((labels, value))
        return self


def _label(v) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _value(v: float) -> str:
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("+Inf" if v > 0 else "-Inf")
    return repr(v) if isinstance(v, float) else str(int(v))


def exposition(families: Iterable[Family]) -> str:
    """The text format: HELP and TYPE once per name, then its samples."""
    merged: dict[str, Family] = {}
    for f in families:
        if f.name in merged:
            merged[f.name].samples.extend(f.samples)
        else:
            merged[f.name] = Family(f.name, f.kind, f.help, list(f.samples))
    out = []
    for f in merged.values():
        out.append(f"# HELP {f.name} {f.help}\n# TYPE {f.name} {f.kind}\n")
        for labels, value in f.samples:
            text = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            out.append(f"{f.name}{{{text}}} {_value(value)}\n" if text else f"{f.name} {_value(value)}\n")
    return "".join(out)


def counter_families(counters: Mapping[str, int], component: str, **labels) -> list[Family]:
    """A daemon's counters: every drop counter (by name, as the logs judge it) is one sample
    of gsn_drops_total with its reason; the others of gsn_events_total with their name."""
    drops = Family("gsn_drops_total", "counter", "Things lost or refused, by component and reason.")
    events = Family("gsn_events_total", "counter", "Other counted events, by component and name.")
    for name, value in sorted(counters.items()):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if is_drop(name):
            drops.add(value, **labels, component=component, reason=name)
        else:
            events.add(value, **labels, component=component, name=name)
    return [drops, events]


def link_families(link_status: dict, **labels) -> list[Family]:
    """A link's state and per-VC credits and queue depth (gsnd's cable, each switch port)."""
    up = Family("gsn_link_up", "gauge", "1 while the link is up.").add(int(link_status["state"] == "up"), **labels)
    credits = Family("gsn_vc_credits", "gauge", "Transmit credits held per VC (micropackets).")
    queued = Family("gsn_vc_queued_micropackets", "gauge", "Micropackets queued to send per VC.")
    in_use = Family("gsn_vc_rx_buffer_in_use_micropackets", "gauge", "Receive buffer in use per VC (micropackets).")
    for vc, (c, q, u) in enumerate(zip(link_status["credits_tx"], link_status["queued_mps"],
                                       link_status["credits_in_use"])):
        credits.add(c, **labels, vc=vc)
        queued.add(q, **labels, vc=vc)
        in_use.add(u, **labels, vc=vc)
    return [up, credits, queued, in_use]


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``) for the metrics listener; ValueError if malformed."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not host:
        raise ValueError(f"{text!r} is not HOST:PORT (e.g. 127.0.0.1:9640)")
    return host.strip("[]"), int(port)


def _response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8", head: bool = False) -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n").encode() + (b"" if head else body)


async def serve_metrics(listen: tuple[str, int], collect: Callable[[], list[Family]], *,
                        counters: Counter | None = None, max_clients: int = METRICS_MAX_CLIENTS,
                        timeout: float = METRICS_TIMEOUT_S, task_status=trio.TASK_STATUS_IGNORED) -> None:
    counters = Counter() if counters is None else counters
    lsock = await _tcp_listener(listen)
    active = 0

    def _collect() -> list[Family]:
        own = Family("gsn_metrics_refused_total", "counter", "Metrics scrapes refused, by reason.")
        for reason in ("busy", "timeout", "bad_request", "not_found", "no_fds", "client_gone"):
            own.add(counters[f"refused_{reason}"], reason=reason)
        return [*collect(), own, Family("gsn_metrics_scrapes_total", "counter", "Metrics scrapes answered.")
                .add(counters["scrapes"])]

    async def _one(stream: trio.SocketStream) -> None:
        nonlocal active
        try:
            async with stream:
                await _serve_one(stream, _collect, counters, timeout)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            counters["refused_client_gone"] += 1
        finally:
            active -= 1

    task_status.started(lsock.getsockname()[:2])
    with lsock:
        async with trio.open_nursery() as nursery:
            while True:
                conn = await accept_ready(lsock)
                if isinstance(conn, OSError):
                    if conn.errno in NO_FDS_ERRNOS:
                        counters["refused_no_fds"] += 1
                    await trio.sleep(ACCEPT_BACKOFF_S)
                    continue
                stream = trio.SocketStream(trio.socket.from_stdlib_socket(conn))
                if active >= max_clients:
                    counters["refused_busy"] += 1
                    with trio.move_on_after(0.1):  # a fresh socket's buffer takes it at once
                        try:
                            await stream.send_all(_response("503 Service Unavailable", b"busy\n"))
                            await stream.send_eof()
                        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                            pass
                    _discard_unread(stream)
                    await stream.aclose()
                    continue
                active += 1
                nursery.start_soon(_one, stream)


async def _tcp_listener(listen: tuple[str, int]) -> socket.socket:
    """A non-blocking listening TCP socket on ``listen`` (its host a name or an address)."""
    family, kind, proto, _, addr = (await trio.socket.getaddrinfo(listen[0], listen[1], type=socket.SOCK_STREAM,
                                                                  flags=socket.AI_PASSIVE))[0]
    lsock = socket.socket(family, kind, proto)
    try:
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lsock.bind(addr)
        lsock.listen(64)
        lsock.setblocking(False)
    except OSError:
        lsock.close()
        raise
    return lsock


def _discard_unread(stream: trio.SocketStream) -> None:
    """Read, without waiting, what a refused client already sent: closing a socket with
    unread data resets the connection, and the client could lose its 503.  Never blocks,
    so idle clients cannot slow the accept loop."""
    try:
        os.read(stream.socket.fileno(), METRICS_MAX_REQUEST)
    except OSError:  # nothing there yet (EAGAIN), or the client is gone
        pass


def answer(head: bytes, collect: Callable[[], list[Family]], counters: Counter) -> bytes:
    """The whole HTTP response to a request ``head`` (any bytes: it comes off a socket)."""
    parts = head.split(b"\r\n", 1)[0].split(b"\n", 1)[0].split()
    if len(head) > METRICS_MAX_REQUEST or len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
        counters["refused_bad_request"] += 1
        return _response("400 Bad Request", b"bad request\n")
    if parts[0] not in (b"GET", b"HEAD"):
        counters["refused_bad_request"] += 1
        return _response("405 Method Not Allowed", b"GET /metrics only\n")
    if parts[1].split(b"?", 1)[0] != b"/metrics":
        counters["refused_not_found"] += 1
        return _response("404 Not Found", b"see /metrics\n")
    counters["scrapes"] += 1
    return _response("200 OK", exposition(collect()).encode(), CONTENT_TYPE, head=parts[0] == b"HEAD")


async def _serve_one(stream: trio.SocketStream, collect, counters: Counter, timeout: float) -> None:
    buf = b""
    with trio.move_on_after(timeout) as head:
        while b"\r\n\r\n" not in buf and b"\n\n" not in buf and len(buf) <= METRICS_MAX_REQUEST:
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            buf += chunk
    if head.cancelled_caught:
        counters["refused_timeout"] += 1
        return
    reply = answer(buf, collect, counters)
    with trio.move_on_after(timeout) as send:
        await stream.send_all(reply)
    if send.cancelled_caught:
        counters["refused_timeout"] += 1
