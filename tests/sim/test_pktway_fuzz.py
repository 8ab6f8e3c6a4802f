"""Structure-aware fuzzing of everything pktwayd decodes off a socket (issue item 4).

Valid EEP/RRP packets are built with the codec (RRP requests and answers, RTBLs made
from real routing tables, ERRs, data with L2RHs, symbols and optional fields), then
mutated where the structure is: the DT prefix, TE/PT, E/PL/DL, the h bit, option
fields, record types, pads and lengths, name bytes; truncated or extended.  They go
to a half-router engine (from its SAN, in both dialects, or from its twin), to the
emulated SAN's switch core and to the node library.  Nothing may raise, and whatever
is not acted upon is counted."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pktwayd import messages as M
from pktwayd.constants import ADDR_BROADCAST, ADDR_HEY_YOU, PT, ErrTE, RrpTE
from pktwayd.eep import L2RH, OptField, Packet, Symbol
from pktwayd.routing import lrt_route, rt_to_records
from pktwayd.rrp import Addr, Capa, Ladr, Mtur, Name, Rcvf, Rthd, Srqr
from pktwayd.udpsan import SanSwitch, native
from tests.sim.test_pktway_engine import engines
from tests.sim.test_rrp_appendix_b import ADDR, build
from tests.unit.test_pktway_node import ScriptedPort, frame

RAB, RBA, RAD, H0 = ADDR(21), ADDR(22), ADDR(25), ADDR(0)
ROUTES = [lrt_route(p)[0].route for p in range(6)] + [bytes([9, 3, 0]), bytes([0, 0, 0]), b"\xff" * 6]
_RT_RECORDS = [rt_to_records(rt) for rt in list(build()[RAB].rts.values())]  # RAB's LRT, as its RTBL body

addrs = st.one_of(st.sampled_from([0, RAB, RBA, RAD, H0, ADDR(2), ADDR(8), ADDR_HEY_YOU, ADDR_BROADCAST,
                                   0xE00005, 0x800001, 0x7000]), st.integers(0, 0xFFFFFF))
small = st.binary(max_size=24)
l2rhs = st.builds(L2RH, st.one_of(st.sampled_from(ROUTES), st.binary(min_size=1, max_size=63)))
symbols = st.builds(Symbol, st.integers(0, (1 << 20) - 1), small)
options = st.builds(OptField, st.integers(0, 63), st.binary(max_size=40), st.booleans())
mtur = st.builds(Mtur, st.integers(0, 0xFFFFFF))
records = st.recursive(
    st.one_of(st.builds(Addr, addrs), st.builds(Name, st.binary(max_size=20)),
              st.builds(Capa, st.integers(0, 255), small),
              st.builds(Ladr, st.lists(addrs, max_size=3).map(tuple)), mtur,
              st.builds(Rcvf, st.lists(addrs, max_size=4).map(tuple)),
              st.builds(Srqr, st.integers(0, 0xFFFF), st.lists(st.one_of(l2rhs, symbols), max_size=2).map(tuple),
                        st.none() | mtur)),
    lambda inner: st.builds(Rthd, st.integers(0, 0xFFFFFF), st.integers(0, 2**32 - 1),
                            st.lists(inner, max_size=5).map(tuple)),
    max_leaves=8)


@st.composite
def bodies(draw, te):
    if te == RrpTE.RTBL and draw(st.booleans()):
        rthd = draw(st.sampled_from(_RT_RECORDS))
        return [replace(rthd, sn=draw(st.integers(0, 2**32 - 1)))]
    if te in (RrpTE.GVL2, RrpTE.HRTO, ErrTE.UNK, ErrTE.HRDOWN) and draw(st.booleans()):
        return [Addr(draw(addrs))]
    return draw(st.lists(records, max_size=4))


@st.composite
def packets(draw) -> Packet:
    kind = draw(st.sampled_from(["rrp", "rrp", "rrp", "err", "data"]))
    dt = draw(st.one_of(st.just(RAB), st.just(RBA), st.just(ADDR_HEY_YOU), addrs))  # mostly for the half-routers
    sa = draw(st.one_of(st.sampled_from([H0, RAD, RBA, ADDR(2)]), addrs))
    if kind == "rrp":
        te = draw(st.sampled_from(list(RrpTE)))
        pkt = Packet(dt=dt, sa=sa, pt=PT.RRP, te=te, data=b"".join(_enc(r) for r in draw(bodies(te))))
    elif kind == "err":
        te = draw(st.sampled_from(list(ErrTE)))
        pkt = M.err(te, dt, sa, draw(bodies(te))) if te != ErrTE.GENERAL else M.err(te, dt, sa, raw=draw(small))
    else:
        pkt = Packet(dt=dt, sa=sa, pt=draw(st.sampled_from([PT.USER, PT.EMBEDDED, 0x0800, 0xFFFF])),
                     data=draw(st.binary(max_size=64)))
    n_pre, n_opt = (draw(st.sampled_from([0, 0, 0, 0, 1, 2])) for _ in range(2))  # mostly none
    return replace(pkt, prefix=tuple(draw(st.lists(st.one_of(l2rhs, symbols), min_size=n_pre, max_size=n_pre))),
                   options=tuple(draw(st.lists(options, min_size=n_opt, max_size=n_opt))),
                   trailer=bytes(8 * draw(st.integers(0, 1))),
                   tail=draw(st.sampled_from([0, 1, 1 << 63])))


def _enc(rec) -> bytes:
    from pktwayd.rrp import encode

    return encode(rec)


def layout(pkt: Packet) -> dict:
    """Where the parts of the encoded packet start (PacketWay dialect)."""
    head = 8 * sum(r.words for r in pkt.prefix)
    opts = head + 16
    data = opts + 8 * sum(o.words for o in pkt.options)
    return {"head": head, "opts": opts, "data": data, "end": data + 8 * pkt.dl}


# (where, offset within that part, value): DT prefix byte, TE/PT, E/PL/DL, h+RZ, OH type/length,
# record RTyp/PL/RL (and nested ones), anything
mutation = st.tuples(st.sampled_from(["head", "opts", "data", "any"]),
                     st.one_of(st.sampled_from([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]), st.integers(0, 200)),
                     st.one_of(st.sampled_from([0x00, 0x01, 0x02, 0x07, 0x08, 0x3F, 0x40, 0x7F, 0x80, 0xBF, 0xC0,
                                                0xC5, 0xE0, 0xF0, 0xFF]), st.integers(0, 255)))


@st.composite
def wire(draw) -> tuple[Packet, bytes]:
    pkt = draw(packets())
    raw = bytearray(pkt.encode())
    where = layout(pkt)
    for part, off, value in draw(st.lists(mutation, max_size=3)):
        i = (where[part] + off) if part != "any" else off
        if i < len(raw):
            raw[i] = value
    cut = draw(st.sampled_from([None] * 7 + ["word", "byte", "extend"]))
    if cut == "word":
        raw = raw[: max(0, len(raw) - 8 * draw(st.integers(1, 3)))]
    elif cut == "byte":
        raw = raw[: draw(st.integers(0, len(raw)))]
    elif cut == "extend":
        raw += draw(st.binary(min_size=1, max_size=24))
    return pkt, bytes(raw)


def _check(engine, before: int, acts: list) -> None:
    for where, _to, pkt in acts:
        assert where in ("san", "twin", "local", "route")
        pkt.encode()  # what the driver will send can be sent
    assert acts or sum(engine.counters.values()) > before, "dropped without a counter"


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(wire(), st.sampled_from(ROUTES + [None]), st.sampled_from(["pw0", "mw5"]))
def test_engine_from_the_san(case, src_route, dialect):
    pkt, raw = case
    e = engines()[RAB]
    e.now = 1.0
    bad = sum(v for k, v in e.counters.items() if k.startswith("rx_bad_"))
    before = sum(e.counters.values())
    acts = e.from_san_bytes(raw, dialect, src_route=src_route)
    _check(e, before, acts)
    if not acts and sum(v for k, v in e.counters.items() if k.startswith("rx_bad_")) > bad:
        assert sum(e.counters.values()) == before + 1  # a decode error is one drop, one reason


@SETTINGS
@given(wire())
def test_engine_from_the_twin(case):
    _, raw = case
    e = engines()[RBA]
    before = sum(e.counters.values())
    _check(e, before, e.from_twin_bytes(raw))


@SETTINGS
@given(st.lists(wire(), min_size=1, max_size=4), st.sampled_from(ROUTES))
def test_engine_survives_a_sequence(cases, src_route):
    """State carries over (registrations, RTs, withdrawals) between hostile packets."""
    es = engines()
    for _, raw in cases:
        for e, feed in ((es[RAB], lambda e, r: e.from_san_bytes(r, src_route=src_route)),
                        (es[RBA], lambda e, r: e.from_twin_bytes(r))):
            before = sum(e.counters.values())
            _check(e, before, feed(e, raw))


PORTS = {1: ("127.0.0.1", 7401), 2: ("127.0.0.1", 7402)}


@SETTINGS
@given(wire(), st.sampled_from([0, 1, 2, 3]), st.sampled_from([1, 2, 9]), st.sampled_from([0, 64, 8 * 1024]))
def test_san_switch(case, out_port, in_port, mtu):
    _, raw = case
    sw = SanSwitch(PORTS, mtu=mtu)
    datagram = (native(out_port) if out_port else b"\x01\x08\x00") + raw
    out = sw.receive(PORTS.get(in_port, ("127.0.0.1", 9)), datagram)
    drops = sum(v for k, v in sw.counters.items() if k.startswith("drop_"))
    assert (len(out), drops) in ((1, 0), (0, 1))
    if out:
        assert out == [(PORTS[out_port], native(in_port) + raw)]


@SETTINGS
@given(st.lists(wire(), min_size=1, max_size=4))
def test_node_library(cases):
    from pktwayd.node import Node

    n = Node(ScriptedPort([frame(raw) for _, raw in cases]), H0, bytes([9, 3, 0]))
    n.poll()
    assert len(n._pending) + sum(n.counters.values()) + len(n.ulp.sent) >= len(cases)
