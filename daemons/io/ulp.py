"""gsnd's ULP socket server: local daemons bind EtherTypes and exchange Messages."""

from __future__ import annotations

import socket
from collections import Counter
from typing import Callable

import trio

from ..constants import ULP_MAX_PAYLOAD
from ..runtime.control import bind_unix
from ..wire.errors import DecodeError
from ..wire.message import Message
from ..wire.ulp import HEADER, Frame, Op

_BUF = ULP_MAX_PAYLOAD + HEADER.size + 1
BURST = 64  # frames taken from one client before flushing and yielding


class _Client:
    def __init__(self, sock) -> None:
        self.sock = sock
        self.ethertypes: set[int] = set()


class UlpServer:
    """``send(vc, ula, ethertype, payload) -> str | None`` queues a Message (None = ok,
    else the reason it was dropped); ``wait_room(vc)`` blocks while the link's queue
    for ``vc`` is too long, which back-pressures the client socket."""

    def __init__(self, path: str, send: Callable, wait_room: Callable, status: Callable[[], Frame],
                 flush: Callable[[], None]) -> None:
        self.path = path
        self._send = send
        self._flush = flush
        self._wait_room = wait_room
        self._status = status
        self.clients: list[_Client] = []
        self.counters: Counter[str] = Counter()

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        sock = trio.socket.from_stdlib_socket(bind_unix(self.path, socket.SOCK_SEQPACKET, 0o660))
        sock.listen(64)
        task_status.started()
        async with trio.open_nursery() as nursery:
            while True:
                conn, _ = await sock.accept()
                raw = socket.socket(fileno=conn.detach())  # plain non-blocking socket: sync sends
                raw.setblocking(False)
                raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
                raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
                nursery.start_soon(self._client, _Client(raw))

    async def _client(self, client: _Client) -> None:
        self.clients.append(client)
        buf = bytearray(_BUF)
        try:
            with client.sock:
                burst = 0
                while True:
                    try:
                        n = client.sock.recv_into(buf, 0, socket.MSG_TRUNC)
                    except BlockingIOError:
                        self._flush()  # one flush per burst of frames, not per frame
                        burst = 0
                        await trio.lowlevel.wait_readable(client.sock)
                        continue
                    except OSError:
                        return
                    if n == 0:
                        return
                    if n > len(buf):
                        self.counters["rx_oversized_frame"] += 1
                        self._reply(client, Frame(Op.ERROR, payload=f"frame of {n} bytes exceeds the "
                                                  f"{ULP_MAX_PAYLOAD}-byte limit".encode()))
                        continue
                    try:
                        frame = Frame.decode(memoryview(buf)[:n])
                    except DecodeError as exc:
                        self.counters[f"rx_bad_frame_{exc.field}"] += 1
                        self._reply(client, Frame(Op.ERROR, payload=str(exc).encode()))
                        continue
                    await self._handle(client, frame)
                    burst += 1
                    if burst >= BURST:
                        self._flush()
                        burst = 0
                        await trio.lowlevel.checkpoint()
        finally:
            self.clients.remove(client)

    async def _handle(self, client: _Client, frame: Frame) -> None:
        if frame.op is Op.SEND:
            await self._wait_room(frame.vc)
            why = self._send(frame.vc, frame.ula, frame.ethertype, frame.payload)
            if why:
                self.counters[f"tx_dropped_{why}"] += 1
                self._reply(client, Frame(Op.ERROR, frame.vc, frame.ethertype, frame.ula, why.encode()))
            else:
                self.counters["tx_messages"] += 1
        elif frame.op is Op.BIND:
            client.ethertypes.add(frame.ethertype)
            self._reply(client, self._status())
        elif frame.op is Op.UNBIND:
            client.ethertypes.discard(frame.ethertype)
        else:
            self.counters["rx_unexpected_op"] += 1
            self._reply(client, Frame(Op.ERROR, payload=f"op {frame.op.name} is not for clients".encode()))

    def _reply(self, client: _Client, frame: Frame) -> bool:
        try:
            client.sock.send(frame.encode(), socket.MSG_DONTWAIT)
            return True
        except BlockingIOError:
            self.counters["tx_client_full"] += 1
        except OSError:
            self.counters["tx_client_gone"] += 1
        return False

    def wants(self, ethertype: int) -> bool:
        return any(ethertype in c.ethertypes for c in self.clients)

    def deliver(self, msg: Message) -> None:
        frame = None
        delivered = False
        for client in self.clients:
            if msg.ethertype in client.ethertypes:
                frame = frame or Frame(Op.RECV, msg.vc, msg.ethertype, msg.s_ula, msg.payload).encode()
                try:
                    client.sock.send(frame, socket.MSG_DONTWAIT)
                    delivered = True
                except BlockingIOError:
                    self.counters["rx_dropped_client_full"] += 1
                except OSError:
                    self.counters["rx_dropped_client_gone"] += 1
        if delivered:
            self.counters["rx_messages"] += 1
        elif frame is None:
            self.counters["rx_dropped_no_binding"] += 1

    def broadcast_status(self) -> None:
        for client in self.clients:
            if client.ethertypes:
                self._reply(client, self._status())
