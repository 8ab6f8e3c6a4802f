"""Several switches cabled to each other and to endpoints, over in-memory cables on
trio's virtual clock (the many-switch sibling of tests/sim/fabric.py)."""

from __future__ import annotations

import random

import trio

from daemons.endpoint.core import AdminResponse, Endpoint, MessageIn
from daemons.io.memory import MemoryCable
from daemons.io.runner import LinkRunner
from daemons.switch.core import Switch
from daemons.switch.driver import AgentTimer

End = tuple[int, int]  # (switch id, port)


class SimMesh:
    """``links``: inter-switch cables ((a, pa), (b, pb)); ``hosts``: (switch, port) of
    each endpoint, endpoint i on hosts[i]."""

    def __init__(self, links: list[tuple[End, End]], hosts: list[End], seed: int = 1,
                 management: tuple[End, ...] = (), ids: dict[int, int] | None = None, **loss) -> None:
        """``ids``: a switch's configured id when it is not its key (two switches may share one)."""
        self.rng = random.Random(seed)
        ports: dict[int, set[int]] = {}
        fabric: dict[int, set[int]] = {}
        for a, b in links:
            for s, p in (a, b):
                ports.setdefault(s, set()).add(p)
                fabric.setdefault(s, set()).add(p)
        cable_ids: dict[int, dict[int, int]] = {}  # both ends of a cable share its id
        for k, (a, b) in enumerate(links):
            for s, p in (a, b):
                cable_ids.setdefault(s, {})[p] = 1 + k
        for i, (s, p) in enumerate(hosts):
            ports.setdefault(s, set()).add(p)
            cable_ids.setdefault(s, {})[p] = 100_000 + i
        self.switches = {s: Switch((ids or {}).get(s, s), sorted(ps), 0.0, rng=random.Random(seed * 1000 + s),
                                   fabric_ports=sorted(fabric.get(s, ())), cable_ids=cable_ids[s],
                                   management_ports=[p for t, p in management if t == s])
                         for s, ps in sorted(ports.items())}
        self.endpoints = [Endpoint(100_000 + i, 0.0, rng=random.Random(seed * 7919 + i)) for i in range(len(hosts))]
        self.inbox: list[list] = [[] for _ in hosts]
        self.admin: list[list] = [[] for _ in hosts]
        self.runners: dict[int, list[LinkRunner]] = {s: [] for s in self.switches}
        self.timers = {s: AgentTimer(sw, lambda now, s=s: self._flush(s, now)) for s, sw in self.switches.items()}
        self.ep_runners: list[LinkRunner] = []
        self.cables: dict[tuple, MemoryCable] = {}
        for a, b in links:
            cable = self.cables[(a, b)] = MemoryCable(random.Random(self.rng.random()), **loss)
            for end, (s, p) in zip(cable.ends, (a, b)):
                self._switch_port(s, p, end)
        for i, (s, p) in enumerate(hosts):
            cable = self.cables[("host", i)] = MemoryCable(random.Random(self.rng.random()), **loss)
            self._switch_port(s, p, cable.ends[0])
            ep = self.endpoints[i]
            self.ep_runners.append(LinkRunner(
                ep.link, cable.ends[1], on_input=lambda now, i=i: self._ep_input(i, now),
                after=lambda now, i=i: self.ep_runners[i].flush(now), timer=ep.timer, handle_timer=ep.handle_timer))

    def _switch_port(self, s: int, p: int, end) -> None:
        sw = self.switches[s]
        self.runners[s].append(LinkRunner(sw.ports[p].link, end, on_input=lambda now: sw.process(p, now),
                                          after=lambda now: self._flush(s, now)))

    def _flush(self, s: int, now: float) -> None:
        for r in self.runners[s]:
            r.flush(now)
        self.timers[s].poke()

    def _ep_input(self, i: int, now: float) -> None:
        ep = self.endpoints[i]
        ep.process(now)
        for ev in ep.events():
            if isinstance(ev, MessageIn):
                self.inbox[i].append(ev.message)
            elif isinstance(ev, AdminResponse):
                self.admin[i].append(ev.admin)

    async def run(self, nursery: trio.Nursery) -> None:
        for c in self.cables.values():
            nursery.start_soon(c.run)
        for rs in self.runners.values():
            for r in rs:
                nursery.start_soon(r.run)
        for t in self.timers.values():
            nursery.start_soon(t.run)
        for r in self.ep_runners:
            nursery.start_soon(r.run)

    def cable(self, a: End, b: End) -> MemoryCable:
        return self.cables.get((a, b)) or self.cables[(b, a)]

    def managers_idle(self) -> bool:
        return all(sw.agent.phase == "idle" and sw.agent.due is None for sw in self.switches.values())

    async def converge(self, timeout: float = 30.0) -> float:
        """Wait until every endpoint has a ULA and every switch's agent is idle with a map
        that holds every switch reachable; returns the virtual time it took."""
        t0 = trio.current_time()
        with trio.fail_after(timeout):
            while not (all(ep.ula and ep.link.up for ep in self.endpoints) and self.managers_idle()
                       and all(sw.agent.map is not None for sw in self.switches.values())):
                await trio.sleep(0.01)
        return trio.current_time() - t0

    def send(self, i: int, d_ula: bytes, payload: bytes, vc: int = 1, ethertype: int = 0x88B5) -> bool:
        ok = self.endpoints[i].send(vc, d_ula, ethertype, payload)
        self.ep_runners[i].flush(trio.current_time())
        return ok

    async def ask(self, i: int, command: int, args: bytes = b"", **kw) -> list:
        """An Admin request from endpoint i; the responses that came back within 0.2 s."""
        req = self.endpoints[i].admin_request(command, args, **kw)
        self.ep_runners[i].flush(trio.current_time())
        await trio.sleep(0.2)
        return [a for a in self.admin[i] if a.xid == req.xid]


def true_next_hops(links, switches):
    """Shortest-path next hops computed here from the cabling itself (not the agent's map)."""
    adj = {s: [] for s in switches}
    for (a, pa), (b, pb) in links:
        adj[a].append((b, pa))
        adj[b].append((a, pb))
    out = {}
    for t in switches:
        dist, frontier = {t: 0}, [t]
        while frontier:
            nxt = []
            for s in frontier:
                for n, _ in adj[s]:
                    if n not in dist:
                        dist[n] = dist[s] + 1
                        nxt.append(n)
            frontier = nxt
        for s in switches:
            if s != t and s in dist:
                out[(s, t)] = (dist[s], {p for n, p in adj[s] if dist.get(n) == dist[s] - 1})
    return out


def random_fabric(rng, n, extra):
    """A connected random fabric: a random tree plus ``extra`` more cables; ports from 10."""
    nxt = {s: 10 for s in range(1, n + 1)}
    links = []

    def cable(a, b):
        links.append(((a, nxt[a]), (b, nxt[b])))
        nxt[a] += 1
        nxt[b] += 1
    for s in range(2, n + 1):
        cable(s, rng.randrange(1, s))
    for _ in range(extra):
        a, b = rng.sample(range(1, n + 1), 2)
        cable(a, b)
    return links
