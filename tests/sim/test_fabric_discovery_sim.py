"""Fabrics of several switches on trio's virtual clock: discovery, routes, broadcast
on the spanning tree, re-routing around a dead inter-switch cable."""

import pytest
import trio

from daemons import constants as C
from daemons.constants import MpType
from daemons.switch import topology as T
from daemons.wire.message import single_records
from tests.sim.mesh import SimMesh, random_fabric, true_next_hops

pytestmark = pytest.mark.usefixtures("switch_forwarder")  # compiled and Python walks

RING3 = [((1, 10), (2, 11)), ((2, 10), (3, 11)), ((3, 10), (1, 11))]


async def test_ring_of_three_discovers_and_routes(autojump_clock):
    mesh = SimMesh(RING3, [(1, 1), (2, 1), (3, 1), (3, 2)])
    async with trio.open_nursery() as nursery:
        await mesh.run(nursery)
        await mesh.converge()
        m = mesh.switches[1].agent.map
        assert sorted(m.switches) == [1, 2, 3]
        assert m.links == {T.link((1, 10), (2, 11)), T.link((2, 10), (3, 11)), T.link((1, 11), (3, 10))}
        ulas = [ep.ula for ep in mesh.endpoints]
        for i, _src in enumerate(ulas):
            for j, dst in enumerate(ulas):
                mesh.send(i, dst, f"{i}->{j}".encode())
        await trio.sleep(1.0)
        for j in range(4):
            assert sorted(m.payload for m in mesh.inbox[j]) == sorted(f"{i}->{j}".encode() for i in range(4))
        nursery.cancel_scope.cancel()


MESH2X2 = [((1, 10), (2, 11)), ((2, 12), (4, 11)), ((4, 10), (3, 12)), ((3, 11), (1, 12))]


async def test_random_fabric_tables_are_shortest_paths_and_ulas_unique(autojump_clock):
    import random
    rng = random.Random(5)
    links = random_fabric(rng, 8, 5)
    hosts = [(s, 1) for s in range(1, 9)] + [(3, 2), (6, 2)]
    mesh = SimMesh(links, hosts, seed=3)
    async with trio.open_nursery() as nursery:
        await mesh.run(nursery)
        await mesh.converge(60)
        ulas = [ep.ula for ep in mesh.endpoints]
        assert len(set(ulas)) == len(ulas)
        truth = true_next_hops(links, range(1, 9))
        where = {ep.ula: hosts[i][0] for i, ep in enumerate(mesh.endpoints)}
        for s, sw in mesh.switches.items():
            assert sorted(sw.agent.map.switches) == list(range(1, 9))
            assert sw.agent.map.manager == 1
            for ula, t in where.items():
                if t == s:
                    assert sw.ports[sw.table[ula]].fabric is False
                else:
                    assert sw.table[ula] in truth[(s, t)][1], (s, t)
            # the walk reached every switch by a shortest route
            for t, node in sw.agent.map.switches.items():
                assert len(node.route) == (0 if t == s else truth[(s, t)][0])
        # every host reaches every host
        for i in range(len(ulas)):
            for j in range(len(ulas)):
                mesh.send(i, ulas[j], bytes([i, j]))
        await trio.sleep(1.0)
        for j in range(len(ulas)):
            assert sorted(m.payload for m in mesh.inbox[j]) == [bytes([i, j]) for i in range(len(ulas))]
        nursery.cancel_scope.cancel()


async def _counts_after_broadcasts(mesh, senders):
    for i in senders:
        mesh.send(i, C.ULA_BROADCAST, b"bcast %d" % i)
    await trio.sleep(1.0)
    return [[sum(1 for m in box if m.payload == b"bcast %d" % i) for box in mesh.inbox] for i in senders]


async def test_broadcast_on_looped_fabrics_reaches_each_endpoint_exactly_once(autojump_clock):
    for links, hosts in ((RING3, [(1, 1), (2, 1), (3, 1)]), (MESH2X2, [(1, 1), (2, 1), (3, 1), (4, 1), (4, 2)])):
        mesh = SimMesh(links, hosts, seed=9)
        async with trio.open_nursery() as nursery:
            await mesh.run(nursery)
            await mesh.converge()
            tree = mesh.switches[1].agent.tree
            assert len(tree) == len(mesh.switches) - 1  # a spanning tree: one link fewer than switches
            counts = await _counts_after_broadcasts(mesh, range(len(hosts)))
            assert counts == [[1] * len(hosts)] * len(hosts)
            # idle: nothing at all moves but keepalives -- no Message, no Admin
            before = {(s, p): (pt.counters["rx_messages"], pt.counters["rx_admin"])
                      for s, sw in mesh.switches.items() for p, pt in sw.ports.items()}
            await trio.sleep(2.0)
            after = {(s, p): (pt.counters["rx_messages"], pt.counters["rx_admin"])
                     for s, sw in mesh.switches.items() for p, pt in sw.ports.items()}
            assert after == before
            dropped = sum(pt.counters["drop_broadcast_off_tree"] for sw in mesh.switches.values()
                          for pt in sw.ports.values())
            assert dropped == 0  # the tree ends agree: no copy ever arrived off the tree
            nursery.cancel_scope.cancel()


async def test_broadcast_before_discovery_never_crosses_switches(autojump_clock):
    """Until the manager writes TREE_PORTS, a switch floods only its own hosts (no storm)."""
    mesh = SimMesh(RING3, [(1, 1), (2, 1), (3, 1)], seed=4)
    for sw in mesh.switches.values():
        sw.agent.due = float("inf")  # never walk: a fabric nobody manages
        sw.agent._schedule = lambda now: None
    async with trio.open_nursery() as nursery:
        await mesh.run(nursery)
        with trio.fail_after(10):
            while not all(ep.ula and ep.link.up for ep in mesh.endpoints):
                await trio.sleep(0.01)
        counts = await _counts_after_broadcasts(mesh, [0])
        assert counts == [[1, 0, 0]]
        nursery.cancel_scope.cancel()


async def test_reroute_within_two_dead_intervals_and_shortest_path_restored(autojump_clock):
    mesh = SimMesh(RING3, [(1, 1), (2, 1), (3, 1)], seed=2)
    async with trio.open_nursery() as nursery:
        await mesh.run(nursery)
        await mesh.converge()
        dst = mesh.endpoints[1].ula
        assert mesh.switches[1].table[dst] == 10  # the direct cable to switch 2
        cut = mesh.cable((1, 10), (2, 11))
        cut.connected = False
        t_cut = trio.current_time()
        k = 0
        with trio.fail_after(4 * C.DEAD_INTERVAL_S):
            while True:  # one Message every 50 ms until one arrives sent after the cut
                mesh.send(0, dst, b"seq %d" % k)
                k += 1
                await trio.sleep(0.05)
                if any(m.payload.startswith(b"seq") for m in mesh.inbox[1]):
                    break
        first = min(int(m.payload.split()[1]) for m in mesh.inbox[1] if m.payload.startswith(b"seq"))
        moved = first * 0.05  # when the first Message that got through was sent, after the cut
        print(f"re-routed: first Message through sent {moved:.2f} s after the cut")
        assert moved <= 2 * C.DEAD_INTERVAL_S, moved
        assert trio.current_time() - t_cut <= 2 * C.DEAD_INTERVAL_S + 0.2
        assert mesh.switches[1].table[dst] == 11  # through switch 3
        await trio.sleep(1.0)
        got = sorted(int(m.payload.split()[1]) for m in mesh.inbox[1] if m.payload.startswith(b"seq"))
        assert got == list(range(first, k)), "after the move nothing is lost, nothing duplicated"
        cut.connected = True
        await trio.sleep(C.DEAD_INTERVAL_S)
        await mesh.converge()
        assert mesh.switches[1].table[dst] == 10 and mesh.switches[2].table[mesh.endpoints[0].ula] == 11
        nursery.cancel_scope.cancel()


async def test_registers_read_back_and_configuration_admin_only_from_management(autojump_clock):
    from daemons.constants import AdminCmd, AdminStatus, Register
    from daemons.wire.admin import change_route_args, element_address_args, parse_register, register_args

    mesh = SimMesh(RING3, [(1, 1), (1, 2), (2, 1), (3, 1)], seed=6, management=((1, 2),))
    async with trio.open_nursery() as nursery:
        await mesh.run(nursery)
        await mesh.converge()
        sw1, sw2 = mesh.switches[1], mesh.switches[2]

        async def read(i, reg, **kw):
            (r,) = await mesh.ask(i, AdminCmd.READ_REGISTER, register_args(reg), **kw)
            return r.status, parse_register(r.args)[1]
        assert await read(0, Register.ELEMENT_ADDRESS) == (AdminStatus.OK, 1)
        assert await read(0, Register.SERIAL) == (AdminStatus.OK, sw1.serial)
        assert await read(0, Register.FABRIC_PORTS) == (AdminStatus.OK, 1 << 9 | 1 << 10)
        assert await read(0, Register.TREE_PORTS) == (AdminStatus.OK, sw1.tree_ports)
        assert await read(0, Register.MANAGER) == (AdminStatus.OK, 1)
        assert (await read(0, Register.MAP_GENERATION))[1] >= 1
        assert (await read(0, 0x7777))[0] == AdminStatus.BAD_ARGUMENT
        assert await read(0, Register.ELEMENT_ADDRESS, hops=2, route=(10,)) == (AdminStatus.OK, 2)  # switch 2
        # an ordinary host port: configuration refused here, nothing changes, not even one switch on
        tree = sw1.tree_ports
        for cmd, args, kw in ((AdminCmd.WRITE_REGISTER, register_args(Register.TREE_PORTS, 0), {}),
                              (AdminCmd.CHANGE_ROUTE, change_route_args(mesh.endpoints[0].ula, 10), {}),
                              (AdminCmd.SET_ELEMENT_ADDRESS, element_address_args(9), {}),
                              (AdminCmd.INITIALIZE, b"", {}),
                              (AdminCmd.WRITE_REGISTER, register_args(Register.TREE_PORTS, 0),
                               {"hops": 2, "route": (10,)})):
            (r,) = await mesh.ask(0, cmd, args, **kw)
            assert r.command == AdminCmd.INVALID_ADMIN and r.args[0] == cmd
        assert sw1.tree_ports == tree and sw1.switch_id == 1 and sw2.tree_ports
        assert sw1.ports[1].counters["admin_refused_not_management"] == 5
        # read-only registers cannot be written even from the management port
        (r,) = await mesh.ask(1, AdminCmd.WRITE_REGISTER, register_args(Register.SERIAL, 5))
        assert r.command == AdminCmd.WRITE_STATUS and r.status == AdminStatus.BAD_ARGUMENT
        # INITIALIZE from the management port: learnt routes and the tree go; the
        # notice it floods makes the manager put them back
        routes = {u: p for u, p in sw2.table.items() if sw2.kind[u] == "route"}
        assert routes
        (r,) = await mesh.ask(1, AdminCmd.INITIALIZE, hops=2, route=(10,))
        assert r.command == AdminCmd.INITIALIZE_DONE and sw2.counters["initialized"] == 1
        await mesh.converge()
        assert {u: p for u, p in sw2.table.items() if sw2.kind[u] == "route"} == routes and sw2.tree_ports
        nursery.cancel_scope.cancel()


async def test_a_fabric_port_cannot_bring_in_a_local_hosts_source(autojump_clock):
    mesh = SimMesh(RING3, [(1, 1), (2, 1), (3, 1)], seed=8)
    async with trio.open_nursery() as nursery:
        await mesh.run(nursery)
        await mesh.converge()
        sw1 = mesh.switches[1]
        own, remote = mesh.endpoints[0].ula, mesh.endpoints[2].ula
        port10 = sw1.ports[10]

        def route(header: bytes) -> tuple[int, ...]:
            """The targets sw1 gives a Message whose HEADER comes in on port 10 (VC 1)."""
            sw1._ingress(port10, 1, single_records(1, MpType.HEADER, header + bytes(20)), trio.current_time())
            seg = port10.inq[1].pop()
            port10.current[1] = None
            return seg.targets

        assert route(mesh.endpoints[1].ula + own) == ()
        assert port10.counters["drop_spoofed_source"] == 1
        assert route(own + remote) == (1,)
        nursery.cancel_scope.cancel()


async def test_two_switches_with_one_id_are_renumbered_and_their_hosts_get_unique_ulas(autojump_clock):
    """Switches 2 and 3 are both configured id 2: their hosts' ULAs collide until the
    manager gives one of them a free id (SET_ELEMENT_ADDRESS) and that switch has its
    hosts ask again (INITIALIZE)."""
    line = [((1, 10), (2, 11)), ((2, 10), (3, 11))]
    mesh = SimMesh(line, [(1, 1), (2, 1), (3, 1)], seed=12, ids={3: 2})
    async with trio.open_nursery() as nursery:
        await mesh.run(nursery)
        await mesh.converge()
        await trio.sleep(1.0)
        await mesh.converge()
        ids = sorted(sw.switch_id for sw in mesh.switches.values())
        assert len(set(ids)) == 3 and sum(sw.counters["element_address_changed"] for sw in mesh.switches.values()) == 1
        ulas = [ep.ula for ep in mesh.endpoints]
        assert len(set(ulas)) == 3, ulas
        renamed = next(sw for sw in mesh.switches.values() if sw.counters["element_address_changed"])
        assert renamed.switch_id == 255 and renamed.serial > mesh.switches[2 if renamed is mesh.switches[3] else 3].serial
        m = mesh.switches[1].agent.map
        assert sorted(m.switches) == [1, 2, 255] and not m.conflicts
        for i in range(3):
            for j in range(3):
                mesh.send(i, ulas[j], bytes([i, j]))
        await trio.sleep(1.0)
        for j in range(3):
            assert sorted(m.payload for m in mesh.inbox[j]) == [bytes([i, j]) for i in range(3)]
        nursery.cancel_scope.cancel()


async def test_a_loop_cabled_without_switch_true_does_not_storm(autojump_clock):
    """The old way (issue 12): switches joined by ordinary ports marked trust_source.
    Each notices a switch answering WHAT_ARE_YOU there and sends it no broadcast, so a
    host's broadcast reaches the host and goes round no loop."""
    import random

    from daemons.endpoint.core import Endpoint, MessageIn
    from daemons.io.memory import MemoryCable
    from daemons.io.runner import LinkRunner
    from daemons.switch.core import Switch
    from daemons.switch.driver import AgentTimer

    # cable s joins port 10 of switch s to port 11 of switch s % 3 + 1; a host on switch 1 port 1
    sws = {s: Switch(s, [1, 10, 11], 0.0, rng=random.Random(s), trust_source_ports=(10, 11),
                     cable_ids={1: 99, 10: s, 11: (s - 2) % 3 + 1}) for s in (1, 2, 3)}
    ep = Endpoint(99, 0.0, rng=random.Random(7))
    runners = {s: [] for s in sws}
    timers = {s: AgentTimer(sw, lambda now, s=s: flush(s, now)) for s, sw in sws.items()}
    got = []

    def flush(s, now):
        for r in runners[s]:
            r.flush(now)
        timers[s].poke()

    def ep_input(now):
        ep.process(now)
        got.extend(ev.message.payload for ev in ep.events() if isinstance(ev, MessageIn))
    cables = []
    for s in (1, 2, 3):
        c = MemoryCable(random.Random(s))
        cables.append(c)
        for end, (k, p) in zip(c.ends, ((s, 10), (s % 3 + 1, 11))):
            runners[k].append(LinkRunner(sws[k].ports[p].link, end, on_input=lambda now, k=k, p=p: sws[k].process(p, now),
                                         after=lambda now, k=k: flush(k, now)))
    hc = MemoryCable(random.Random(9))
    cables.append(hc)
    runners[1].append(LinkRunner(sws[1].ports[1].link, hc.ends[0], on_input=lambda now: sws[1].process(1, now),
                                 after=lambda now: flush(1, now)))
    ep_runner = LinkRunner(ep.link, hc.ends[1], on_input=ep_input, after=lambda now: ep_runner.flush(now),
                           timer=ep.timer, handle_timer=ep.handle_timer)
    async with trio.open_nursery() as nursery:
        for c in cables:
            nursery.start_soon(c.run)
        nursery.start_soon(ep_runner.run)
        for s in sws:
            nursery.start_soon(timers[s].run)
            for r in runners[s]:
                nursery.start_soon(r.run)
        await trio.sleep(1.0)
        assert ep.ula and all(sw.ports[p].stray_switch for sw in sws.values() for p in (10, 11))
        assert not sws[1].ports[1].stray_switch
        ep.send(1, C.ULA_BROADCAST, 0x88B5, b"hello loop")
        ep_runner.flush(trio.current_time())
        await trio.sleep(2.0)
        assert got == [b"hello loop"]
        assert sum(sw.ports[p].counters["rx_messages"] for sw in sws.values() for p in (10, 11)) == 0
        nursery.cancel_scope.cancel()
