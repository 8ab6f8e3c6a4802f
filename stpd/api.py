"""stpd's local API: a Unix SOCK_SEQPACKET socket (mode 0660).  One packet is one
JSON object; file descriptors ride along as SCM_RIGHTS so that bulk data is never
streamed through the socket: stpd maps the file (or shared memory) itself.

Requests (``op``) and their answers:

=========  ==============================================  ==================================
op         fields (fd = passed descriptor)                 answer
=========  ==============================================  ==================================
listen     uport                                           {}
accept     uport                                           vc, peer
connect    host (IPv4), uport                              vc
send       vc, length, [dc] + fd  | data (base64, small)   bytes   (progress: {"progress": n})
recv       vc, max + fd           | max (small, inline)    bytes, [data]
expose     vc, size + fd (memfd/shm, ftruncate'd)          {}
region     vc, size                                        rid, size
put        vc, rid, offset, data (base64)                  {}
get        vc, rid, offset, length                         data (base64)
fetchop    vc, rid, offset, function (inc|dec|clear)       value (the word before the op)
status     [vc]                                            vcs, counters  (or the peer's slots)
close      vc                                              {}
=========  ==============================================  ==================================

Every answer has ``ok``; failures carry ``error``.
"""

from __future__ import annotations

import json
import socket

MAX_MSG = 65536
MAX_FDS = 4


def encode(msg: dict) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode()


def decode(data: bytes) -> dict:
    msg = json.loads(data.decode())
    if not isinstance(msg, dict):
        raise ValueError("a request is a JSON object")
    return msg


def send_msg(sock: socket.socket, msg: dict, fds: list[int] = ()) -> None:
    data = encode(msg)
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.send(data)


def recv_msg(sock: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MSG, MAX_FDS)
    if not data:
        raise EOFError("connection closed")
    return decode(data), fds
