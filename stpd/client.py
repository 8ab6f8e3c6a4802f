"""Python client library for stpd's local API (blocking).

    from stpd.client import StClient
    with StClient() as st:
        vc = st.connect("192.0.2.2", 5001)
        with open("big.bin", "rb") as f:
            st.send(vc, f, progress=print)          # stpd reads the file through the passed fd
        rid = st.region(vc, 4096)["rid"]
        old = st.fetchop(vc, rid, 0, "inc")         # atomic fetch-and-increment
        st.release(vc, rid)                         # END: the peer may reuse the memory

Reads (RTR): one side calls ``serve(vc, f)`` (answers the peer's next RTR from
``f``), the other ``read(vc, f, n)``.  ``abort(vc, xid)`` ends a running transfer
(its id is in ``status()`` and in every progress message).  A connection, and
everything on it, belongs to the client (this StClient's socket) that made or
accepted it: other clients are refused, except root, which may end transfers,
regions and connections (``stp abort``) and sees every client's in ``status()``.
"""

from __future__ import annotations

import base64
import os
import socket
from collections.abc import Callable

from . import api

DEFAULT_SOCKET = "/run/stpd/api.sock"


class StError(Exception):
    pass


class StClient:
    def __init__(self, path: str = DEFAULT_SOCKET) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.connect(path)

    def __enter__(self) -> StClient:
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()

    def call(self, msg: dict, fds=(), progress: Callable[[int], None] | None = None) -> dict:
        api.send_msg(self.sock, msg, list(fds))
        while True:
            reply, _ = api.recv_msg(self.sock)
            if "progress" in reply:
                if progress:
                    progress(reply["progress"])
                continue
            if not reply.get("ok"):
                raise StError(reply.get("error", "failed"))
            return reply

    def listen(self, uport: int) -> None:
        self.call({"op": "listen", "uport": uport})

    def accept(self, uport: int) -> tuple[int, str]:
        r = self.call({"op": "accept", "uport": uport})
        return r["vc"], r["peer"]

    def connect(self, host: str, uport: int) -> int:
        return self.call({"op": "connect", "host": host, "uport": uport})["vc"]

    def send(self, vc: int, f, length: int | None = None, dc: int | None = None, progress=None) -> int:
        length = os.fstat(f.fileno()).st_size if length is None else length
        msg = {"op": "send", "vc": vc, "length": length}
        if dc is not None:
            msg["dc"] = dc
        return self.call(msg, [f.fileno()], progress)["bytes"]

    def send_bytes(self, vc: int, data: bytes) -> int:
        return self.call({"op": "send", "vc": vc, "data": base64.b64encode(data).decode()})["bytes"]

    def recv(self, vc: int, f, max_bytes: int, progress=None) -> int:
        return self.call({"op": "recv", "vc": vc, "max": max_bytes}, [f.fileno()], progress)["bytes"]

    def recv_bytes(self, vc: int, max_bytes: int = 65536) -> bytes:
        return base64.b64decode(self.call({"op": "recv", "vc": vc, "max": max_bytes})["data"])

    def read(self, vc: int, f, length: int, progress=None) -> int:
        """RTR: ask the peer (which calls ``serve``) for up to ``length`` bytes into ``f``."""
        return self.call({"op": "read", "vc": vc, "length": length}, [f.fileno()], progress)["bytes"]

    def read_bytes(self, vc: int, length: int = 65536) -> bytes:
        return base64.b64decode(self.call({"op": "read", "vc": vc, "length": length})["data"])

    def serve(self, vc: int, f, length: int | None = None, progress=None) -> int:
        """Answer the peer's next read (RTR) from ``f`` (its first ``length`` bytes, at most
        what the reader asked for); returns the bytes sent."""
        msg = {"op": "serve", "vc": vc}
        if length is not None:
            msg["length"] = length
        return self.call(msg, [f.fileno()], progress)["bytes"]

    def serve_bytes(self, vc: int, data: bytes) -> int:
        return self.call({"op": "serve", "vc": vc, "data": base64.b64encode(data).decode()})["bytes"]

    def abort(self, vc: int, xid: int) -> None:
        """END a running transfer: it fails at both ends, the connection stays."""
        self.call({"op": "abort", "vc": vc, "xid": xid})

    def release(self, vc: int, rid: int) -> None:
        """END a region obtained with ``region``: the peer frees it."""
        self.call({"op": "release", "vc": vc, "rid": rid})

    def expose(self, vc: int, fd: int, size: int) -> None:
        self.call({"op": "expose", "vc": vc, "size": size}, [fd])

    def region(self, vc: int, size: int) -> dict:
        return self.call({"op": "region", "vc": vc, "size": size})

    def put(self, vc: int, rid: int, offset: int, data: bytes) -> None:
        self.call({"op": "put", "vc": vc, "rid": rid, "offset": offset, "data": base64.b64encode(data).decode()})

    def get(self, vc: int, rid: int, offset: int, length: int) -> bytes:
        r = self.call({"op": "get", "vc": vc, "rid": rid, "offset": offset, "length": length})
        return base64.b64decode(r["data"])

    def fetchop(self, vc: int, rid: int, offset: int, function: str = "inc") -> int:
        return self.call({"op": "fetchop", "vc": vc, "rid": rid, "offset": offset, "function": function})["value"]

    def status(self, vc: int | None = None) -> dict:
        return self.call({"op": "status"} if vc is None else {"op": "status", "vc": vc})

    def close(self, vc: int) -> None:
        self.call({"op": "close", "vc": vc})
