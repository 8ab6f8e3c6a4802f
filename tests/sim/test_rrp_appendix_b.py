"""MessageWay Appendix-B: 5 SANs, 7 routers.  Flooding routing tables (§3.2)
converges to exactly the paths the text lists (spec §4.2-4.3)."""

from collections import deque

from pktwayd.routing import HalfRouter, NodeEntry, lrt_route
from pktwayd.topology import build as build_network
from pktwayd.topology import converge, random_network

HR = {"ab": 21, "ba": 22, "ac": 23, "ca": 24, "ad": 25, "da": 26, "bd1": 27, "db1": 28, "bd2": 29, "db2": 30,
      "cd": 31, "dc": 32, "de": 33, "ed": 34}
TWIN = {"ab": "ba", "ac": "ca", "ad": "da", "bd1": "db1", "bd2": "db2", "cd": "dc", "de": "ed"}
TWIN.update({v: k for k, v in list(TWIN.items())})
SANS = {"A": (["ab", "ac", "ad"], [0, 1], 2048), "B": (["ba", "bd1", "bd2"], [2, 3], 1024),
        "C": (["ca", "cd"], [4, 5], 512), "D": (["da", "db1", "db2", "dc", "de"], [6, 7], 2048),
        "E": (["ed"], [8, 9], 256)}
ADDR = lambda nn: 0x40 + nn  # noqa: E731  (spec §4.1: address(#nn) = 0x40 + nn)
NAME = {ADDR(v): k for k, v in HR.items()}


def build(san_loop_rule=True, k=None):
    routers = {}
    for san, (hrs, hosts, mtu) in SANS.items():
        members = [ADDR(h) for h in hosts] + [ADDR(HR[r]) for r in hrs]
        for me in hrs:
            nodes = tuple(NodeEntry(a, () if a == ADDR(HR[me]) else lrt_route(port),
                                    0 if a == ADDR(HR[me]) else 1, router=a in [ADDR(HR[r]) for r in hrs])
                          for port, a in enumerate(members))
            routers[ADDR(HR[me])] = HalfRouter(ADDR(HR[me]), 0x100 + "ABCDE".index(san), mtu,
                                               ADDR(HR[TWIN[me]]), nodes, sn=1, san_loop_rule=san_loop_rule, k=k)
    return routers


def paths(hr, san):
    return {tuple(NAME[a] for a in rt.rcvf) for rt in hr.rts.values() if rt.san_id == 0x100 + "ABCDE".index(san)
            and len(rt.rcvf) > 1}


def p(text):  # "ab/ad\\da/de\\ed" -> ("ab","ad","da","de","ed")
    return tuple(text.replace("\\", "/").split("/"))


REASONABLE_E = {p("ab/ad\\da/de\\ed"), p("ab\\ba/bd1\\db1/de\\ed"), p("ab\\ba/bd2\\db2/de\\ed"),
                p("ab/ac\\ca/cd\\dc/de\\ed")}


def test_appendix_b_with_san_loop_rule():
    routers = build()
    msgs = converge(routers)
    rab = routers[ADDR(21)]
    assert paths(rab, "E") == REASONABLE_E
    assert paths(rab, "D") == {p("ab/ad\\da"), p("ab\\ba/bd1\\db1"), p("ab\\ba/bd2\\db2"), p("ab/ac\\ca/cd\\dc")}
    assert len(rab.rts) == 18  # LRT + 17 XRTs
    q = {tuple(NAME[a] for a in rt.rcvf): rt.q for rt in rab.rts.values() if rt.san_id == 0x104}
    assert q == {p("ab/ad\\da/de\\ed"): 4, p("ab\\ba/bd1\\db1/de\\ed"): 5, p("ab\\ba/bd2\\db2/de\\ed"): 5,
                 p("ab/ac\\ca/cd\\dc/de\\ed"): 6}
    # route selection: H8 (#08) from Rab is best via ADE, MTU = min over A, D, E
    best = rab.routes(ADDR(8))[0]
    assert best[0] == 4 + 1 and best[2] == 256 and tuple(NAME[a] for a in best[3].rcvf)[1] == "ad"
    links = sum(len(h.buddies) + 1 for h in routers.values())
    assert msgs <= links * 64  # bounded flooding (k unlimited here)


def test_appendix_b_without_san_loop_rule_gives_the_texts_twelve_paths():
    routers = build(san_loop_rule=False)
    converge(routers)
    rab = routers[ADDR(21)]
    e = paths(rab, "E")
    assert len(e) == 12 and REASONABLE_E <= e
    assert len(paths(rab, "D")) == 12
    assert len(rab.rts) == 54
    assert len(routers[ADDR(33)].rts) == 74 and len(routers[ADDR(34)].rts) == 74


def test_k_best_keeps_the_best_three():
    routers = build(k=3)
    converge(routers)
    rab = routers[ADDR(21)]
    assert sorted(rt.q for rt in rab.rts.values() if rt.san_id == 0x104) == [4, 5, 5]


def test_newer_sn_replaces_and_loops_are_refused():
    routers = build()
    converge(routers)
    rab, rba = routers[ADDR(21)], routers[ADDR(22)]
    lrt_b = rba.lrt
    assert rab.receive(rba.addr, lrt_b) == []  # same SN again: ignored
    newer = type(lrt_b)(**{**lrt_b.__dict__, "sn": 2})
    assert rab.receive(rba.addr, newer)  # a newer SN is taken and passed on
    looped = type(lrt_b)(**{**lrt_b.__dict__, "sn": 9, "rcvf": (rab.addr,) + lrt_b.rcvf})
    assert rab.receive(rba.addr, looped) == []
    assert rab.receive(ADDR(9), newer) == []  # neither twin nor buddy


def test_random_topologies_converge_with_bounded_messages():
    """Every HR learns a route to every SAN; with k-best, messages stay within
    directed links x k per SAN."""
    for n, seed in ((10, 1), (100, 2)):
        sans, routers = random_network(n, seed)
        hrs, _ = build_network(sans, routers, k=3)
        msgs = converge(hrs)
        for hr in hrs.values():
            assert set(hr.by_san) | {hr.san_id} == set(sans)
        links = sum(1 + len(h.buddies) for h in hrs.values())
        assert msgs <= links * 3 * n, (n, msgs, links)


def test_half_router_dies_withdrawal_and_reconvergence():
    """Rda (A-D router, SAN D side) dies: its twin loses it (LINKDOWN), its buddies on D
    see it vanish (HRDOWN); the ERRs are relayed up and down, every RT through Rda is
    withdrawn, and a GVRT round relearns the rest: Rab keeps the 3 other ways to E."""
    routers = build()
    converge(routers)
    rda, rad = ADDR(HR["da"]), ADDR(HR["ad"])
    dead = routers.pop(rda)
    errs = deque()  # (code, addrs, from, to)
    for dest in routers[rad].twin_lost():
        errs.append(("LINKDOWN", (rad, rda), rad, dest))
    for b in dead.buddies:
        for dest in routers[b].buddy_lost(rda):
            errs.append(("HRDOWN", (rda,), b, dest))
    relays = 0
    while errs:
        code, addrs, src, dest = errs.popleft()
        if dest not in routers:
            continue
        for nxt in routers[dest].withdraw(code, addrs, src, now=0.0):
            relays += 1
            errs.append((code, addrs, dest, nxt))
    assert relays > 0
    for hr in routers.values():
        assert not any(rda in rcvf for rcvf in hr.rts), NAME[hr.addr]
    # relearn: every HR asks its twin and buddies again (GVRT), exchange until quiet
    q = deque()
    for hr in routers.values():
        for asker in [hr.twin, *hr.buddies]:
            if asker in routers:
                for rcvf, rt in hr.rts.items():
                    src = hr.learned_from.get(rcvf)
                    if (asker == hr.twin and (len(rcvf) == 1 or src != hr.twin)) or \
                            (asker != hr.twin and src == hr.twin):
                        q.append((hr.addr, asker, rt))
    while q:
        src, dest, rt = q.popleft()
        for d2, rt2 in routers[dest].receive(src, rt):
            if d2 in routers:
                q.append((dest, d2, rt2))
    rab = routers[ADDR(21)]
    assert paths(rab, "E") == REASONABLE_E - {p("ab/ad\\da/de\\ed")}
    assert rab.routes(ADDR(8))[0][0] == 5 + 1  # best is now Q 5 (via B), plus H8's entry
