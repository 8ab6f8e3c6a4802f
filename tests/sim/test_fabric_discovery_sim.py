"""Fabrics of several switches on trio's virtual clock: discovery, routes, broadcast
on the spanning tree, re-routing around a dead inter-switch cable."""

import trio

from daemons import constants as C
from daemons.switch import topology as T
from tests.sim.mesh import SimMesh

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
        for i, src in enumerate(ulas):
            for j, dst in enumerate(ulas):
                mesh.send(i, dst, f"{i}->{j}".encode())
        await trio.sleep(1.0)
        for j in range(4):
            assert sorted(m.payload for m in mesh.inbox[j]) == sorted(f"{i}->{j}".encode() for i in range(4))
        nursery.cancel_scope.cancel()
