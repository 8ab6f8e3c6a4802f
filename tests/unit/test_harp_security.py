"""Issue 12 item 3: HARP that cannot be poisoned from the fabric.

The sans-IO core is fed what gsnd delivers: the Message's source ULA (S_ULA, which
gsnd stamps on every Message a ULP client sends) and the HARP payload.  A server
learns sender fields only from a request whose ar$sha is its S_ULA; a client takes
replies and NAKs only from its HARP servers, and only as answers to what it asked."""

from ipaddress import IPv4Address as A, IPv4Network

from hypothesis import given, settings, strategies as st

from daemons.constants import ULA_BROADCAST, ULA_HARP_SERVER, ULA_NONE
from harpd.constants import Op
from harpd.states import Reval
from harpd.core import Gone, HarpCore, LisConfig, Phase, Resolved, Timers, Unresolved
from harpd.wire import Harp, decode, nak

NET = IPv4Network("192.0.2.0/24")
SRV, C1, C2, C3 = (bytes.fromhex(f"02000000000{k}") for k in (1, 2, 3, 4))
ATK = bytes.fromhex("02bad0000066")  # a host on the fabric that is no HARP server
SRV_IP, C1_IP, C2_IP, C3_IP = A("192.0.2.1"), A("192.0.2.2"), A("192.0.2.3"), A("192.0.2.4")
Z = A(0)


# --- server -------------------------------------------------------------------------------------
def server(**cfg):
    core = HarpCore([LisConfig(NET, role="server", **cfg)], 0.0)
    core.set_port(SRV, [SRV_IP], 0.0)
    core.outgoing()
    return core


def inharp(ip, ula):
    return Harp(Op.INHARP_REQUEST, ip, Z, ula, ULA_HARP_SERVER).encode()


def sent(core):
    return [(d, decode(p)) for d, p in core.outgoing()]


def test_registration_naming_another_ula_is_dropped():
    core = server()
    core.receive(ATK, inharp(C1_IP, C1), 1.0)  # "192.0.2.2 is at C1", sent by ATK
    assert core.outgoing() == [] and C1_IP not in core.lis[0].server_table
    assert core.counters["rx_dropped_spoofed_sha"] == 1
    # nor through a HARP_REQUEST, whose requester the server also learns
    core.receive(ATK, Harp(Op.HARP_REQUEST, C1_IP, SRV_IP, C1, ULA_NONE).encode(), 2.0)
    assert core.outgoing() == [] and C1_IP not in core.lis[0].server_table
    assert core.counters["rx_dropped_spoofed_sha"] == 2
    # the real C1 registers; a spoofed re-registration does not even refresh it
    core.receive(C1, inharp(C1_IP, C1), 3.0)
    assert sent(core)[0][1].op is Op.INHARP_REPLY
    core.receive(ATK, inharp(C1_IP, C1), 500.0)
    assert core.outgoing() == [] and core.lis[0].server_table[C1_IP].validated == 3.0
    assert core.counters["rx_dropped_spoofed_sha"] == 3 and core.counters["server_registrations"] == 1


def test_sha_in_a_ten_byte_hardware_address_is_its_ula():
    """A HIPPI-800 style 10-byte ar$rha: its last 6 bytes are the ULA compared with S_ULA."""
    core = server()
    core.receive(C1, Harp(Op.INHARP_REQUEST, C1_IP, Z, b"\x00\x00\x00\x07" + C1, ULA_HARP_SERVER).encode(), 1.0)
    assert core.lis[0].server_table[C1_IP].ula == C1 and core.counters["rx_dropped_spoofed_sha"] == 0


def test_takeover_refused_refresh_by_owner_and_taken_after_expiry():
    life = Timers().server_lifetime
    core = server()
    core.receive(C1, inharp(C1_IP, C1), 1.0)
    core.outgoing()
    raw = inharp(C1_IP, C2)  # C2, speaking for itself, wants C1's address
    core.receive(C2, raw, 2.0)
    assert core.outgoing() == [(C2, nak(raw))]  # refused, and told so
    assert core.counters["server_takeover_refused"] == 1 and core.lis[0].server_table[C1_IP].ula == C1
    # the owner re-registers from its own ULA: refreshed, so it outlives the first lifetime
    core.receive(C1, inharp(C1_IP, C1), 1000.0)
    assert sent(core)[0][1].op is Op.INHARP_REPLY
    core.handle_timer(1.0 + life + 1.0)
    core.outgoing()
    assert core.lis[0].server_table[C1_IP].ula == C1
    core.receive(C2, raw, 1.0 + life + 2.0)
    assert core.outgoing() == [(C2, nak(raw))] and core.counters["server_takeover_refused"] == 2
    # 20 minutes after the owner's last registration the entry is gone: C2 may take the IP
    core.handle_timer(1000.0 + life + 0.1)
    core.outgoing()
    assert C1_IP not in core.lis[0].server_table
    core.receive(C2, raw, 1000.0 + life + 1.0)
    assert sent(core)[0][1].op is Op.INHARP_REPLY and core.lis[0].server_table[C1_IP].ula == C2


def test_static_entry_wins_over_registration():
    """harpd.options statics are the mitigation for squatting on critical IPs: the
    server answers them, and a registration that conflicts is NAKed and counted."""
    core = server(statics={C3_IP: C3})
    raw = inharp(C3_IP, ATK)
    core.receive(ATK, raw, 1.0)  # first come, but the IP is static
    assert core.outgoing() == [(ATK, nak(raw))]
    assert core.counters["server_static_conflict"] == 1 and core.lis[0].server_table[C3_IP].ula == C3
    req = Harp(Op.HARP_REQUEST, C3_IP, SRV_IP, ATK, ULA_NONE).encode()  # claimed as a requester
    core.receive(ATK, req, 2.0)
    assert core.outgoing() == [(ATK, nak(req))] and core.counters["server_static_conflict"] == 2
    # the static host itself may register (nothing changes) and everybody resolves the IP
    core.receive(C3, inharp(C3_IP, C3), 3.0)
    assert sent(core)[0][1].op is Op.INHARP_REPLY
    core.receive(C1, Harp(Op.HARP_REQUEST, C1_IP, C3_IP, C1, ULA_NONE).encode(), 4.0)
    [(d, rep)] = sent(core)
    assert d == C1 and rep.op is Op.HARP_REPLY and rep.rpa == C3_IP and rep.rha == C3
    e = core.lis[0].server_table[C3_IP]
    assert e.static and e.ula == C3
    # a static added at run time (gsnarp -s) wins the same way over a live dynamic entry
    core.receive(C2, inharp(C2_IP, C2), 5.0)
    core.outgoing()
    core.set_static(C2_IP, C1)
    core.receive(C2, inharp(C2_IP, C2), 6.0)
    assert sent(core)[0][1].op is Op.HARP_NAK and core.counters["server_static_conflict"] == 3


# --- client -------------------------------------------------------------------------------------
def registered_client(role="client"):
    """A client that has registered with the server at the well-known address, whose
    port (SRV) answered; and that resolved C2_IP through it."""
    core = HarpCore([LisConfig(NET, role=role)], 0.0)
    core.set_port(C1, [C1_IP], 0.0)
    t = 0.0
    while True:
        core.handle_timer(t)
        reg = [decode(p) for d, p in core.outgoing() if d == ULA_HARP_SERVER]
        if reg:
            break
        t += 1.0
    [req] = reg
    core.receive(SRV, req.reply(SRV_IP, ULA_HARP_SERVER, Op.INHARP_REPLY).encode(), t)
    assert core.lis[0].phase is Phase.OPER_SERVER
    core.resolve(C2_IP, t)
    [(d, ask)] = sent(core)
    assert d == ULA_HARP_SERVER and ask.op is Op.HARP_REQUEST
    core.receive(SRV, ask.reply(C2_IP, C2, Op.HARP_REPLY).encode(), t)
    assert core.events()[-1] == Resolved(C2_IP, C2)
    core.now = t
    return core


def test_legitimate_client_flows_still_work():
    core = registered_client()
    t = core.now
    lis = core.lis[0]
    assert lis.cache[C2_IP].ula == C2 and lis.servers[0].real_ula == SRV
    # a NAK from the server answers a resolution
    core.resolve(A("192.0.2.77"), t)
    [(d, ask)] = sent(core)
    core.receive(SRV, nak(ask.encode()), t)
    assert core.events() == [Unresolved(A("192.0.2.77"), "NAK")]
    # revalidation: the server's NAK removes the entry (and the kernel's neighbour)
    core.resolve(C2_IP, t + 60)
    core.handle_timer(t + Timers().revalidate_at)
    [(d, ask)] = sent(core)
    assert d == ULA_HARP_SERVER and ask.tpa == C2_IP and lis.cache[C2_IP].reval is Reval.ASK_SERVER
    core.receive(SRV, nak(ask.encode()), t + Timers().revalidate_at + 0.1)
    assert Gone(C2_IP, "NAK") in core.events() and C2_IP not in lis.cache


def test_direct_revalidation_is_answered_by_the_host_only():
    """Server silent at revalidation: the host itself is asked (InHARP_REQUEST to its
    ULA), and only its own answer revalidates the entry."""
    core = registered_client()
    t = core.now
    lis = core.lis[0]
    core.resolve(C2_IP, t + 60)
    core.handle_timer(t + Timers().revalidate_at)
    core.outgoing()
    core.handle_timer(core.timer())  # the server does not answer
    [(d, ask)] = sent(core)
    assert d == C2 and ask.op is Op.INHARP_REQUEST and lis.cache[C2_IP].reval is Reval.ASK_HOST
    core.events()
    answer = Harp(Op.INHARP_REPLY, C2_IP, C1_IP, C2, C1).encode()
    core.receive(ATK, answer, core.now)
    assert lis.cache[C2_IP].reval is Reval.ASK_HOST and core.events() == []
    assert core.counters["rx_dropped_reply_unsolicited"] == 1
    core.receive(C2, answer, core.now)
    assert lis.cache[C2_IP].reval is Reval.NONE and core.events() == [Resolved(C2_IP, C2)]


def test_with_a_server_only_the_server_validates_entries():
    """A host's InHARP_REQUEST (its own, S_ULA checked) used to refresh our entry for
    it; with a HARP server only the server's answers validate, so an entry being
    revalidated with the server stays as it is."""
    core = registered_client()
    t = core.now
    core.resolve(C2_IP, t + 1)
    core.handle_timer(t + Timers().revalidate_at)
    e = core.lis[0].cache[C2_IP]
    assert e.reval is Reval.ASK_SERVER and e.validated == t
    core.receive(C2, Harp(Op.INHARP_REQUEST, C2_IP, C1_IP, C2, C1).encode(), core.now)
    assert core.outgoing()[-1][0] == C2  # answered, to the sender
    assert e.validated == t and e.reval is Reval.ASK_SERVER


def test_spoofed_nak_does_not_remove_an_entry():
    core = registered_client()
    t = core.now
    spoof = Harp(Op.HARP_NAK, C1_IP, C2_IP, C1, ULA_NONE).encode()  # what the server would NAK
    core.receive(ATK, spoof, t + 1)
    assert C2_IP in core.lis[0].cache and core.events() == []
    assert core.counters["rx_dropped_nak_not_from_server"] == 1
    # even while a request for the address is outstanding
    core.resolve(C3_IP, t + 2)
    [(_, ask)] = sent(core)
    core.receive(ATK, nak(ask.encode()), t + 2)
    assert core.events() == [] and C3_IP in core.lis[0].pending
    assert core.counters["rx_dropped_nak_not_from_server"] == 2
    core.receive(SRV, ask.reply(C3_IP, C3, Op.HARP_REPLY).encode(), t + 2.1)
    assert core.events() == [Resolved(C3_IP, C3)]


def test_nak_from_the_server_answering_nothing_is_dropped():
    core = registered_client()
    t = core.now
    core.receive(SRV, Harp(Op.HARP_NAK, C1_IP, C2_IP, C1, ULA_NONE).encode(), t + 1)
    assert C2_IP in core.lis[0].cache and core.events() == []
    assert core.counters["rx_dropped_nak_unsolicited"] == 1


def test_unsolicited_and_foreign_replies_are_dropped():
    core = registered_client()
    t = core.now
    lis = core.lis[0]
    poison = Harp(Op.HARP_REPLY, A("192.0.2.9"), C1_IP, ATK, C1).encode()
    core.receive(ATK, poison, t + 1)  # nobody asked
    core.receive(SRV, poison, t + 1)  # nobody asked, even if the server says so
    assert core.counters["rx_dropped_reply_not_from_server"] == 1
    assert core.counters["rx_dropped_reply_unsolicited"] == 1
    overwrite = Harp(Op.HARP_REPLY, C2_IP, C1_IP, ATK, C1).encode()  # redirect a known address
    core.receive(ATK, overwrite, t + 1)
    core.receive(SRV, overwrite, t + 1)
    assert lis.cache[C2_IP].ula == C2 and core.events() == []
    # an outstanding request answered first by the attacker: the attacker loses
    core.resolve(C3_IP, t + 2)
    [(_, ask)] = sent(core)
    core.receive(ATK, ask.reply(C3_IP, ATK, Op.HARP_REPLY).encode(), t + 2)
    core.receive(C3, ask.reply(C3_IP, C3, Op.HARP_REPLY).encode(), t + 2)  # hosts don't answer for the server
    assert core.events() == [] and C3_IP in lis.pending
    core.receive(SRV, ask.reply(C3_IP, C3, Op.HARP_REPLY).encode(), t + 2.1)
    assert core.events() == [Resolved(C3_IP, C3)]


def test_spoofed_registration_reply_and_self_detection():
    core = registered_client(role="auto")
    t = core.now
    lis = core.lis[0]
    # an InHARP_REPLY "from the server" when no registration is outstanding
    core.receive(ATK, Harp(Op.INHARP_REPLY, SRV_IP, C1_IP, ULA_HARP_SERVER, C1).encode(), t + 1)
    assert lis.servers[0].real_ula == SRV and core.counters["rx_dropped_reply_unsolicited"] == 1
    # our own registration "echoed back" (self-detection) by someone else: we are not the server
    core.receive(ATK, inharp(C1_IP, C1), t + 1)
    assert not lis.serving and not lis.is_server and core.counters["rx_dropped_spoofed_sha"] == 1
    # re-registration answered by the attacker first: ignored, the real server's answer counts
    core.handle_timer(lis.servers[0].next_register)
    [(d, reg)] = sent(core)
    core.receive(ATK, reg.reply(SRV_IP, ULA_HARP_SERVER, Op.INHARP_REPLY).encode(), core.now)
    assert lis.servers[0].real_ula == SRV and lis.servers[0].awaiting_since is not None
    assert core.counters["rx_dropped_reply_not_from_server"] == 1
    core.receive(SRV, reg.reply(SRV_IP, ULA_HARP_SERVER, Op.INHARP_REPLY).encode(), core.now)
    assert lis.servers[0].awaiting_since is None


def test_registration_nak_is_counted_and_changes_nothing():
    core = HarpCore([LisConfig(NET, role="client")], 0.0)
    core.set_port(C1, [C1_IP], 0.0)
    t = 0.0
    while not (reg := [p for d, p in core.outgoing() if d == ULA_HARP_SERVER]):
        core.handle_timer(t)
        t += 1.0
    core.receive(SRV, nak(reg[0]), t)  # e.g. our IP is static on the server for another ULA
    assert core.counters["registration_refused"] == 1 and core.lis[0].phase is Phase.REGISTER
    core.handle_timer(t + Timers().registration_retry)
    assert [d for d, _ in core.outgoing()] == [ULA_HARP_SERVER]  # and it keeps trying
    # once the server's port is known, a NAK of a re-registration from elsewhere is dropped
    core = registered_client()
    lis = core.lis[0]
    core.handle_timer(lis.servers[0].next_register)
    [(_, reg)] = core.outgoing()
    core.receive(ATK, nak(reg), core.now)
    assert core.counters["registration_refused"] == 0 and core.counters["rx_dropped_nak_not_from_server"] == 1
    core.receive(ATK, nak(reg), core.now + Timers().registration_retry)  # not outstanding any more
    assert lis.servers[0].responsive and lis.phase is Phase.OPER_SERVER


# --- Hypothesis: nothing from a non-server source changes a client -------------------------------
IPS = [Z, SRV_IP, C1_IP, C2_IP, C3_IP, A("192.0.2.77"), A("10.0.0.1")]
ULAS = [C1, C2, C3, SRV, ULA_HARP_SERVER, ULA_BROADCAST, ULA_NONE, ATK]
sources = st.one_of(st.sampled_from([ATK, C2, C3]),
                    st.binary(min_size=6, max_size=6).filter(lambda u: u not in (C1, SRV, ULA_HARP_SERVER)))


@st.composite
def from_non_server(draw):
    """(S_ULA, payload): a HARP message from a port that is no HARP server of the LIS,
    as often as not naming itself as sender (which passes the ar$sha check), or junk."""
    src = draw(sources)
    if draw(st.integers(0, 9)) == 0:
        return src, draw(st.binary(max_size=40))
    ula = st.sampled_from(ULAS + [src] * 4)
    msg = Harp(draw(st.sampled_from(list(Op))), draw(st.sampled_from(IPS)), draw(st.sampled_from(IPS)),
               draw(ula), draw(ula), draw(st.sampled_from([28, 1])))
    return src, msg.encode()


def snapshot(core):
    lis = core.lis[0]
    return (lis.phase, sorted(lis.serving), lis.is_server,
            {ip: (e.ula, e.static, e.validated, e.reval) for ip, e in lis.cache.items()},
            dict(lis.server_table), {ip: p.attempts for ip, p in lis.pending.items()}, dict(lis.negative),
            [(s.responsive, s.real_ula, s.awaiting_since, s.next_register, list(s.unanswered))
             for s in lis.servers])


@settings(max_examples=300, deadline=None)
@given(st.lists(from_non_server(), max_size=12), st.booleans(), st.booleans())
def test_fuzz_nothing_from_a_non_server_changes_a_client(msgs, outstanding, revalidating):
    core = registered_client(role="auto")
    t = core.now
    if outstanding:
        core.resolve(C3_IP, t)  # a request for C3_IP is outstanding
    if revalidating:
        core.resolve(C2_IP, t + 1)
        core.handle_timer(t + Timers().revalidate_at)  # C2_IP is being revalidated with the server
        t = core.now
    core.outgoing()
    core.events()
    before = snapshot(core)
    for src, raw in msgs:
        core.receive(src, raw, t)
        assert snapshot(core) == before
        assert not [e for e in core.events() if isinstance(e, (Resolved, Gone, Unresolved))]
        for d, _out in core.outgoing():  # it may answer a request for its own address, to the sender
            assert d == src
