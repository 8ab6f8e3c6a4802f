"""AsyncUlpClient's send backlog: bounded, and a socket that fails (gsnd closed it) drops
and counts SENDs instead of raising out of the flush task, which would end the daemon
that owns the session (pktwayd, pw0)."""

from __future__ import annotations

import socket

import trio

from daemons import ulpclient
from daemons.ulpclient import BACKLOG_FULL, SOCKET_ERROR, AsyncUlpClient
from daemons.wire.ulp import Frame, Op

ULA = bytes(6)


def _pair() -> tuple[AsyncUlpClient, socket.socket]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    a.setblocking(False)
    return AsyncUlpClient(a), b


def test_a_send_after_gsnd_closed_is_dropped_and_counted_not_raised():
    client, gsnd = _pair()
    gsnd.close()
    client.send_nowait(ULA, b"x" * 100, ethertype=0x88B5)
    client.send_nowait(ULA, b"y", ethertype=0x88B5)
    assert isinstance(client.error, OSError)
    assert dict(client.drops) == {SOCKET_ERROR: 2}
    client.sock.close()


def test_the_backlog_is_bounded(monkeypatch):
    monkeypatch.setattr(ulpclient, "ULP_CLIENT_BACKLOG_BYTES", 1 << 20)
    client, gsnd = _pair()  # gsnd reads nothing: the socket fills, then the backlog
    payload = b"z" * 60_000
    for _ in range(200):
        client.send_nowait(ULA, payload, ethertype=0x88B5)
    assert client.drops[BACKLOG_FULL] > 0
    assert 0 < client._backlog_bytes <= 1 << 20
    queued = len(client._backlog)
    # gsnd reads again: everything queued arrives, in order, and nothing beyond it
    got = 0

    async def main():
        nonlocal got
        with trio.move_on_after(10):
            async with trio.open_nursery() as n:
                n.start_soon(client.flush)
                gsnd.setblocking(False)
                while client._backlog or got < 1:
                    try:
                        frame = Frame.decode(gsnd.recv(1 << 17))
                        assert frame.op is Op.SEND and frame.payload == payload
                        got += 1
                    except BlockingIOError:
                        await trio.sleep(0.001)
    trio.run(main)
    assert not client._backlog and client._backlog_bytes == 0 and queued > 0
    gsnd.close()
    client.sock.close()


def test_flush_loop_ends_quietly_when_gsnd_goes_away_with_a_backlog():
    client, gsnd = _pair()
    for _ in range(400):  # more than the socket holds
        client.send_nowait(ULA, b"q" * 60_000, ethertype=0x88B5)
    assert client._backlog

    async def main():
        async with trio.open_nursery() as n:
            n.start_soon(client.flush_loop)
            await trio.sleep(0.01)
            gsnd.close()  # flush_loop's next send fails: it must return, not raise
    trio.run(main)
    assert client.error is not None and not client._backlog
    assert client.drops[SOCKET_ERROR] > 0
    client.sock.close()


def test_ulp_session_reconnects_after_gsnd_closed_it(tmp_path):
    """A session whose gsnd closed the socket connects again, and the process (here
    the trio run) goes on."""
    path = str(tmp_path / "ulp.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv.bind(path)
    srv.listen()
    srv.setblocking(False)
    clients: list[AsyncUlpClient | None] = []

    async def gsnd():
        for _ in range(2):  # two connections: the second proves the reconnect
            await trio.lowlevel.wait_readable(srv)
            conn, _ = srv.accept()
            conn.settimeout(5)
            assert Frame.decode(conn.recv(1 << 16)).op is Op.BIND
            conn.send(Frame(Op.STATUS, 1, 0x88B5, ULA).encode())
            while not clients or clients[-1] is None:
                await trio.sleep(0.001)
            clients[-1].send_nowait(ULA, b"q" * 60_000, ethertype=0x88B5)
            conn.close()  # gone: whatever the client sends next fails

    async def main():
        async with trio.open_nursery() as n:
            n.start_soon(gsnd)
            n.start_soon(lambda: ulpclient.ulp_session(
                path, 0x88B5, on_client=clients.append, on_status=lambda ula: None,
                on_frame=lambda f, t: None, after_burst=lambda: None, reconnect=0.01))
            with trio.fail_after(10):
                while sum(c is not None for c in clients) < 2:
                    await trio.sleep(0.005)
            n.cancel_scope.cancel()
    trio.run(main)
    srv.close()
    assert sum(c is not None for c in clients) == 2
