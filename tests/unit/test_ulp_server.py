"""gsnd's ULP socket server in-process over real Unix SEQPACKET sockets: malformed
frames (the empty one included), the payload limit, client and binding caps,
fd exhaustion on accept, and receive buffers sized to need."""

from __future__ import annotations

import os
import resource
import socket
from contextlib import asynccontextmanager

import trio

from daemons import constants as C
from daemons.io.ulp import BadFrame, UlpServer
from daemons.wire.errors import DecodeError
from daemons.wire.ulp import HEADER, Frame, Op

ULA = bytes.fromhex("020000000002")


@asynccontextmanager
async def server(tmp_path):
    sent = []

    def send(vc, ula, ethertype, payload):
        sent.append((vc, ula, ethertype, len(payload)))
        return None

    async def wait_room(vc):
        pass

    srv = UlpServer(str(tmp_path / "gsn0.ulp"), send, wait_room, lambda: Frame(Op.STATUS, 1, 0, ULA), lambda: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(srv.serve)
        srv.sent = sent
        yield srv
        nursery.cancel_scope.cancel()


async def connect(srv, *, bufsize: int | None = None) -> trio.socket.SocketType:
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    if bufsize:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, bufsize)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, bufsize)
    await sock.connect(srv.path)
    return sock


async def recv_frame(sock, timeout=5.0) -> Frame | None:
    """The next frame, or None when gsnd closed the connection."""
    with trio.fail_after(timeout):
        data = await sock.recv(C.ULP_MAX_PAYLOAD + HEADER.size + 1)
    return Frame.decode(data) if data else None


async def bind(sock, ethertype=0x88B5) -> Frame:
    await sock.send(Frame(Op.BIND, ethertype=ethertype).encode())
    return await recv_frame(sock)


async def test_empty_frame_is_a_malformed_frame_not_end_of_connection(tmp_path):
    async with server(tmp_path) as srv:
        sock = await connect(srv)
        await sock.send(b"")
        err = await recv_frame(sock)
        assert err is not None and err.op is Op.ERROR, "gsnd took the empty frame for EOF"
        assert b"empty" in err.payload
        assert (await bind(sock)).op is Op.STATUS  # the connection lives on
        assert srv.counters["rx_bad_frame_empty"] == 1
        sock.close()
        with trio.fail_after(5):
            while srv.clients:  # a real close is still EOF
                await trio.sleep(0.01)


async def test_malformed_frames_counted_by_their_field(tmp_path):
    async with server(tmp_path) as srv:
        sock = await connect(srv)
        for raw in (b"\x02\x00", bytes([0xEE]) + bytes(9), Frame(Op.SEND, 3, 0x88B5, ULA).encode()[:1] + b"\x09"
                    + bytes(8)):
            await sock.send(raw)
            err = await recv_frame(sock)
            assert err is not None and err.op is Op.ERROR
        assert [srv.counters[b] for b in BadFrame] == [0, 1, 1, 1, 0]  # EMPTY SHORT OP VC OTHER
        assert BadFrame.of(DecodeError("new", 0, "x")) is BadFrame.OTHER
        sock.close()


async def test_payload_limit_is_exact_and_refusal_names_it(tmp_path):
    async with server(tmp_path) as srv:
        sock = await connect(srv, bufsize=C.ULP_CLIENT_SOCKET_BYTES)
        assert (await bind(sock)).op is Op.STATUS
        await sock.send(Frame(Op.SEND, 3, 0x88B5, ULA, bytes(C.ULP_MAX_PAYLOAD)).encode())
        await sock.send(Frame(Op.SEND, 3, 0x88B5, ULA, bytes(C.ULP_MAX_PAYLOAD + 1)).encode())
        err = await recv_frame(sock)
        assert err.op is Op.ERROR and str(C.ULP_MAX_PAYLOAD).encode() in err.payload, err
        assert srv.sent == [(3, ULA, 0x88B5, C.ULP_MAX_PAYLOAD)]
        assert srv.counters["rx_oversized_frame"] == 1


async def test_clients_beyond_the_cap_are_refused_and_counted(tmp_path):
    async with server(tmp_path) as srv:
        socks = [await connect(srv) for _ in range(C.ULP_MAX_CLIENTS)]
        for s in socks:
            assert (await bind(s)).op is Op.STATUS
        plain = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        plain.connect(srv.path)  # no checkpoint: gsnd accepts after the BIND is queued
        plain.send(Frame(Op.BIND, ethertype=0x88B5).encode())  # unread when refused
        extra = trio.socket.from_stdlib_socket(plain)
        err = await recv_frame(extra)
        assert err.op is Op.ERROR and b"too many" in err.payload
        assert await recv_frame(extra) is None  # and closed
        assert srv.counters["refused_client_cap"] == 1
        assert len(srv.clients) == C.ULP_MAX_CLIENTS
        socks.pop().close()
        with trio.fail_after(5):
            while len(srv.clients) == C.ULP_MAX_CLIENTS:
                await trio.sleep(0.01)
        again = await connect(srv)
        assert (await bind(again)).op is Op.STATUS


async def test_bindings_per_client_are_capped(tmp_path):
    async with server(tmp_path) as srv:
        sock = await connect(srv)
        for et in range(C.ULP_MAX_BINDINGS):
            assert (await bind(sock, 0x9000 + et)).op is Op.STATUS
        err = await bind(sock, 0x8000)
        assert err.op is Op.ERROR and str(C.ULP_MAX_BINDINGS).encode() in err.payload
        assert (await bind(sock, 0x9000)).op is Op.STATUS  # binding one it has is fine
        assert srv.counters["refused_binding_cap"] == 1


async def test_accept_without_fds_refuses_and_keeps_serving(tmp_path):
    async with server(tmp_path) as srv:
        first = await connect(srv)
        assert (await bind(first)).op is Op.STATUS
        waiting = [trio.socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) for _ in range(3)]
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        in_use = max(int(fd) for fd in os.listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 1, hard))
        fillers = []
        try:
            while True:  # take every free fd below the limit
                try:
                    fillers.append(os.open("/dev/null", os.O_RDONLY))
                except OSError:
                    break
            for s in waiting:
                await s.connect(srv.path)
            for s in waiting:  # each refused with a reason, and closed
                err = await recv_frame(s)
                assert err.op is Op.ERROR and b"file descriptors" in err.payload
                assert await recv_frame(s) is None
            assert srv.counters["refused_no_fds"] >= 3
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            for fd in fillers:
                os.close(fd)
        assert (await bind(first)).op is Op.STATUS  # still serving
        late = await connect(srv)
        assert (await bind(late)).op is Op.STATUS


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


async def test_idle_clients_do_not_pin_receive_buffers(tmp_path):
    async with server(tmp_path) as srv:
        first = await connect(srv)
        assert (await bind(first)).op is Op.STATUS  # the shared buffer exists from here
        before = _rss()
        socks = [await connect(srv) for _ in range(50)]
        for s in socks:
            assert (await bind(s)).op is Op.STATUS
        grown = _rss() - before
        assert grown < 16 << 20, f"50 idle clients cost {grown >> 20} MiB of RSS"


async def test_client_library_connections_share_one_receive_buffer(tmp_path):
    from daemons.ulpclient import AsyncUlpClient

    async with server(tmp_path) as srv:
        first = await AsyncUlpClient.connect(srv.path)
        await first.bind(0x88B5)
        before = _rss()
        clients = [await AsyncUlpClient.connect(srv.path) for _ in range(30)]
        for c in clients:
            assert (await c.bind(0x88B5)).op is Op.STATUS
        grown = _rss() - before
        assert grown < 16 << 20, f"30 client connections cost {grown >> 20} MiB of RSS"
        for c in [first, *clients]:
            c.sock.close()


async def test_a_client_reading_slowly_from_a_full_socket_is_not_taken_for_stalled(tmp_path):
    """poll() calls a Unix socket writable only when 3/4 of its buffer is free, so
    gsnd must see the client's progress by trying, not by waiting for that."""
    from daemons.wire.message import Message

    async with server(tmp_path) as srv:
        sock = await connect(srv)
        assert (await bind(sock)).op is Op.STATUS
        n, size = 400, 65536  # 26 MB: more than gsnd's socket to the client holds
        for k in range(n):
            srv.deliver(Message(1, ULA, bytes(6), 0x88B5, k.to_bytes(4, "big") * (size // 4)), trio.current_time())
        assert srv.delivery.backlog(srv.clients[0]) > 0
        got = []
        t_end = trio.current_time() + 2.5 * C.ULP_HOLD_S
        while trio.current_time() < t_end:  # slow: ~1.3 MB/s, never drains 3/4 of the buffer
            got.append(await recv_frame(sock))
            await trio.sleep(0.05)
        while len(got) < n:
            got.append(await recv_frame(sock))
        assert [int.from_bytes(f.payload[:4], "big") for f in got] == list(range(n))
        assert not any(k.startswith("rx_dropped") for k in srv.delivery.counters), srv.delivery.counters


async def test_a_client_cannot_forge_drop_notices(tmp_path):
    from daemons.wire.ulp import DropNotice, DropReason

    async with server(tmp_path) as srv:
        sock = await connect(srv)
        forged = DropNotice(DropReason.NOT_READING, 1, 0x88B5, 99).encode()
        await sock.send(Frame(Op.SEND, 0, C.ETHERTYPE_OUI_EXTENDED, ULA, forged).encode())
        err = await recv_frame(sock)
        assert err.op is Op.ERROR and b"reserved" in err.payload
        other = C.ETHERTYPE_OUI_EXTENDED, b"\x00\x00\x00\x12\x34payload"  # someone else's protocol: fine
        await sock.send(Frame(Op.SEND, 0, other[0], ULA, other[1]).encode())
        assert (await bind(sock)).op is Op.STATUS
        assert srv.sent == [(0, ULA, C.ETHERTYPE_OUI_EXTENDED, len(other[1]))]


def _as_nobody(path: str, frames: list[Frame]) -> list[tuple]:
    """Connect as uid 65534 (a member of the socket's group), send ``frames`` one by
    one, each answered by one frame: [(op name, ethertype, payload)]."""
    from tests.asuser import as_user

    def run():
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
            s.settimeout(5)
            s.connect(path)
            out = []
            for f in frames:
                s.send(f.encode())
                got = Frame.decode(s.recv(C.ULP_MAX_PAYLOAD + HEADER.size + 1))
                out.append((got.op.name, got.ethertype, bytes(got.payload)))
            return out

    return as_user(run)


async def test_ip_ethertypes_are_bound_and_sent_only_by_root_or_gsnds_user():
    """Issue 12: any member of the socket's group could bind 0x0800 and read every IP
    packet on the interface (or forge HARP replies).  IP's EtherTypes now need the
    peer uid 0 or gsnd's own; ST, pktway and other EtherTypes stay open."""
    from tests.asuser import shared_dir, to_group

    with shared_dir() as d:
        async with server(d) as srv:
            to_group(srv.path)
            frames = [Frame(Op.BIND, ethertype=et) for et in sorted(C.ULP_PRIVILEGED_ETHERTYPES)]
            frames += [Frame(Op.SEND, 1, C.ETHERTYPE_ARP, ULA, b"forged HARP reply"),
                       Frame(Op.BIND, ethertype=C.ETHERTYPE_ST)]
            got = await trio.to_thread.run_sync(_as_nobody, srv.path, frames)
            for (op, et, why), want in zip(got[:3], sorted(C.ULP_PRIVILEGED_ETHERTYPES)):
                assert (op, et) == ("ERROR", want)
                assert why == f"uid 65534 may not bind EtherType 0x{want:04X} (IP's: root or gsnd's own user " \
                              f"only)".encode()
            assert got[3] == ("ERROR", C.ETHERTYPE_ARP, b"uid 65534 may not send EtherType 0x0806 (IP's: root or "
                                                        b"gsnd's own user only)")
            assert got[4][0] == "STATUS"  # ST: any member of the group
            assert srv.sent == []
            assert (srv.counters["refused_bind_unprivileged"], srv.counters["tx_refused_unprivileged"]) == (3, 1)
            assert not srv.wants(C.ETHERTYPE_IPV4)
            # root (the tests' user; gsnd's own under systemd is the other allowed one)
            sock = await connect(srv)
            assert (await bind(sock, C.ETHERTYPE_IPV4)).op is Op.STATUS
            assert srv.wants(C.ETHERTYPE_IPV4)
            await sock.send(Frame(Op.SEND, 1, C.ETHERTYPE_ARP, ULA, b"real").encode())
            assert (await bind(sock, C.ETHERTYPE_ARP)).op is Op.STATUS
            assert srv.sent == [(1, ULA, C.ETHERTYPE_ARP, 4)]


def test_unread_probe_is_the_bytes_the_client_has_not_read():
    """The delivery bound judges reading by SIOCOUTQ of gsnd's end of the socket."""
    import socket as _socket

    from daemons.io.ulp import UlpServer, _Client

    a, b = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    with a, b:
        c = _Client.__new__(_Client)
        c.sock = a
        assert UlpServer._unread(c) == 0
        a.send(b"x" * 50_000)
        a.send(b"y" * 50_000)
        both = UlpServer._unread(c)
        assert both >= 100_000
        b.recv(60_000)
        assert 50_000 <= UlpServer._unread(c) < both
        b.recv(60_000)
        assert UlpServer._unread(c) == 0
    assert UlpServer._unread(c) is None  # closed: no answer, not an exception


def test_a_drained_burst_stops_after_max_bytes_so_the_client_reads_again_soon():
    """A client handles each burst before reading again: 256 ST DATA frames (16 MiB)
    in one burst kept stpd from reading for as long as they took to write."""
    import socket as _socket

    from daemons.ulpclient import DRAIN_MAX_BYTES, AsyncUlpClient

    a, b = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    b.setblocking(False)
    with a, b:
        a.setsockopt(_socket.SOL_SOCKET, _socket.SO_SNDBUF, 8 << 20)
        frame = Frame(Op.RECV, 3, 0x8181, bytes(6), bytes(400_000)).encode()
        for _ in range(5):
            a.send(frame)
        client = AsyncUlpClient(b)
        first = client.drain()
        assert len(first) == 3 and DRAIN_MAX_BYTES == 1 << 20  # 800 KB < 1 MiB <= 1.2 MB
        assert len(client.drain()) == 2 and client.drain() == []
        a.send(frame)
        assert len(client.drain(max_bytes=1)) == 1  # always at least one


def test_the_blocking_client_keeps_each_recvs_own_timeout(tmp_path):
    """recv() sets the socket's timeout only when it changes (a syscall each time
    otherwise); each call still waits exactly as long as it asks."""
    import time

    from daemons.ulpclient import UlpClient

    path = str(tmp_path / "u.sock")
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    lsock.bind(path)
    lsock.listen(1)
    with lsock, UlpClient(path) as c:
        peer, _ = lsock.accept()
        with peer:
            frame = Frame(Op.RECV, 1, 0x88B5, bytes(6), b"x")
            for timeout in (0.05, 0.05, None, 0.02):
                if timeout is None:
                    peer.send(frame.encode())
                    assert c.recv(timeout) == frame and c.sock.gettimeout() is None
                    continue
                t0 = time.monotonic()
                try:
                    c.recv(timeout)
                    raise AssertionError("nothing was sent")
                except TimeoutError:
                    pass
                assert time.monotonic() - t0 >= timeout * 0.9 and c.sock.gettimeout() == timeout
