"""MessageWay Appendix B with real processes: five GSN fabrics (five switches, a gsnd
for every half-router and for hosts H0 and H8) and the seven routers as drawn, one
pktwayd each.  The routing tables converge, within 2 s of the last router coming up,
to exactly what the simulation of the same network holds; H0 reaches H8; killing a
router is noticed by its buddies (WRU), withdrawn everywhere, and undone when it returns."""

import contextlib
import signal
import time

import pytest

from lab.netns import BIN, Fabric, poll
from daemons.runtime.control import request
from daemons.wire.ula import parse_ula
from pktwayd.node import Node
from pktwayd.topology import converge
from tests.sim.test_rrp_appendix_b import ADDR, HR, REASONABLE_E, SANS, build, p

ROUTERS = [("ab", "ba"), ("ac", "ca"), ("ad", "da"), ("bd1", "db1"), ("bd2", "db2"), ("cd", "dc"), ("de", "ed")]
HOSTS = {"A": [0], "E": [8]}  # the other hosts are not running: absent from their switch's map
LIVE = 0.5
CONVERGE_S = 2.0  # the target


def expected() -> dict[int, set]:
    routers = build(k=None)
    converge(routers)
    return {a: set(hr.rts) for a, hr in routers.items()}


def differences(got, want) -> dict:
    """Per half-router: RCVFs missing and RCVFs extra (names as in Appendix B)."""
    name = {ADDR(v): k for k, v in HR.items()}
    fmt = lambda rcvfs: sorted("/".join(name.get(a, hex(a)) for a in r) for r in rcvfs)  # noqa: E731
    got = got or {}
    return {name[a]: {"missing": fmt(want[a] - got.get(a, set())), "extra": fmt(got.get(a, set()) - want[a])}
            for a in want if got.get(a) != want[a]}


class AppendixB:
    def __init__(self, stack: contextlib.ExitStack) -> None:
        self.slot, self.ula, self.fab = {}, {}, {}
        for san, (hrs, _hosts, _mtu) in SANS.items():
            members = hrs + [f"h{h}" for h in HOSTS.get(san, [])]
            fab = stack.enter_context(Fabric(len(members), prefix=f"b{san.lower()}"))
            self.fab[san] = fab
            for i, (m, ula) in enumerate(zip(members, fab.up(v6=False)), 1):
                self.slot[m], self.ula[m] = (san, i), ula
        self.control = {}

    @staticmethod
    def san(hr: str) -> str:
        return hr[0].upper()

    def half(self, hr: str) -> str:
        san = self.san(hr)
        hrs, hosts, mtu = SANS[san]
        text = f"\n[[half]]\naddr = {ADDR(HR[hr])}\nsan_id = {0x100 + 'ABCDE'.index(san)}\nmtu = {mtu}\n" \
               f"ulp = \"{self.fab[san].ulp_path(self.slot[hr][1])}\"\n"
        for other in hrs + [f"h{h}" for h in hosts]:
            if other == hr:
                continue
            addr = ADDR(int(other[1:])) if other.startswith("h") else ADDR(HR[other])
            text += f"[[half.node]]\naddr = {addr}\nula = \"{self.ula.get(other, '02:00:00:00:00:01')}\"\n"
            text += "router = true\n" if other in HR else ""
        return text

    def start(self, x: str, y: str) -> None:
        fab = self.fab[self.san(x)]
        ctl = fab.tmp / f"r{x}.sock"
        cfg = fab.tmp / f"r{x}.toml"
        cfg.write_text(f"[router]\nname = \"r{x}\"\ncontrol = \"{ctl}\"\nk = 0\nliveness = {LIVE}\n"
                       + self.half(x) + self.half(y))
        self.control[x] = str(ctl)
        fab.spawn(f"pktwayd-{x}", self.slot[x][1], str(BIN / "pktwayd"), "-c", str(cfg))

    def kill(self, x: str) -> None:
        self.fab[self.san(x)].kill(f"pktwayd-{x}", signal.SIGKILL)

    def wait_tables(self, want, timeout, interval=0.05) -> None:
        try:
            poll(lambda: self.tables() == want, timeout, interval=interval, what="the simulated routing tables")
        except AssertionError:
            raise AssertionError(f"tables differ from the simulation: {differences(self.tables(), want)}; "
                                 f"liveness events: {self.events()}") from None

    def events(self) -> dict:
        """Per half-router, the counters that tell of losses, withdrawals and resumptions."""
        out = {}
        for x, _ in ROUTERS:
            for h in request(self.control[x], {"cmd": "routes"})["halves"]:
                c = {k: v for k, v in h["counters"].items() if any(w in k for w in ("silent", "lost", "resumed", "err_"))}
                if c:
                    out[hex(h["addr"])] = c
        return out

    def forwarded(self, x: str) -> int:
        return request(self.control[x], {"cmd": "routes"})["halves"][0]["counters"].get("l3_forwarded", 0)

    def tables(self, routers=None) -> dict[int, set] | None:
        """Every running half's kept RCVFs, or None while a router is not up yet."""
        out = {}
        for x, _y in ROUTERS if routers is None else routers:
            try:
                r = request(self.control[x], {"cmd": "routes"}, 2.0)
            except OSError:
                return None
            if not r.get("ok") or not all(h["ulp_connected"] for h in r["halves"]):
                return None
            out.update({h["addr"]: {tuple(rt["rcvf"]) for rt in h["rts"]} for h in r["halves"]})
        return out


@pytest.fixture(scope="module")
def appendix_b():
    with contextlib.ExitStack() as stack:
        net = AppendixB(stack)
        t_spawn = time.monotonic()
        for x, y in ROUTERS:
            net.start(x, y)
        poll(lambda: net.tables() is not None, 30, interval=0.01, what="all seven routers up")
        t_ready = time.monotonic()
        want = expected()
        net.wait_tables(want, 30, interval=0.01)
        t_conv = time.monotonic()
        net.times = (t_ready - t_spawn, t_conv - t_ready)
        print(f"\nAppendix B: last router up {net.times[0]:.2f} s after spawning, converged {net.times[1]:.3f} s later")
        yield net, want


def test_converges_to_the_simulated_tables_in_under_two_seconds(appendix_b):
    net, want = appendix_b
    assert net.times[1] < CONVERGE_S
    rab = {rcvf for rcvf in net.tables()[ADDR(21)] if rcvf[-1] == ADDR(34)}
    assert rab == {tuple(ADDR(HR[h]) for h in path) for path in REASONABLE_E}


def test_h0_reaches_h8_and_a_dead_router_is_withdrawn_then_relearnt(appendix_b):
    net, want = appendix_b
    a_fab, e_fab = net.fab["A"], net.fab["E"]
    with Node(a_fab.ulp_path(net.slot["h0"][1]), ADDR(0), parse_ula(net.ula["ab"])) as h0, \
            Node(e_fab.ulp_path(net.slot["h8"][1]), ADDR(8), parse_ula(net.ula["ed"])) as h8:
        h0.send(ADDR(8), b"over A, D and E")
        assert h8.recv(10).data.rstrip(b"\0") == b"over A, D and E"

        net.kill("ad")  # both halves (Rad, Rda) die; their gsnds stay, so only silence tells
        t0 = time.monotonic()
        gone = {ADDR(25), ADDR(26)}
        rest = [r for r in ROUTERS if r[0] != "ad"]
        poll(lambda: (t := net.tables(rest)) is not None and not any(gone & set(rcvf) for s in t.values() for rcvf in s)
             and {rcvf for rcvf in t[ADDR(21)] if rcvf[-1] == ADDR(34)}
             == {tuple(ADDR(HR[h]) for h in path) for path in REASONABLE_E - {p("ab/ad\\da/de\\ed")}},
             15, interval=0.05, what="every route through router A-D withdrawn")
        withdrawn = time.monotonic() - t0
        h0.send(ADDR(8), b"the long way")
        assert h8.recv(10).data.rstrip(b"\0") == b"the long way"

        net.start("ad", "da")
        t0 = time.monotonic()
        net.wait_tables(want, 20)
        relearnt = time.monotonic() - t0
        print(f"\nrouter A-D killed: withdrawn everywhere in {withdrawn:.2f} s (WRU period {LIVE} s); "
              f"restarted: tables complete {relearnt:.2f} s after the spawn")
        assert withdrawn < 4 * LIVE + 2.0

        # level B: Rab redirected H0 to Rad for H8 (the first packet); knowing Rad's ULA, H0 obeys
        assert h0.discover().get(ADDR(25)) == parse_ula(net.ula["ad"])
        h0.send(ADDR(8), b"after discovery")
        assert h8.recv(10).data.rstrip(b"\0") == b"after discovery"
        h0.poll()
        assert h0.redirects[ADDR(8)][0] == ADDR(25)
        before = net.forwarded("ab"), net.forwarded("ad")
        h0.send(ADDR(8), b"straight to Rad")
        assert h8.recv(10).data.rstrip(b"\0") == b"straight to Rad"
        assert (net.forwarded("ab"), net.forwarded("ad")) == (before[0], before[1] + 1)
