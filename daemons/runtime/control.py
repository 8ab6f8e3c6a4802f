"""Control socket: a Unix stream socket, one JSON request line, one JSON reply line.

Bounded: at most ``MAX_CLIENTS`` connections are served at once (beyond that a
client gets one JSON error line and is closed), a client has ``IDLE_TIMEOUT_S``
to send its request line and ``SEND_TIMEOUT_S`` to take the reply, and running out
of file descriptors (EMFILE/ENFILE) refuses the waiting client and backs off
instead of ending the daemon.  Every request is checked against the daemon's
``Schema`` before its handler sees it.  Each refusal is counted in ``counters``
(the daemons show them under "control" in their status).
"""

from __future__ import annotations

import errno
import json
import contextvars
import os
import socket
import struct
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable

import structlog
import trio

from .oserrors import NO_FDS_ERRNOS, ReserveFd, accept_ready
from .reload import reload_now
from .schema import Schema, SchemaError

log = structlog.get_logger("control")

Handler = Callable[[dict], Awaitable[dict]]
MAX_REQUEST = 65536  # bytes of one request line
MAX_CLIENTS = 32  # connections served at once
IDLE_TIMEOUT_S = 3.0  # to send the request line
SEND_TIMEOUT_S = 3.0  # to take the reply
ACCEPT_BACKOFF_S = 0.05  # after accept() failed for want of file descriptors


_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
# The credentials (pid, uid, gid) of the control client whose request a handler is
# serving (SO_PEERCRED, taken when the connection is accepted); None outside a request.
PEER: contextvars.ContextVar[tuple[int, int, int] | None] = contextvars.ContextVar("control_peer", default=None)


NOBODY = (-1, -1, -1)  # credentials that could not be read: privileged() is False


def peer_cred(sock) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process that connected the Unix socket ``sock`` (SO_PEERCRED)."""
    return _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))


def privileged(uid: int) -> bool:
    """Root, or the user this daemon runs as (the gsn service user under systemd)."""
    return uid == 0 or uid == os.geteuid()


# socket -> inode of the file bind_unix bound it to, for unlink_unix
_BOUND: weakref.WeakKeyDictionary[socket.socket, int] = weakref.WeakKeyDictionary()


class SocketInUse(OSError):
    """A live daemon already answers on the socket path."""


def bind_unix(path: str, type: int = socket.SOCK_STREAM, mode: int = 0o660) -> socket.socket:
    """Bind a Unix socket at ``path`` without stealing it from a running daemon.

    A socket file nobody answers on (ECONNREFUSED: a crashed daemon's leftover) is
    removed first; one a live daemon accepts on raises ``SocketInUse`` (an OSError
    with EADDRINUSE, so the daemons exit 71 with one line, as for a busy UDP port);
    a path that is not a socket is never removed."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None:
        import stat

        if not stat.S_ISSOCK(st.st_mode):
            raise SocketInUse(errno.EEXIST, "exists and is not a socket; not removing it", path)
        probe = socket.socket(socket.AF_UNIX, type)
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            pass  # stale
        except OSError as exc:
            if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
                pass  # stale, or gone
            elif exc.errno == errno.EPROTOTYPE:  # only a listening socket of another type says so
                raise SocketInUse(errno.EADDRINUSE, "Address already in use (a live socket of another type)",
                                  path) from None
            elif exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK) or isinstance(exc, TimeoutError):
                raise SocketInUse(errno.EADDRINUSE, "Address already in use (a live daemon is on it, busy)",
                                  path) from None
            else:
                raise
        else:
            raise SocketInUse(errno.EADDRINUSE, "Address already in use (a daemon is already running on it)", path)
        finally:
            probe.close()
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    sock = socket.socket(socket.AF_UNIX, type)
    try:
        sock.bind(path)
        os.chmod(path, mode)
        _BOUND[sock] = os.lstat(path).st_ino  # unlink_unix removes the path only while it is still ours
    except BaseException:
        sock.close()
        raise
    return sock


def unlink_unix(path: str, sock: socket.socket) -> None:
    """Close a socket ``bind_unix`` made and remove its path on the way out, unless the
    path is no longer this socket's (a newer daemon bound it meanwhile: its inode differs
    from the one recorded at bind), so a stopped daemon leaves nothing in /run."""
    ino = _BOUND.pop(sock, None)
    sock.close()
    try:
        if ino is not None and os.lstat(path).st_ino == ino:
            os.unlink(path)
    except OSError:
        pass  # already gone


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def parse_request(data: bytes) -> object:
    """Decode one request line (no NaN/Infinity); ValueError when it is not JSON."""
    try:
        return json.loads(data.decode() or "null", parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None


RELOAD = {"cmd": "reload"}  # every control socket's own request: reload the daemon (gsnctl reload)


async def handle(req: object, handler: Handler, schema: Schema, counters: Counter) -> dict:
    """Validate ``req`` against ``schema`` and run ``handler``; never raises.  ``{"cmd":
    "reload"}`` is answered here for every daemon (root or its own user only)."""
    if req == RELOAD:
        peer = PEER.get()
        if peer is not None and not privileged(peer[1]):
            counters["refused_reload_unprivileged"] += 1
            return {"ok": False, "error": f"reload: uid {peer[1]} may not reload the daemon (root or its own user only)"}
        counters["reloads"] += 1
        return reload_now()
    try:
        valid = schema.validate(req)
    except SchemaError as exc:
        counters["bad_request"] += 1
        return {"ok": False, "error": f"bad request: {exc}"}
    try:
        return await handler(valid)
    except Exception as exc:  # a bug in a handler must not take the daemon down
        counters["internal_error"] += 1
        log.exception("control.handler_failed", cmd=valid.get("cmd"))
        return {"ok": False, "error": f"internal error: {type(exc).__name__}: {exc}"}


async def serve_control(path: str, handler: Handler, schema: Schema, *, counters: Counter | None = None,
                        mode: int = 0o660, max_clients: int = MAX_CLIENTS, idle_timeout: float = IDLE_TIMEOUT_S,
                        task_status=trio.TASK_STATUS_IGNORED):
    counters = Counter() if counters is None else counters
    lsock = bind_unix(path, socket.SOCK_STREAM, mode)
    lsock.setblocking(False)
    lsock.listen(64)
    reserve = ReserveFd()
    active = 0

    async def _one(conn: socket.socket) -> None:
        nonlocal active
        try:
            await _serve_one(trio.socket.from_stdlib_socket(conn), handler, schema, counters, idle_timeout)
        finally:
            active -= 1

    task_status.started()
    try:
        async with trio.open_nursery() as nursery:
            while True:
                conn = await accept_ready(lsock)
                if isinstance(conn, OSError):
                    exc = conn
                    if exc.errno not in NO_FDS_ERRNOS:
                        counters["accept_error"] += 1
                        log.warning("control.accept_failed", error=exc.strerror or str(exc))
                        await trio.sleep(ACCEPT_BACKOFF_S)
                        continue
                    # Out of descriptors: free the reserve one to take the waiting
                    # client and tell it so, then give idle clients time to go.
                    counters["refused_no_fds"] += 1
                    log.warning("control.refused", reason="out of file descriptors", error=exc.strerror)
                    reserve.refuse_waiting(lsock, lambda c: _refuse(c, "daemon out of file descriptors; try again"))
                    await trio.sleep(ACCEPT_BACKOFF_S)
                    continue
                if active >= max_clients:
                    counters["refused_busy"] += 1
                    log.warning("control.refused", reason="too many clients", max_clients=max_clients)
                    _refuse(conn, f"busy: {max_clients} control clients already connected; try again")
                    continue
                active += 1
                nursery.start_soon(_one, conn)
    finally:
        lsock.close()
        unlink_unix(path, lsock)
        reserve.close()


def _refuse(conn: socket.socket, error: str) -> None:
    """One JSON error line without waiting (it fits a fresh socket's buffer), then close."""
    try:
        conn.setblocking(False)
        conn.send((json.dumps({"ok": False, "error": error}) + "\n").encode())
    except OSError:
        pass
    finally:
        conn.close()


async def _serve_one(conn, handler: Handler, schema: Schema, counters: Counter, idle_timeout: float) -> None:
    try:
        PEER.set(peer_cred(conn))  # this task's context only: handlers read it with PEER.get()
    except OSError:  # never seen on a Unix socket; if it were, the client is nobody in particular
        PEER.set(NOBODY)
    stream = trio.SocketStream(conn)
    async with stream:
        buf = b""
        with trio.move_on_after(idle_timeout) as idle:
            try:
                while b"\n" not in buf and len(buf) <= MAX_REQUEST:
                    chunk = await stream.receive_some(4096)
                    if not chunk:
                        break
                    buf += chunk
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                counters["client_gone"] += 1
                return
        line = buf.split(b"\n", 1)[0]
        if idle.cancelled_caught and b"\n" not in buf:
            counters["timed_out"] += 1
            reply = {"ok": False, "error": f"timeout: no request line within {idle_timeout:g} s"}
        elif not buf:
            counters["closed_without_request"] += 1  # e.g. a liveness probe
            return
        elif len(line) > MAX_REQUEST:
            counters["bad_request"] += 1
            reply = {"ok": False, "error": f"bad request: longer than {MAX_REQUEST} bytes"}
        else:
            counters["requests"] += 1
            try:
                req = parse_request(line)
            except (ValueError, UnicodeDecodeError) as exc:
                counters["bad_request"] += 1
                reply = {"ok": False, "error": f"bad request: {exc}"}
            else:
                reply = await handle(req, handler, schema, counters)
        with trio.move_on_after(SEND_TIMEOUT_S) as slow:
            try:
                await stream.send_all((json.dumps(reply) + "\n").encode())
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                counters["client_gone"] += 1
        if slow.cancelled_caught:
            counters["reply_timed_out"] += 1


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
