"""Control socket: a Unix stream socket, one JSON request line, one JSON reply line."""

from __future__ import annotations

import json
import os
import socket
from typing import Awaitable, Callable

import structlog
import trio

log = structlog.get_logger("control")

Handler = Callable[[dict], Awaitable[dict]]
MAX_REQUEST = 65536


async def serve_control(path: str, handler: Handler, mode: int = 0o660, *, task_status=trio.TASK_STATUS_IGNORED):
    if os.path.exists(path):
        os.unlink(path)
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await sock.bind(path)
    os.chmod(path, mode)
    sock.listen(16)
    task_status.started()
    async with trio.open_nursery() as nursery:
        while True:
            conn, _ = await sock.accept()
            nursery.start_soon(_serve_one, conn, handler)


async def _serve_one(conn, handler: Handler) -> None:
    stream = trio.SocketStream(conn)
    async with stream:
        buf = b""
        try:
            while b"\n" not in buf and len(buf) < MAX_REQUEST:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    break
                buf += chunk
        except trio.BrokenResourceError:
            return
        try:
            req = json.loads(buf.decode() or "{}")
            if not isinstance(req, dict):
                raise ValueError("request must be a JSON object")
            reply = await handler(req)
        except (ValueError, UnicodeDecodeError) as exc:
            reply = {"ok": False, "error": f"bad request: {exc}"}
        except Exception as exc:  # a bug in a handler must not take the daemon down
            log.exception("control.handler_failed")
            reply = {"ok": False, "error": f"internal error: {type(exc).__name__}: {exc}"}
        try:
            await stream.send_all((json.dumps(reply) + "\n").encode())
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


def request(path: str, req: dict, timeout: float = 5.0) -> dict:
    """Blocking client used by the CLIs."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall((json.dumps(req) + "\n").encode())
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    try:
        return json.loads(buf.decode())
    except ValueError:
        return {"ok": False, "error": "the daemon closed the connection without an answer"}
