"""Two ST endpoints over a GSN fabric whose cables drop, duplicate and reorder 10%
of datagrams, on trio's virtual clock: the GSN link makes the path reliable, ST
runs its sequences over it."""

import struct

import trio

from daemons.link.link import Timers as LinkTimers
from daemons.runtime.corerunner import CoreRunner, drain
from stpd.constants import ETHERTYPE_ST, Function
from stpd.core import Accepted, Closed, Connected, OpDone, Params, RegionReady, StCore, TransferDone
from tests.sim.fabric import SimFabric


async def test_st_over_lossy_fabric(autojump_clock):
    fab = SimFabric(2, seed=9, drop=0.1, duplicate=0.1, reorder=0.1, timers=LinkTimers(keepalive=1.0,
                                                                                       dead_interval=5.0))
    cores, events, runners = [], [[], []], []
    async with trio.open_nursery() as nursery:
        await fab.run(nursery)
        await fab.wait_ready(60)
        for i in range(2):
            core = StCore(trio.current_time(), params=Params(bufsize=16, max_stu=16, max_block=18))
            runner = CoreRunner(core, drain(core, lambda item, i=i: fab.send(i, item[1], item[0], ETHERTYPE_ST,
                                                                              bytes(item[2]) + bytes(item[3])),
                                            events[i].extend))

            def deliver(m, core=core, runner=runner):
                core.receive(m.s_ula, m.payload, trio.current_time())
                runner.step()

            fab.handlers[i] = deliver
            cores.append(core)
            runners.append(runner)
            nursery.start_soon(runner.run)
        a, b = cores
        b.listen(5)
        vid = a.connect(fab.endpoints[1].ula, 5, trio.current_time())
        runners[0].step()
        await trio.sleep(1)
        assert Connected(vid) in events[0]
        bvc = [e for e in events[1] if isinstance(e, Accepted)][0].vc
        # a 2 MiB write on VC3 and a refused one
        data = bytes((i * 31) & 0xFF for i in range(2 << 20))
        sink = bytearray(len(data))
        b.post_receive(bvc, sink, trio.current_time())
        xid = a.send(vid, data, trio.current_time())
        runners[0].step()
        runners[1].step()
        await trio.sleep(5)
        assert sink == data and TransferDone(vid, xid, True, len(data)) in events[0]
        b.post_receive(bvc, bytearray(10), trio.current_time())
        bad = a.send(vid, bytes(100), trio.current_time())
        runners[0].step()
        await trio.sleep(1)
        assert any(isinstance(e, TransferDone) and e.xid == bad and e.reason == "too_long" for e in events[0])
        # persistent memory: region, PUT, FETCHOP
        region = bytearray(64)
        b.expose(bvc, region)
        gid = a.request_region(vid, 64, trio.current_time())
        runners[0].step()
        await trio.sleep(1)
        rid = [e for e in events[0] if isinstance(e, RegionReady) and e.gid == gid][0].rid
        for _ in range(20):
            a.fetchop(vid, rid, 0, Function.INCREMENT, trio.current_time())
        runners[0].step()
        await trio.sleep(2)
        assert struct.unpack(">Q", region[:8])[0] == 20
        assert sorted(e.value for e in events[0] if isinstance(e, OpDone) and e.value is not None) == list(range(20))
        # teardown, then the peer is gone: a connect times out after 5 RCs
        a.close(vid, trio.current_time())
        runners[0].step()
        await trio.sleep(1)
        assert Closed(vid, "closed") in events[0] and Closed(bvc, "closed") in events[1]
        fab.cables[1].connected = False
        vid2 = a.connect(fab.endpoints[1].ula, 5, trio.current_time())
        runners[0].step()
        await trio.sleep(10)
        assert Closed(vid2, "connect timed out") in events[0]
        nursery.cancel_scope.cancel()
