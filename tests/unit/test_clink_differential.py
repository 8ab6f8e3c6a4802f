"""CLink against its oracle Link: the same seeds and inputs through the same lossy,
duplicating, reordering, corrupting wire give the same datagrams (byte for byte),
events, counters, credit balances and deadlines; and both deliver every Message
exactly once, in order per VC."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings, strategies as st

from daemons.link.clink import CLink
from daemons.link.link import Link, Timers
from tests.unit.linkdiff import Scenario, run


def per_vc(ms):
    return {vc: [m for m in ms if m.vc == vc] for vc in range(4)}


def _first_difference(ta, tb):
    for k, (x, y) in enumerate(zip(ta, tb)):
        if x != y:
            return k, x, y
    return len(ta), ta[len(tb):len(tb) + 1], tb[len(ta):len(ta) + 1]


def check(sc: Scenario, delivered=True):
    ta, got_a, sent_a, links_a = run(Link, sc)
    tb, got_b, sent_b, links_b = run(CLink, sc)
    assert ta == tb, _first_difference(ta, tb)
    assert got_a == got_b
    for la, lb in zip(links_a, links_b):
        assert +la.counters == +lb.counters
        assert la.ledger.balanced() and lb.ledger.balanced()
    if delivered:
        for side in (0, 1):
            assert per_vc(got_b[1 - side]) == per_vc(sent_a[side])


LIMITS = {0: 2000, 1: 6000, 2: 6000, 3: 20000}


@st.composite
def scenarios(draw):
    lossy = draw(st.booleans())
    sizes = [(draw(st.integers(0, 1)), vc, draw(st.integers(0, LIMITS[vc])), draw(st.integers(20, 250)))
             for vc in draw(st.lists(st.integers(0, 3), max_size=12))]
    small = draw(st.booleans())
    return Scenario(
        seed=draw(st.integers(0, 10**6)),
        drop=draw(st.floats(0, 0.2)) if lossy else 0.0,
        dup=draw(st.floats(0, 0.1)) if lossy else 0.0,
        reorder=draw(st.floats(0, 0.2)) if lossy else 0.0,
        corrupt=draw(st.floats(0, 0.05)) if lossy else 0.0,
        buffers=tuple(draw(st.integers(1, 300)) for _ in range(4)) if small else (512, 16384, 4096, 16384),
        window=draw(st.integers(8, 2000)) if small else 38272,
        max_mps=draw(st.integers(1, 1600)),
        hold=draw(st.sampled_from([0.0, 0.0, 0.3])),
        sizes=sizes,
        steps=800,
    )


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=True)
@given(scenarios())
def test_clink_matches_link_on_a_lossy_wire(sc):
    check(sc)


def test_clink_matches_link_through_link_failures():
    """rtx_limit and silence take the link down and back up: same events, same nonces."""
    sc = Scenario(seed=7, drop=0.6, timers=Timers(rtx_limit=2, dead_interval=0.2), steps=1500,
                  sizes=[(0, vc, 2000, 30 + 10 * vc) for vc in range(4)])
    check(sc, delivered=False)
    ta, *_ = run(CLink, sc)
    downs = [e for e in ta if e[2] == "ev" and type(e[3]).__name__ == "LinkDown"]
    assert downs


def test_clink_matches_link_with_tiny_buffers_window_and_datagrams():
    sc = Scenario(seed=9, drop=0.1, dup=0.1, reorder=0.1, corrupt=0.02, buffers=(1, 2, 3, 64), window=10,
                  max_mps=3, hold=0.3, steps=3000,
                  sizes=[(s, vc, 700, 20 + 7 * k) for k in range(6) for s in (0, 1) for vc in range(4)])
    check(sc)
