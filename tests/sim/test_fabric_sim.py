"""Three endpoints and a switch on trio's virtual clock over cables that drop,
duplicate and reorder 10% of datagrams: every Message arrives exactly once, in
order per VC, byte-identical; credits never go negative and return when idle."""

import random
from collections import defaultdict

import pytest
import trio

from daemons import constants as C
from tests.sim.fabric import SimFabric

pytestmark = pytest.mark.usefixtures("switch_forwarder")  # compiled and Python walks

MAX_SIZE = (2000, 9000, 9000, 30000)


async def test_ten_thousand_messages_exactly_once_in_order(autojump_clock):
    rng = random.Random(42)
    total = int(__import__("os").environ.get("SIM_TOTAL", 10_000))
    fab = SimFabric(3, seed=7, drop=0.1, duplicate=0.1, reorder=0.1)
    sent = defaultdict(list)

    async def main():
        async with trio.open_nursery() as nursery:
            await fab.run(nursery)
            await fab.wait_ready()
            ulas = [ep.ula for ep in fab.endpoints]
            for k in range(total):
                src = rng.randrange(3)
                dst = rng.randrange(3)
                vc = k % 4
                size = min(int(rng.expovariate(1 / 600)), MAX_SIZE[vc])
                payload = rng.randbytes(size)
                while fab.endpoints[src].link.queued(vc) > 4000:
                    await trio.sleep(0.001)
                assert fab.send(src, vc, ulas[dst], 0x88B5, payload)
                sent[(src, dst, vc)].append(payload)
                for ep in fab.endpoints:
                    assert ep.link.ledger.balanced()
            with trio.fail_after(120):
                while sum(len(b) for b in fab.inbox) < total:
                    await trio.sleep(0.05)
            await trio.sleep(2.0)  # idle: every credit comes home
            nursery.cancel_scope.cancel()

    await main()
    got = defaultdict(list)
    for dst, box in enumerate(fab.inbox):
        for m in box:
            src = [ep.ula for ep in fab.endpoints].index(m.s_ula)
            got[(src, dst, m.vc)].append(m.payload)
    assert got == sent
    assert sum(c.counters["dropped"] for c in fab.cables) > 100
    assert sum(c.counters["duplicated"] for c in fab.cables) > 100
    links = [ep.link for ep in fab.endpoints] + [p.link for p in fab.switch.ports.values()]
    for link in links:
        assert link.ledger.balanced()
        assert link.credits == list(C.VC_BUFFER_MPS), link.status()
