"""Client library for gsnd's ULP socket: the interface harpd, stpd and pktwayd use.

Blocking::

    with UlpClient("/run/gsnd/gsn0.ulp") as ulp:
        status = ulp.bind(0x88B5)              # our own ULA, link state
        ulp.send(peer_ula, b"hello", vc=1, ethertype=0x88B5)
        frame = ulp.recv(timeout=1.0)          # Frame(op=RECV, vc, ethertype, ula=source, payload)

trio::

    async with await AsyncUlpClient.connect(path) as ulp: ...  (same methods, awaited)
"""

from __future__ import annotations

import socket

import trio

from .constants import ULP_MAX_PAYLOAD
from .wire.ulp import HEADER, Frame, Op

_BUF = ULP_MAX_PAYLOAD + HEADER.size + 1


class UlpError(Exception):
    pass


class UlpClient:
    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.connect(path)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self._buf = bytearray(_BUF)

    def __enter__(self) -> "UlpClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def bind(self, ethertype: int, timeout: float = 5.0) -> Frame:
        """Receive Messages of ``ethertype``; returns the STATUS frame that answers."""
        self.sock.send(Frame(Op.BIND, ethertype=ethertype).encode())
        while True:
            frame = self.recv(timeout)
            if frame.op is Op.STATUS:
                return frame
            if frame.op is Op.ERROR:
                raise UlpError(frame.payload.decode(errors="replace"))

    def send(self, ula: bytes, payload: bytes, *, vc: int = 1, ethertype: int) -> None:
        self.sock.send(Frame(Op.SEND, vc, ethertype, ula, payload).encode())

    def recv(self, timeout: float | None = None) -> Frame:
        self.sock.settimeout(timeout)
        n = self.sock.recv_into(self._buf)
        if n == 0:
            raise UlpError("gsnd closed the ULP socket")
        return Frame.decode(memoryview(self._buf)[:n])


class AsyncUlpClient:
    def __init__(self, sock) -> None:
        self.sock = sock
        self._buf = bytearray(_BUF)

    @classmethod
    async def connect(cls, path: str) -> "AsyncUlpClient":
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        await sock.connect(path)
        return cls(sock)

    async def __aenter__(self) -> "AsyncUlpClient":
        return self

    async def __aexit__(self, *exc) -> None:
        self.sock.close()

    async def bind(self, ethertype: int) -> Frame:
        await self.sock.send(Frame(Op.BIND, ethertype=ethertype).encode())
        while True:
            frame = await self.recv()
            if frame.op is Op.STATUS:
                return frame
            if frame.op is Op.ERROR:
                raise UlpError(frame.payload.decode(errors="replace"))

    async def send(self, ula: bytes, payload: bytes, *, vc: int = 1, ethertype: int) -> None:
        await self.sock.send(Frame(Op.SEND, vc, ethertype, ula, payload).encode())

    async def recv(self) -> Frame:
        n = await self.sock.recv_into(self._buf)
        if n == 0:
            raise UlpError("gsnd closed the ULP socket")
        return Frame.decode(memoryview(self._buf)[:n])
