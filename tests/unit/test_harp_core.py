"""HarpCore stepped by hand: bad input is dropped and counted, never raised."""

from ipaddress import IPv4Address as A, IPv4Network, IPv6Address as A6, IPv6Network

import pytest
from hypothesis import given, strategies as st

from daemons.constants import ULA_HARP_SERVER
from daemons.runtime.config import ConfigError
from harpd.constants import Op
from harpd.core import HarpCore, LisConfig, Resolved, Timers
from harpd.states import PhaseEvent
from harpd.options import parse
from harpd.wire import Harp, decode, nak

NET = IPv4Network("192.0.2.0/24")
SRV, C1, C2 = b"\x02\x00\x00\x00\x00\x01", b"\x02\x00\x00\x00\x00\x02", b"\x02\x00\x00\x00\x00\x03"
Z = A(0)


def server():
    core = HarpCore([LisConfig(NET, role="server")], 0.0)
    core.set_port(SRV, [A("192.0.2.1")], 0.0)
    core.outgoing()
    return core


def register(core, ip, ula, now=1.0):
    core.receive(ula, Harp(Op.INHARP_REQUEST, A(ip), Z, ula, ULA_HARP_SERVER).encode(), now)
    return [(d, decode(p)) for d, p in core.outgoing()]


def test_server_registers_replies_and_naks():
    core = server()
    out = register(core, "192.0.2.2", C1)
    assert out == [(C1, Harp(Op.INHARP_REPLY, A("192.0.2.1"), A("192.0.2.2"), ULA_HARP_SERVER, C1))]
    req = Harp(Op.HARP_REQUEST, A("192.0.2.3"), A("192.0.2.2"), C2, bytes(6))
    core.receive(C2, req.encode(), 2.0)
    [(d, rep)] = [(d, decode(p)) for d, p in core.outgoing()]
    assert d == C2 and rep.op is Op.HARP_REPLY and rep.rpa == A("192.0.2.2") and rep.rha == C1
    unknown = Harp(Op.HARP_REQUEST, A("192.0.2.3"), A("192.0.2.99"), C2, bytes(6)).encode()
    core.receive(C2, unknown, 3.0)
    [(d, raw)] = core.outgoing()
    assert raw == unknown[:4] + b"\x00\x0a" + unknown[6:]  # NAK = request echoed with op 10


def test_takeover_refused_until_expiry():
    core = server()
    register(core, "192.0.2.2", C1, now=1.0)
    [(d, refused)] = register(core, "192.0.2.2", C2, now=2.0)
    assert d == C2 and refused.op is Op.HARP_NAK  # the registration echoed, refused
    assert core.counters["server_takeover_refused"] == 1
    core.handle_timer(1.0 + Timers().server_lifetime + 0.1)
    core.outgoing()  # the server's own probes/registrations meanwhile
    assert A("192.0.2.2") not in core.lis[0].server_table
    assert register(core, "192.0.2.2", C2, now=1300.0)[0][1].op is Op.INHARP_REPLY


def test_requests_from_outside_the_lis_and_garbage_are_counted():
    core = server()
    core.receive(C1, Harp(Op.INHARP_REQUEST, A("10.1.1.1"), Z, C1, ULA_HARP_SERVER).encode(), 1.0)
    core.receive(C1, b"\x00\x1c\x08\x00", 1.0)
    core.receive(C1, b"\x00\x07" + bytes(30), 1.0)
    assert core.outgoing() == []
    c = core.counters
    assert c["rx_outside_lis"] == 1 and c["rx_bad_harp"] == 1 and c["rx_bad_ar$hrd"] == 1


def test_spoofed_reply_dropped():
    core = HarpCore([LisConfig(NET)], 0.0)
    core.set_port(C1, [A("192.0.2.2")], 0.0)
    spoof = Harp(Op.HARP_REPLY, A("192.0.2.9"), A("192.0.2.2"), C2, C1)
    core.receive(C2, spoof.encode(), 1.0)
    assert core.counters["rx_dropped_reply_not_from_server"] == 1
    assert not [e for e in core.events() if isinstance(e, Resolved) and e.ip == A("192.0.2.9")]


@given(st.binary(max_size=64), st.binary(min_size=6, max_size=6))
def test_fuzz_never_raises(blob, src):
    core = server()
    core.receive(src, blob, 1.0)


@pytest.mark.parametrize("text,needle", [
    ("lis gsn0 192.0.2.0/33\n", ":1: "),
    ("lis gsn0 192.0.2.1/24\n", ":1: "),
    ("lis gsn0 192.0.2.0/24\nrole gsn0 boss\n", ":2: role must be"),
    ("lis gsn0 192.0.2.0/24\nstatic gsn0 10.0.0.1 02:00:00:00:00:01\n", ":2: static 10.0.0.1 is in no LIS"),
    ("lis gsn0 192.0.2.0/24\ntimer warp 3\n", ":2: unknown timer"),
    ("lis gsn0 192.0.2.0/24\nreregister -5\n", ":2: "),
    ("lis gsn0\n", ":1: 'lis' takes 2 arguments"),
    ("server gsn1 00:10:3b:ff:ff:e0\n", "gsn1 has role/server lines but no 'lis' line"),
])
def test_options_errors_name_file_and_line(text, needle):
    with pytest.raises(ConfigError) as ei:
        parse(text, "harpd.options")
    assert str(ei.value).startswith("harpd.options") and needle in str(ei.value)


def test_options_full_example():
    opts = parse("lis gsn0 192.0.2.0/27 # LIS 1\nrole gsn0 client\nserver gsn0 00:10:3b:ff:ff:e0\n"
                 "server gsn0 02:47:53:00:05:00\nstatic gsn0 192.0.2.30 02:47:53:00:07:00\n"
                 "lis gsn0 192.0.2.32/27\nreregister 600\ntimer probe_count 5\n", "x")
    a, b = opts.lises["gsn0"]
    assert a.role == "client" and len(a.servers) == 2 and a.statics == {A("192.0.2.30"): bytes.fromhex("024753000700")}
    assert b.network == IPv4Network("192.0.2.32/27") and opts.timers.reregister == 600 and opts.timers.probe_count == 5


def _sizes(core):
    lis = core.lis[0]
    return (len(lis.deadlines), len(lis.server_table), len(lis.cache), len(lis.pending), len(lis.negative),
            len(core._out), len(core._events))


def test_reregistering_one_ip_does_not_stack_state():
    """Issue 10 item 5: 100k re-registrations of one IP within its 20 minutes leave
    the server core at constant size (no per-registration heap items)."""
    import tracemalloc

    core = server()
    raw = Harp(Op.INHARP_REQUEST, A("192.0.2.2"), Z, C1, ULA_HARP_SERVER).encode()
    now = 1.0

    def burst(n):
        nonlocal now
        for _ in range(n):
            now += 0.001  # 100k in 100 s of virtual time, well inside the 20-minute lifetime
            core.receive(C1, raw, now)
            core.outgoing()
            core.events()
            if now >= core.timer():
                core.handle_timer(now)

    burst(1000)
    before = _sizes(core)
    tracemalloc.start()
    base = tracemalloc.take_snapshot()
    burst(100_000)
    grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(base, "filename"))
    tracemalloc.stop()
    assert _sizes(core) == before
    assert len(core.lis[0].deadlines) <= 4 and len(core.counters) < 16  # counter names, not per-IP keys
    assert grown < 64 * 1024, f"{grown} bytes retained by 100k re-registrations"
    assert core.counters["server_registrations"] == 101_000
    # the entry still expires 20 minutes after its last refresh, and not before
    core.handle_timer(now + Timers().server_lifetime - 1.0)
    assert A("192.0.2.2") in core.lis[0].server_table
    core.handle_timer(now + Timers().server_lifetime + 0.1)
    assert A("192.0.2.2") not in core.lis[0].server_table
    assert core.lis[0].deadlines == [] or all(t > now + Timers().server_lifetime for t, *_ in core.lis[0].deadlines)


def test_ipv6_server_registers_resolves_and_naks():
    core = HarpCore([LisConfig(NET, role="server"), LisConfig(IPv6Network("2001:db8::/64"), role="server")], 0.0)
    core.set_port(SRV, [A("192.0.2.1"), A6("2001:db8::1")], 0.0)
    core.outgoing()
    core.receive(C1, Harp(Op.INHARP_REQUEST, A6("2001:db8::2"), A6(0), C1, ULA_HARP_SERVER).encode(), 1.0)
    [(d, rep)] = [(d, decode(p)) for d, p in core.outgoing()]
    assert d == C1 and rep == Harp(Op.INHARP_REPLY, A6("2001:db8::1"), A6("2001:db8::2"), ULA_HARP_SERVER, C1)
    assert core.lis[1].server_table[A6("2001:db8::2")].ula == C1 and not core.lis[0].server_table
    core.receive(C2, Harp(Op.HARP_REQUEST, A6("2001:db8::3"), A6("2001:db8::2"), C2, bytes(6)).encode(), 2.0)
    [(d, rep)] = [(d, decode(p)) for d, p in core.outgoing()]
    assert d == C2 and rep.op is Op.HARP_REPLY and rep.rpa == A6("2001:db8::2") and rep.rha == C1
    # a v4 request for the v6 host's number is not answered from the v6 table
    unknown = Harp(Op.HARP_REQUEST, A("192.0.2.3"), A("192.0.2.2"), C2, bytes(6)).encode()
    core.receive(C2, unknown, 3.0)
    assert core.outgoing() == [(C2, nak(unknown))]
    # an IPv6 requester outside every IPv6 LIS is not registered
    core.receive(C1, Harp(Op.INHARP_REQUEST, A6("2001:db9::2"), A6(0), C1, ULA_HARP_SERVER).encode(), 4.0)
    assert core.outgoing() == [] and core.counters["rx_outside_lis"] == 1
    assert {r["ip"] for r in core.table(5.0)} == {"192.0.2.3", "2001:db8::2", "2001:db8::3"}


def test_options_ipv6_adds_link_local_lis():
    opts = parse("lis gsn0 192.0.2.0/24\nlis gsn0 2001:db8::/64\nstatic gsn0 2001:db8::9 02:47:53:00:07:00\n"
                 "lis gsn1 192.0.2.0/24\nlis gsn2 fe80::/64\n", "x")
    assert [x.network for x in opts.lises["gsn0"]] == [NET, IPv6Network("2001:db8::/64"), IPv6Network("fe80::/64")]
    assert opts.lises["gsn0"][1].statics == {A6("2001:db8::9"): bytes.fromhex("024753000700")}
    assert [x.network for x in opts.lises["gsn1"]] == [NET]  # IPv4 only: no link-local LIS
    assert [x.network for x in opts.lises["gsn2"]] == [IPv6Network("fe80::/64")]
    with pytest.raises(ConfigError, match=":2: LIS 2001:db8::/48 overlaps"):
        parse("lis gsn0 2001:db8::/64\nlis gsn0 2001:db8::/48\n", "x")


def test_negative_cache_entries_are_dropped_when_they_expire():
    """A NAK'd address is remembered for negative_cache seconds, then forgotten: a
    kernel asking for many unknown addresses does not grow the core for good."""
    core = HarpCore([LisConfig(NET, role="client")], 0.0)
    core.set_port(C1, [A("192.0.2.2")], 0.0)
    lis = core.lis[0]
    for s in lis.servers:  # registered with the server
        s.responsive, s.real_ula = True, SRV
    core._phase(lis, PhaseEvent.REGISTERED, 0.0)
    core.outgoing()
    for k in range(1000):
        core.resolve(A(f"192.0.2.{k % 250 + 3}"), 1.0)
        for _d, raw in core.outgoing():
            core.receive(SRV, nak(raw), 1.0)
    assert len(lis.negative) == 250 and not lis.pending
    core.resolve(A("192.0.2.3"), 2.0)
    assert core.outgoing() == []  # still negative-cached
    core.handle_timer(1.0 + Timers().negative_cache + 0.1)
    assert lis.negative == {} and len(lis.deadlines) < 300


_V6_MSGS = [Harp(op, A6("2001:db8::2"), A6(t),
                 C1, tha, hrd).encode()
            for op, t, tha in ((Op.INHARP_REQUEST, 0, ULA_HARP_SERVER), (Op.HARP_REQUEST, "2001:db8::1", bytes(6)),
                               (Op.HARP_REPLY, "2001:db8::1", SRV), (Op.HARP_NAK, "2001:db8::3", bytes(6)))
            for hrd in (28, 1)]


@given(st.sampled_from(_V6_MSGS), st.integers(0, 60), st.binary(min_size=1, max_size=3), st.integers(0, 60))
def test_fuzz_ipv6_dual_stack_never_raises(raw, at, patch, cut):
    core = HarpCore([LisConfig(NET, role="server"), LisConfig(IPv6Network("2001:db8::/64"), role="server"),
                     LisConfig(IPv6Network("fe80::/64"))], 0.0)
    core.set_port(SRV, [A("192.0.2.1"), A6("2001:db8::1"), A6("fe80::1")], 0.0)
    core.receive(C1, (raw[:at] + patch + raw[at + len(patch):])[:cut], 1.0)
    core.handle_timer(core.timer())
    for _, out in core.outgoing():
        decode(out)


def test_scaled_timers_multiply_every_duration_and_keep_the_counts():
    t = Timers()
    half = t.scaled(0.5)
    assert half.registration_retry == t.registration_retry * 0.5 and half.negative_cache == t.negative_cache * 0.5
    assert (half.probe_count, half.resolve_attempts) == (t.probe_count, t.resolve_attempts)
    assert isinstance(half.probe_count, int)
