"""Half-router engines on the Appendix-B network, driven on virtual time through the
codec: power-up (Hey-You), WRU twin probes, a half-router dying (HRDOWN from its
buddies, LINKDOWN from its twin), withdrawal, and re-learning when it returns."""

from collections import deque

from pktwayd import messages as M
from pktwayd.constants import LIVENESS_MISSES, LIVENESS_S, PT, ErrTE, RrpTE
from pktwayd.eep import decode
from pktwayd.engine import Engine
from pktwayd.routing import HalfRouter
from pktwayd.topology import converge as flood
from tests.sim.test_rrp_appendix_b import ADDR, REASONABLE_E, build, p, paths

RAB, RDA, RAD, RED = ADDR(21), ADDR(26), ADDR(25), ADDR(34)


class Net:
    """Every half-router of Appendix B; hosts are not simulated (what is sent to them is lost)."""

    def __init__(self) -> None:
        self.routers = build()
        self.e = {a: Engine(hr) for a, hr in self.routers.items()}
        # native route of every member of every SAN, as its HRs' LRTs give it
        self.route_addr, self.addr_route = {}, {}
        for hr in self.routers.values():
            for n in hr.lrt_nodes:
                if len(n.sr) == 1:
                    self.route_addr[(hr.san_id, n.sr[0].route)] = n.addr
                    self.addr_route[(hr.san_id, n.addr)] = n.sr[0].route
        self.t = 0.0
        self.q: deque = deque()
        self.dead: set[int] = set()
        self.port_down: set[int] = set()  # running, twin reachable, SAN port not up yet
        self.san_lost_until = -1.0  # before this time, everything sent on a SAN is lost
        self.seen: list = []  # (receiver, packet) of every ERR delivered

    def emit(self, src: int, acts) -> None:
        e = self.e[src]
        for where, to, pkt in acts:
            if where == "twin":
                dest, kind = e.hr.twin, "twin"
            elif src in self.port_down or self.t < self.san_lost_until:
                continue
            elif where == "san":
                dest, kind = to, "san"
            elif where == "route":
                dest, kind = self.route_addr.get((e.hr.san_id, to)), "san"
            else:
                continue
            self.q.append((src, dest, kind, decode(pkt.encode())))  # really through the codec

    def deliver(self) -> None:
        while self.q:
            src, dest, kind, pkt = self.q.popleft()
            if src in self.dead or dest in self.dead or dest not in self.e:
                continue
            eng = self.e[dest]
            eng.now = self.t
            if pkt.pt == PT.ERR:
                self.seen.append((dest, pkt))
            if kind == "twin":
                acts = eng.from_twin(pkt)
            else:
                acts = eng.from_san(pkt, src_route=self.addr_route[(eng.hr.san_id, src)])
            self.emit(dest, acts)

    def powerup(self, addr: int) -> None:
        self.e[addr].now = self.t
        self.emit(addr, self.e[addr].powerup())

    def run(self, seconds: float, step: float = 0.25) -> None:
        end = self.t + seconds
        while self.t < end:
            for a, e in self.e.items():
                if a not in self.dead:
                    self.emit(a, e.handle_timer(self.t))
            self.deliver()
            self.t += step

    def map_san(self, san_id: int) -> None:
        """The SAN's map as its switch would report it: the routes of live members."""
        live = {r for (s, r), a in self.route_addr.items() if s == san_id and a not in self.dead}
        for a, e in self.e.items():
            if e.hr.san_id == san_id and a not in self.dead:
                e.now = self.t
                self.emit(a, e.map_update(live))
        self.deliver()


def expected_tables() -> dict:
    routers = build()
    flood(routers)
    return {a: set(hr.rts) for a, hr in routers.items()}


def tables(net) -> dict:
    return {a: set(e.hr.rts) for a, e in net.e.items()}


def converged():
    net = Net()
    for a in net.e:
        net.powerup(a)
    net.run(2.0)
    return net


def test_power_up_on_timers_converges_to_appendix_b():
    net = converged()
    rab = net.routers[RAB]
    assert paths(rab, "E") == REASONABLE_E and len(rab.rts) == 18
    assert all(e.twin_alive for e in net.e.values())


def test_twin_probe_keeps_a_quiet_twin_alive():
    net = converged()
    net.run(10 * LIVENESS_S)
    assert all(e.twin_alive and e.counters["twin_lost"] == 0 for e in net.e.values())
    assert all(e.counters["rrp_WRU"] >= 9 for e in net.e.values())


def test_a_dead_half_router_is_withdrawn_and_relearnt():
    net = converged()
    net.dead.add(RDA)
    net.map_san(0x103)  # its buddies on D see it vanish from the switch: HRDOWN(Rda)
    net.run((LIVENESS_MISSES + 1) * LIVENESS_S)  # its twin Rad misses three WRUs: LINKDOWN(Rad, Rda)
    hrdown = {d for d, pkt in net.seen if pkt.te == ErrTE.HRDOWN and M.records(pkt) == [M.Addr(RDA)]}
    linkdown = {d for d, pkt in net.seen if pkt.te == ErrTE.LINKDOWN}
    assert {ADDR(27), ADDR(29), ADDR(31), RED} <= hrdown  # the D buddies' twins heard of it
    assert {RAB, ADDR(23)} <= linkdown  # Rad's buddies heard LINKDOWN(Rad, Rda)
    assert not any(RDA in rcvf for a, e in net.e.items() if a != RDA for rcvf in e.hr.rts)
    assert paths(net.routers[RAB], "E") == REASONABLE_E - {p("ab/ad\\da/de\\ed")}
    assert not net.e[RAD].twin_alive
    # Rda restarts (a fresh process: a newer SN) and its SAN maps it again
    net.dead.discard(RDA)
    old = net.routers[RDA]
    net.routers[RDA] = HalfRouter(old.addr, old.san_id, old.mtu, old.twin, net.e[RDA].static.values(), sn=100)
    net.e[RDA] = Engine(net.routers[RDA], now=net.t)
    net.powerup(RDA)
    net.map_san(0x103)
    net.run(3 * LIVENESS_S)
    assert net.e[RAD].twin_alive
    assert paths(net.routers[RAB], "E") == REASONABLE_E


def test_a_node_registers_by_answering_hey_you():
    net = converged()
    red = net.e[RED]
    newcomer, port_route = 0x7000, bytes((9, 3, 0))
    assert not net.routers[RAB].routes(newcomer)
    # Red's map shows a new route; Red asks it who it is (WRU to Hey-You) ...
    acts = red.map_update(set(r for (s, r) in net.route_addr if s == 0x104) | {port_route})
    wru = [(to, pkt) for w, to, pkt in acts if w == "route"]
    assert wru == [(port_route, M.rrp(RrpTE.WRU, 0x7FFFFE, RED, [M.Addr(0x7FFFFE)]))]
    # ... and its INFO answer puts it in Red's LRT, whose new SN travels everywhere
    info = M.info(RED, newcomer, newcomer, b"dsp", [(7, bytes([4, 8]))])
    net.emit(RED, red.from_san(decode(info.encode()), src_route=port_route))
    net.deliver()
    best = net.routers[RAB].routes(newcomer)[0]
    assert best[0] == 5 and best[1][-1].route == port_route  # ADE, then Red's port 9
    assert red.hr.entry[newcomer].name == b"dsp" and red.counters["nodes_registered"] == 1
    # garbage claims are counted, not installed
    bad = M.info(RED, 0x7001, 0x7002)  # ADDR says somebody else
    assert red.from_san(decode(bad.encode()), src_route=bytes((10, 3, 0))) == []
    assert red.counters["info_unusable"] == 1 and 0x7002 not in red.hr.entry


def test_a_silent_buddy_is_found_by_wru_even_while_its_port_stays_up():
    """The router process dies but its gsnd (and so the switch's ULA list) stays: its buddies
    stop hearing answers to their WRUs and send HRDOWN themselves."""
    net = converged()
    net.dead.add(RDA)  # no map_san: the switch still lists it
    net.run((LIVENESS_MISSES + 1) * LIVENESS_S)
    d_buddies = [ADDR(28), ADDR(30), ADDR(32), ADDR(33)]
    assert all(RDA in net.e[b].silent and RDA not in net.e[b].hr.buddies for b in d_buddies)
    assert not any(RDA in rcvf for a, e in net.e.items() if a != RDA for rcvf in e.hr.rts)
    assert paths(net.routers[RAB], "E") == REASONABLE_E - {p("ab/ad\\da/de\\ed")}
    net.dead.discard(RDA)  # it answers again (same process, same SN)
    net.run(2 * LIVENESS_S)
    assert all(RDA in net.e[b].hr.buddies and net.e[b].counters["buddy_back"] == 1 for b in d_buddies)
    assert paths(net.routers[RAB], "E") == REASONABLE_E
    assert tables(net) == expected_tables()  # nothing learnt while it was away breaks the SAN-loop rule


def test_late_starters_are_not_buddies_lost():
    """Routers come up one by one, seconds apart, each half's SAN port a little after its
    twin's: nobody declares a buddy silent that it has never heard, nothing a half learnt
    while its port was down is lost, and the tables end exactly as the simulation's."""
    net = Net()
    net.dead = set(net.e)  # not started yet
    for a in sorted(net.e):
        if a in net.dead:  # a router process starts: both halves, ...
            b = net.routers[a].twin
            net.dead -= {a, b}
            net.e[a], net.e[b] = Engine(net.routers[a], now=net.t), Engine(net.routers[b], now=net.t)
            net.port_down.add(b)  # ... the second's SAN port a little later
            net.powerup(a)
            net.run(0.5)
            net.port_down.discard(b)
            net.powerup(b)
        net.run(4 * LIVENESS_S)  # longer than a buddy's allowed silence
    net.run(2 * LIVENESS_S)
    assert not any(e.counters["buddy_silent"] for e in net.e.values())
    assert tables(net) == expected_tables()


def test_registrations_from_one_port_replace_each_other():
    """A flood of INFOs claiming ever new addresses from one port holds one LRT entry."""
    net = converged()
    red = net.e[RED]
    port_route = bytes((9, 3, 0))
    for addr in range(0x7000, 0x7000 + 200):
        red.from_san(decode(M.info(RED, addr, addr).encode()), src_route=port_route)
    entries = [n.addr for n in red.hr.lrt_nodes if n.sr and n.sr[0].route == port_route]
    assert entries == [0x7000 + 199] and len(red.registered) == 1


def test_a_restarted_router_whose_far_half_comes_up_first_leaves_no_san_loops():
    """Router A-D dies (both halves) and is withdrawn; it restarts with Rda's port up first.
    Rad's LRT then reaches SAN A the long way round (D, C, A) while Rad is still silent to
    its buddies: the SAN-loop rule must still count Rad, or paths entering A twice stay."""
    net = converged()
    net.dead |= {RAD, RDA}
    net.run((LIVENESS_MISSES + 1) * LIVENESS_S)
    assert RAD in net.e[RAB].silent
    net.dead -= {RAD, RDA}
    for a in (RAD, RDA):
        old = net.routers[a]
        net.routers[a] = HalfRouter(old.addr, old.san_id, old.mtu, old.twin, net.e[a].static.values(), sn=100)
        net.e[a] = Engine(net.routers[a], now=net.t)
    net.port_down.add(RAD)
    net.powerup(RDA)
    net.run(2.0)
    net.port_down.discard(RAD)
    net.powerup(RAD)
    net.run(3 * LIVENESS_S)
    assert tables(net) == expected_tables()


def test_what_is_sent_on_the_sans_before_they_carry_is_repaired_when_a_buddy_is_first_heard():
    """Every half powers up at once and for its first second nothing it sends on its SAN
    arrives (as when its buddies were not reachable yet: an IB switch without a route to
    their LIDs, a gsnd whose router had not bound yet), in both directions: the greetings
    and the RTs passed on from the twins are lost.  The first packet heard from a buddy
    (its WRU probe) greets it again (GVRT, and the RTs it would have had), and the tables
    end exactly as the simulation's."""
    net = Net()
    net.san_lost_until = 1.0
    for a in net.e:
        net.powerup(a)
    net.run(1.0)
    assert tables(net) != expected_tables()
    net.run(2 * LIVENESS_S)  # every buddy probed at least once
    assert tables(net) == expected_tables()
    assert all(e.counters["buddy_greeted"] == len(e.hr.buddies) for e in net.e.values())
