"""HARP on trio's virtual clock: a server and 3 clients for two virtual hours on a
non-broadcast fabric, and plain broadcast resolution on a broadcast fabric."""

from ipaddress import IPv4Address as A, IPv4Network, IPv6Network, ip_address

import trio

from daemons.constants import ETHERTYPE_ARP, ULA_HARP_SERVER
from daemons.link.link import Timers as LinkTimers
from harpd.core import Gone, HarpCore, LisConfig, Phase, Resolved, Unresolved
from daemons.runtime.corerunner import CoreRunner, drain
from tests.sim.fabric import SimFabric

NET = IPv4Network("192.0.2.0/24")
NET6, LL = IPv6Network("2001:db8::/64"), IPv6Network("fe80::/64")
MIN = 60.0
SLOW_LINK = LinkTimers(keepalive=10.0, dead_interval=30.0)


class Hosts:
    def __init__(self, fab: SimFabric, nursery: trio.Nursery, v6: bool = False) -> None:
        self.fab, self.nursery, self.v6 = fab, nursery, v6
        self.cores: dict[int, HarpCore] = {}
        self.scopes: dict[int, trio.CancelScope] = {}
        self.events: dict[int, list] = {}
        self.runners: dict[int, CoreRunner] = {}

    def _deliver(self, i: int, m) -> None:
        if m.ethertype == ETHERTYPE_ARP and i in self.runners:
            self.cores[i].receive(m.s_ula, m.payload, trio.current_time())
            self.runners[i].step()

    def resolve(self, i: int, ip: str) -> None:
        self.cores[i].resolve(ip_address(ip), trio.current_time())
        self.runners[i].step()

    def start(self, i: int) -> HarpCore:
        fab = self.fab
        lises = [LisConfig(NET)] + ([LisConfig(NET6), LisConfig(LL)] if self.v6 else [])
        addrs = [A(f"192.0.2.{i + 1}")] + ([ip_address(f"2001:db8::{i + 1}"), ip_address(f"fe80::{i + 1}")]
                                         if self.v6 else [])
        core = self.cores[i] = HarpCore(lises, trio.current_time())
        self.events[i] = []
        runner = self.runners[i] = CoreRunner(core, drain(core, lambda item: fab.send(i, 1, item[0], ETHERTYPE_ARP, item[1]),
                                                                self.events[i].extend))
        fab.handlers[i] = lambda m: self._deliver(i, m)
        core.set_port(fab.endpoints[i].ula, addrs, trio.current_time())
        runner.step()

        async def _run(task_status=trio.TASK_STATUS_IGNORED):
            with trio.CancelScope() as scope:
                self.scopes[i] = scope
                task_status.started()
                await runner.run()

        self.nursery.start_soon(_run)
        return core

    def stop(self, i: int) -> None:
        self.scopes.pop(i).cancel()
        self.fab.handlers[i] = lambda m: None  # the host is gone: nothing answers


def phases(hosts):
    return {i: c.lis[0].phase for i, c in hosts.cores.items()}


async def test_two_hours_non_broadcast(autojump_clock):
    fab = SimFabric(4, seed=3, broadcast=False, static={ULA_HARP_SERVER: 1}, timers=SLOW_LINK)
    async with trio.open_nursery() as nursery:
        await fab.run(nursery)
        await fab.wait_ready(60)
        h = Hosts(fab, nursery)
        t0 = trio.current_time()
        for i in range(4):
            h.start(i)
        await trio.sleep(15)
        assert phases(h) == {0: Phase.OPER_SERVER, 1: Phase.OPER_SERVER, 2: Phase.OPER_SERVER,
                             3: Phase.OPER_SERVER}
        server = h.cores[0]
        assert server.lis[0].is_server and server.counters["server_self_detected"] == 1
        assert {str(ip) for ip in server.lis[0].server_table} == {f"192.0.2.{k}" for k in (1, 2, 3, 4)}
        assert all(c.counters["probe_not_echoed"] == 1 for c in h.cores.values())  # broadcast detection said no

        # resolution through the server, and a NAK for an unknown address
        c1 = h.cores[1]
        for ip in ("192.0.2.3", "192.0.2.4", "192.0.2.99"):
            h.resolve(1, ip)
        await trio.sleep(1)
        got = {e.ip: e for e in h.events[1] if isinstance(e, (Resolved,))}
        assert got[A("192.0.2.3")].ula == fab.endpoints[2].ula and got[A("192.0.2.4")].ula == fab.endpoints[3].ula
        assert server.counters["server_naks"] >= 1

        # host 2 keeps using 192.0.2.3 and 192.0.2.4 once a minute for the rest of the run
        async def use():
            while True:
                await trio.sleep(MIN)
                for ip in ("192.0.2.3", "192.0.2.4"):
                    h.resolve(1, ip)

        nursery.start_soon(use)

        # a client dies at 30 min: its server entry lasts at least 5 and at most 20 more minutes
        await trio.sleep(30 * MIN - (trio.current_time() - t0))
        regs_before = server.counters["server_registrations"]
        assert regs_before >= 4 + 3  # everyone reregistered at least once (every 15 min)
        h.stop(3)
        died = trio.current_time()
        await trio.sleep(4 * MIN)
        assert A("192.0.2.4") in server.lis[0].server_table
        await trio.sleep(died + 20 * MIN + 1 - trio.current_time())
        assert A("192.0.2.4") not in server.lis[0].server_table
        assert server.counters["server_entry_expired"] == 1
        # host 2's cache: 192.0.2.3 revalidated and kept; 192.0.2.4 removed on NAK or silence
        assert A("192.0.2.3") in c1.lis[0].cache
        await trio.sleep(16 * MIN)
        assert A("192.0.2.4") not in c1.lis[0].cache
        assert any(isinstance(e, Gone) and e.ip == A("192.0.2.4") for e in h.events[1])
        assert A("192.0.2.3") in c1.lis[0].cache

        # the server dies at ~70 min: clients notice at their next reregistration
        h.stop(0)
        dead = trio.current_time()
        await trio.sleep(15 * MIN + 20)
        assert phases(h)[1] is Phase.REGISTER and phases(h)[2] is Phase.REGISTER
        # host 2 resolves every minute: 2 unanswered HARP_REQUESTs declare the server dead first;
        # host 3 only reregisters, so the silent reregistration drops it
        assert c1.counters["server_dead_unanswered"] == 1
        assert h.cores[2].counters["server_silent_dropped"] == 1
        # ... and it returns with an empty table: clients re-register within one retry period
        h.start(0)
        await trio.sleep(10)
        assert phases(h)[1] is Phase.OPER_SERVER and phases(h)[2] is Phase.OPER_SERVER
        new_server = h.cores[0]
        assert {str(ip) for ip in new_server.lis[0].server_table} == {"192.0.2.1", "192.0.2.2", "192.0.2.3"}
        await trio.sleep(t0 + 120 * MIN - trio.current_time())
        assert trio.current_time() - t0 >= 2 * 3600 and dead > t0
        assert phases(h)[1] is Phase.OPER_SERVER
        nursery.cancel_scope.cancel()


async def test_broadcast_fabric(autojump_clock):
    fab = SimFabric(3, seed=4, broadcast=True, timers=SLOW_LINK)
    async with trio.open_nursery() as nursery:
        await fab.run(nursery)
        await fab.wait_ready(60)
        h = Hosts(fab, nursery)
        for i in range(3):
            h.start(i)
        await trio.sleep(5)
        assert set(phases(h).values()) == {Phase.OPER_BCAST}
        h.resolve(0, "192.0.2.3")
        await trio.sleep(1)
        assert [e for e in h.events[0] if isinstance(e, Resolved) and not e.static] == \
            [Resolved(A("192.0.2.3"), fab.endpoints[2].ula)]
        await trio.sleep(3600)  # no registration traffic on a broadcast fabric
        assert all(c.counters["server_registered"] == 0 for c in h.cores.values())
        nursery.cancel_scope.cancel()


async def test_ipv6_non_broadcast(autojump_clock):
    """IPv6 (global and link-local) registered with and resolved through the server,
    beside IPv4, on a non-broadcast fabric; entries expire as IPv4 ones do."""
    fab = SimFabric(3, seed=5, broadcast=False, static={ULA_HARP_SERVER: 1}, timers=SLOW_LINK)
    async with trio.open_nursery() as nursery:
        await fab.run(nursery)
        await fab.wait_ready(60)
        h = Hosts(fab, nursery, v6=True)
        for i in range(3):
            h.start(i)
        await trio.sleep(15)
        server = h.cores[0]
        assert all(lis.phase is Phase.OPER_SERVER for c in h.cores.values() for lis in c.lis)
        assert [lis.is_server for lis in server.lis] == [True, True, True]
        assert set(server.lis[1].server_table) == {ip_address(f"2001:db8::{k}") for k in (1, 2, 3)}
        assert set(server.lis[2].server_table) == {ip_address(f"fe80::{k}") for k in (1, 2, 3)}
        for ip in ("2001:db8::3", "fe80::3", "2001:db8::99", "192.0.2.3"):
            h.resolve(1, ip)
        await trio.sleep(1)
        got = {e.ip: e.ula for e in h.events[1] if isinstance(e, Resolved)}
        assert got[ip_address("2001:db8::3")] == fab.endpoints[2].ula
        assert got[ip_address("fe80::3")] == fab.endpoints[2].ula
        assert got[A("192.0.2.3")] == fab.endpoints[2].ula
        assert ip_address("2001:db8::99") not in got and server.counters["server_naks"] == 1
        assert any(isinstance(e, Unresolved) and e.ip == ip_address("2001:db8::99") and e.reason == "NAK"
                   for e in h.events[1])
        h.stop(2)
        await trio.sleep(21 * MIN)
        assert ip_address("2001:db8::3") not in server.lis[1].server_table
        assert ip_address("2001:db8::2") in server.lis[1].server_table  # host 2 keeps reregistering
        nursery.cancel_scope.cancel()
