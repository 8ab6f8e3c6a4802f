"""Two real Stpd daemons in one trio run, their ULP clients joined back to back
(no gsnd), each with its real API socket: end-to-end API tests without namespaces.
Blocking StClient calls run in threads (``call``)."""

from __future__ import annotations

import threading
from collections import deque
from contextlib import asynccontextmanager
from ipaddress import IPv4Address

import trio

from stpd.core import Params, Timers
from stpd.daemon import Stpd, StpdConfig

ULAS = [bytes([2, 0, 0, 0, 0, 1]), bytes([2, 0, 0, 0, 0, 2])]
PEERS = {IPv4Address("192.0.2.1"): ULAS[0], IPv4Address("192.0.2.2"): ULAS[1]}


class Wire:
    """Stands in for AsyncUlpClient: frames go to the other daemon's core, in order,
    from a pump task (never re-entering a core from inside its own step)."""

    def __init__(self, src: bytes) -> None:
        self.src = src
        self.peer: Stpd | None = None
        self.queue: deque = deque()
        self.wake = trio.Event()
        self.frames = 0

    def send_nowait(self, ula: bytes, *parts, vc: int = 1, ethertype: int) -> None:
        self.queue.append(b"".join(bytes(p) for p in parts))  # a copy, as sendmsg makes
        self.frames += 1
        self.wake.set()

    async def pump(self) -> None:
        while True:
            await self.wake.wait()
            self.wake = trio.Event()
            while self.queue:
                self.peer.core.receive(self.src, self.queue.popleft(), trio.current_time())
                self.peer.runner.step()
                await trio.lowlevel.checkpoint()


@asynccontextmanager
async def stpd_pair(tmp, **cfg):
    """Yields (daemons, api_paths); daemon i is 192.0.2.(i+1)."""
    timers = cfg.pop("timers", Timers(tx=3.0, rx=3.0))
    daemons, paths = [], []
    async with trio.open_nursery() as nursery:
        for i in range(2):
            path = str(tmp / f"api{i}.sock")
            d = Stpd(StpdConfig(ulp_path=str(tmp / "no-gsnd.ulp"), api_path=path, peers=PEERS,
                                params=Params(bufsize=16, max_stu=16, max_block=18), timers=timers, **cfg))
            d.ula = ULAS[i]
            daemons.append(d)
            paths.append(path)
        for i, d in enumerate(daemons):
            d.client = Wire(ULAS[i])
            d.client.peer = daemons[1 - i]
            nursery.start_soon(d.client.pump)
            await nursery.start(d.run)  # its ulp_session never reaches gsnd: d.client stays the Wire
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
