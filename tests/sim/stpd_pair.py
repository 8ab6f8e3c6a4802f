"""Two real Stpd daemons in one trio run, each on a ULP socket of a stand-in gsnd that
joins them back to back, each with its real API socket: end-to-end API tests without
namespaces.
Blocking StClient calls run in threads (``call``)."""

from __future__ import annotations

import socket
import threading
from contextlib import asynccontextmanager
from ipaddress import IPv4Address

import trio

from daemons.constants import ULP_CLIENT_SOCKET_BYTES, ULP_MAX_PAYLOAD
from daemons.wire.ulp import HEADER, Frame, Op
from stpd.core import Params, Timers
from stpd.daemon import Stpd, StpdConfig

ULAS = [bytes([2, 0, 0, 0, 0, 1]), bytes([2, 0, 0, 0, 0, 2])]
PEERS = {IPv4Address("192.0.2.1"): ULAS[0], IPv4Address("192.0.2.2"): ULAS[1]}


class Gsnds:
    """Stands in for the two hosts' gsnds: a ULP socket per daemon (the real protocol:
    BIND answered by STATUS with the daemon's ULA), every SEND forwarded in order to
    the other daemon as a RECV from the sender's ULA.  The daemons run their real ULP
    path (``ulp_session``, stpd.ulpio) on it; ``frames[i]`` counts daemon i's SENDs."""

    def __init__(self, tmp) -> None:
        self.paths = [str(tmp / f"gsnd{i}.ulp") for i in range(2)]
        self.conns: list[trio.socket.SocketType | None] = [None, None]
        self.frames = [0, 0]
        self.up = [trio.Event(), trio.Event()]

    async def serve(self, i: int, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        lsock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        await lsock.bind(self.paths[i])
        lsock.listen(1)
        task_status.started()
        conn, _ = await lsock.accept()
        for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            conn.setsockopt(socket.SOL_SOCKET, opt, ULP_CLIENT_SOCKET_BYTES)
        self.conns[i] = conn
        buf = bytearray(ULP_MAX_PAYLOAD + HEADER.size + 1)
        while True:
            n = await conn.recv_into(buf)
            if n == 0:
                return
            frame = Frame.decode(memoryview(buf)[:n])
            if frame.op is Op.BIND:
                await conn.send(Frame(Op.STATUS, 1, ula=ULAS[i]).encode())
                self.up[i].set()
            elif frame.op is Op.SEND:
                self.frames[i] += 1
                await self.up[1 - i].wait()
                peer = self.conns[1 - i]
                assert peer is not None
                await peer.send(Frame(Op.RECV, frame.vc, frame.ethertype, ULAS[i], frame.payload).encode())


@asynccontextmanager
async def stpd_pair(tmp, **cfg):
    """Yields (daemons, api_paths); daemon i is 192.0.2.(i+1).  ``daemons[i].gsnds`` is
    the Gsnds both talk through."""
    timers = cfg.pop("timers", Timers(tx=3.0, rx=3.0))
    daemons, paths = [], []
    gsnds = Gsnds(tmp)
    async with trio.open_nursery() as nursery:
        for i in range(2):
            await nursery.start(gsnds.serve, i)
        for i in range(2):
            path = str(tmp / f"api{i}.sock")
            d = Stpd(StpdConfig(ulp_path=gsnds.paths[i], api_path=path, peers=PEERS,
                                params=Params(bufsize=16, max_stu=16, max_block=18), timers=timers, **cfg))
            d.gsnds = gsnds  # type: ignore[attr-defined]
            daemons.append(d)
            paths.append(path)
        for d in daemons:
            await nursery.start(d.run)
        for ev in gsnds.up:
            await ev.wait()
        while any(d.ula is None for d in daemons):
            await trio.sleep(0.01)
        try:
            yield daemons, paths
        finally:
            nursery.cancel_scope.cancel()


async def call(fn, *args, **kw):
    """A blocking client call from the trio thread."""
    return await trio.to_thread.run_sync(lambda: fn(*args, **kw))


class PairThread:
    """``stpd_pair`` running in a thread of its own, for synchronous tests (Hypothesis):
    ``with PairThread(tmp) as p: p.paths ...; p.inside(fn)`` runs ``fn(daemons)`` in trio."""

    def __init__(self, tmp, **cfg) -> None:
        self.tmp, self.cfg = tmp, cfg
        self.ready = threading.Event()
        self.error: BaseException | None = None

    async def _main(self) -> None:
        self.token = trio.lowlevel.current_trio_token()
        self.stop = trio.Event()
        async with stpd_pair(self.tmp, **self.cfg) as (daemons, paths):
            self.daemons, self.paths = daemons, paths
            self.ready.set()
            await self.stop.wait()

    def _thread(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # reported by __exit__
            self.error = exc
        finally:
            self.ready.set()

    def __enter__(self) -> PairThread:
        self.thread = threading.Thread(target=self._thread, daemon=True)
        self.thread.start()
        self.ready.wait(30)
        if self.error is not None:
            raise self.error
        return self

    def inside(self, fn):
        return trio.from_thread.run_sync(lambda: fn(self.daemons), trio_token=self.token)

    def __exit__(self, *exc) -> None:
        trio.from_thread.run_sync(self.stop.set, trio_token=self.token)
        self.thread.join(30)
        if self.error is not None:
            raise self.error
