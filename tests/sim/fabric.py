"""A whole fabric (switch + endpoints) over in-memory lossy cables, for trio's virtual clock."""

from __future__ import annotations

import random

import trio

from daemons.endpoint.core import AdminResponse, Endpoint, MessageIn
from daemons.io.memory import MemoryCable
from daemons.io.runner import LinkRunner
from daemons.switch.core import Switch


class SimFabric:
    def __init__(self, n_endpoints: int, seed: int, *, broadcast=True, static=None, timers=None,
                 management_ports=(), **loss) -> None:
        self.rng = random.Random(seed)
        now = 0.0
        ports = list(range(1, n_endpoints + 1))
        kw = {"timers": timers} if timers else {}
        self.switch = Switch(1, ports, now, broadcast=broadcast, static=static, rng=random.Random(seed + 1),
                             management_ports=management_ports, **kw)
        self.endpoints = [Endpoint(p, now, rng=random.Random(seed + 10 + p), **kw) for p in ports]
        self.handlers: dict[int, object] = {}  # endpoint index -> callable(Message)
        self.cables = [MemoryCable(random.Random(seed + 100 + p), **loss) for p in ports]
        self.inbox: list[list] = [[] for _ in ports]
        self.admin: list[list] = [[] for _ in ports]
        self.sw_runners = {}
        self.ep_runners = []
        for p, ep, cable in zip(ports, self.endpoints, self.cables):
            self.sw_runners[p] = LinkRunner(
                self.switch.ports[p].link, cable.ends[0],
                on_input=lambda now, p=p: self.switch.process(p, now), after=self._flush_switch)
            self.ep_runners.append(LinkRunner(
                ep.link, cable.ends[1], on_input=lambda now, i=p - 1: self._ep_input(i, now),
                after=lambda now, i=p - 1: self.ep_runners[i].flush(now),
                timer=ep.timer, handle_timer=ep.handle_timer))

    def _flush_switch(self, now: float) -> None:
        for r in self.sw_runners.values():
            r.flush(now)

    def _ep_input(self, i: int, now: float) -> None:
        ep = self.endpoints[i]
        ep.process(now)
        for ev in ep.events():
            if isinstance(ev, MessageIn):
                handler = self.handlers.get(i)
                if handler is not None:
                    handler(ev.message)
                else:
                    self.inbox[i].append(ev.message)
            elif isinstance(ev, AdminResponse):
                self.admin[i].append(ev.admin)

    async def run(self, nursery: trio.Nursery) -> None:
        for c in self.cables:
            nursery.start_soon(c.run)
        for r in list(self.sw_runners.values()) + self.ep_runners:
            nursery.start_soon(r.run)

    async def wait_ready(self, timeout: float = 10.0) -> None:
        with trio.fail_after(timeout):
            while not all(ep.ula and ep.link.up for ep in self.endpoints):
                await trio.sleep(0.01)

    def send(self, i: int, vc: int, d_ula: bytes, ethertype: int, payload: bytes) -> bool:
        ok = self.endpoints[i].send(vc, d_ula, ethertype, payload)
        self.ep_runners[i].flush(trio.current_time())
        return ok

    async def ask(self, i: int, command: int, args: bytes = b"", **kw) -> list:
        """Send an Admin request from endpoint i; the responses that came back."""
        self.admin[i].clear()
        req = self.endpoints[i].admin_request(command, args, **kw)
        self.ep_runners[i].flush(trio.current_time())
        await trio.sleep(0.2)
        return [a for a in self.admin[i] if a.xid == req.xid]
