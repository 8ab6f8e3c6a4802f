"""Logical (group) and broadcast PacketWay addresses on the Appendix-B network: the HR
that gets the packet from its source makes one copy per member (natively on its SAN,
along the best L2 source route beyond), every member gets exactly one, nobody else any;
the member lists travel in the RTs (LADR) and in a node's INFO registration."""

from collections import Counter, deque
from dataclasses import replace

from pktwayd import messages as M
from pktwayd.constants import ADDR_BROADCAST, PT, RrpTE
from pktwayd.eep import Packet
from pktwayd.engine import Engine
from pktwayd.routing import records_to_rt, rt_to_records
from pktwayd.rrp import Addr, Ladr, decode_records, encode_records
from pktwayd.topology import converge
from tests.sim.test_rrp_appendix_b import ADDR, build

G, OTHER_G = 0xE00007, 0xE00008
H0, H1, H3, H5, H8, H9 = ADDR(0), ADDR(1), ADDR(3), ADDR(5), ADDR(8), ADDR(9)
RAB = ADDR(21)
HOSTS = {ADDR(n) for n in range(10)}


def network(groups):
    routers = build()
    for hr in routers.values():
        hr.set_lrt(tuple(replace(n, groups=groups.get(n.addr, ())) for n in hr.lrt_nodes))
    converge(routers)
    engines = {a: Engine(hr) for a, hr in routers.items()}
    for e in engines.values():
        e.twin_alive, e.twin_heard = True, 0.0
    return engines


def carry(engines, first_hr, pkt, sender):
    """Run every action until nothing moves; the packets each host got."""
    got: Counter = Counter()
    work = deque([("san", first_hr, sender, pkt)])
    while work:
        kind, to, frm, p = work.popleft()
        assert sum(got.values()) < 1000
        if to not in engines:
            assert not p.prefix, "a host got a packet still carrying L2RHs"
            got[to] += 1
            continue
        e = engines[to]
        acts = e.from_twin(p) if kind == "twin" else e.from_san(p, src_route=e.route_of(frm))
        for where, dst, q in acts:
            if where == "twin":
                work.append(("twin", e.hr.twin, to, q))
            elif where == "route":
                work.append(("san", [a for r, a in e.by_route.items() if r.route == dst][0], to, q))
            else:
                work.append(("san", dst, to, q))
    return got


def test_group_members_on_four_sans_get_exactly_one_copy():
    e = network({H1: (G,), H3: (G, OTHER_G), H5: (G,), H8: (OTHER_G,), H9: (G,)})
    pkt = Packet(dt=G, sa=H0, pt=PT.USER, data=b"to the group")
    got = carry(e, RAB, pkt, H0)
    assert got == Counter({H1: 1, H3: 1, H5: 1, H9: 1})
    assert e[RAB].counters["group_copies"] == 4


def test_broadcast_reaches_every_host_but_the_sender_once():
    e = network({})
    got = carry(e, RAB, Packet(dt=ADDR_BROADCAST, sa=H0, pt=PT.USER, data=b"all"), H0)
    assert got == Counter({h: 1 for h in HOSTS - {H0}})


def test_a_group_without_members_is_dropped_counted():
    e = network({})
    assert carry(e, RAB, Packet(dt=0xE00099, sa=H0, pt=PT.USER), H0) == Counter()
    assert e[RAB].counters["group_no_members"] == 1


def test_ladr_travels_in_rtbl_and_registration():
    e = network({H9: (G,)})
    rt = next(rt for rt in e[RAB].hr.rts.values() if any(n.addr == H9 for n in rt.nodes))
    again = records_to_rt(decode_records(encode_records([rt_to_records(rt)]))[0])
    assert next(n for n in again.nodes if n.addr == H9).groups == (G,)
    # a node registering itself with INFO + LADR becomes a member (physical addresses in LADR ignored)
    info = M.rrp(RrpTE.INFO, RAB, 0x4A, [Addr(0x4A), Ladr((OTHER_G, 0x77))])
    e[RAB].from_san(info, src_route=bytes([9, 3, 0]))
    assert e[RAB].registered[0x4A].groups == (OTHER_G,)
    got = carry(e, RAB, Packet(dt=OTHER_G, sa=H0, pt=PT.USER), H0)
    assert got == Counter({0x4A: 1})
