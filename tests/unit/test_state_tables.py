"""The state machines kept as tables (daemons/transitions.py): the cable link
(daemons/link/link.py), HARP's LIS phase and cache revalidation (harpd/states.py), ST's
connection and transfer (stpd/states.py).

Every defined transition is reachable from a state the machine is created in; a walk
of random events follows the table exactly and every undefined pair raises the error
of whoever caused it.  Then the cores themselves: a peer's out-of-state RD/DA/DC or
registration answer is counted, never fatal."""

import pytest
from hypothesis import given, settings, strategies as st

from daemons.link.link import LINK_TABLE, LinkState
from daemons.transitions import TransitionTable
from daemons.wire.errors import LocalProtocolError, RemoteProtocolError
from harpd.states import PHASE_MACHINE, REVAL_MACHINE, Phase, PhaseEvent
from stpd.constants import Flag, Op
from stpd.core import StCore
from stpd.drops import Drop
from stpd.states import TRANSFER_MACHINE, VC_MACHINE, State, VcEvent
from stpd.wire import Header, decode

MACHINES = [LINK_TABLE, VC_MACHINE, TRANSFER_MACHINE, PHASE_MACHINE, REVAL_MACHINE]


def _enums(m: TransitionTable):
    state_t = type(next(iter(m.initial)))
    event_t = type(next(iter(m.table))[1])
    return list(state_t), list(event_t)


@pytest.mark.parametrize("m", MACHINES, ids=lambda m: m.name)
def test_every_transition_is_reachable(m):
    reach = m.reachable()
    assert all(frm in reach for frm, _ in m.table), m.name
    states, _ = _enums(m)
    # every state but the terminal ones leaves somewhere
    assert set(states) <= reach


@pytest.mark.parametrize("m", MACHINES, ids=lambda m: m.name)
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_random_walk_follows_the_table(m, data):
    states, events = _enums(m)
    state = data.draw(st.sampled_from(sorted(m.initial, key=lambda s: s.name)))
    for ev in data.draw(st.lists(st.sampled_from(events), max_size=30)):
        if (state, ev) in m.table:
            state = m.next(state, ev)
            continue
        err = RemoteProtocolError if ev in m.remote else LocalProtocolError
        with pytest.raises(err) as info:
            m.next(state, ev)
        assert info.value.state == state.name and info.value.event == ev.name
        assert not isinstance(info.value, LocalProtocolError if err is RemoteProtocolError else RemoteProtocolError)


def test_a_remote_event_never_raises_a_local_error():
    """The split is by cause: every undefined pair of a peer's event is the peer's."""
    for m in MACHINES:
        states, events = _enums(m)
        for s in states:
            for e in events:
                if (s, e) not in m.table:
                    with pytest.raises(RemoteProtocolError if e in m.remote else LocalProtocolError):
                        m.next(s, e)


def test_phase_machine_matches_rfc2835_client():
    """Only a probe phase can discover a broadcast fabric; a lost server means registering again."""
    assert PHASE_MACHINE.next(Phase.PROBE, PhaseEvent.BROADCAST_ECHO) is Phase.OPER_BCAST
    with pytest.raises(RemoteProtocolError):
        PHASE_MACHINE.next(Phase.OPER_BCAST, PhaseEvent.REGISTERED)
    assert PHASE_MACHINE.next(Phase.OPER_SERVER, PhaseEvent.SERVERS_LOST) is Phase.REGISTER


A, B = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")


def _pair():
    a, b = StCore(0.0), StCore(0.0)
    b.listen(7)
    vid = a.connect(B, 7, 0.0)
    for _ in range(4):
        for _dst, core, src in ((B, b, A), (A, a, B)):
            for _peer, _dc, hdr, payload in (a if core is b else b).outgoing():
                core.receive(src, hdr + bytes(payload), 0.0)
    (bvc,) = b.vcs.values()
    return a, b, a.vcs[vid], bvc


@pytest.mark.parametrize("op", [Op.DA, Op.DC])
def test_teardown_op_on_a_connected_vc_is_counted_not_obeyed(op):
    a, b, avc, bvc = _pair()
    assert avc.state is State.CONNECTED and bvc.state is State.CONNECTED
    h = Header(op, Flag.INTERRUPT, d_port=avc.local_port, s_port=bvc.local_port, d_key=avc.local_key,
               offset=bvc.local_key)
    a.receive(B, h.encode(), 1.0)
    assert a.counters[Drop.OUT_OF_STATE] == 1 and avc.state is State.CONNECTED and avc.vid in a.vcs
    assert VC_MACHINE.allows(avc.state, VcEvent.USE)


def test_close_twice_is_a_no_op_and_the_teardown_completes():
    a, b, avc, bvc = _pair()
    a.close(avc.vid, 1.0)
    a.close(avc.vid, 1.0)
    out = a.outgoing()
    assert avc.state is State.RD_SENT and [decode(hdr)[0].op for _, _, hdr, _ in out] == [Op.RD]
    for _ in range(3):
        for _peer, _dc, hdr, payload in out:
            b.receive(A, hdr + bytes(payload), 1.0)
        for _peer, _dc, hdr, payload in b.outgoing():
            a.receive(B, hdr + bytes(payload), 1.0)
        out = a.outgoing()
    assert not a.vcs and not b.vcs and avc.state is bvc.state is State.CLOSED


def test_a_registration_answer_the_phase_does_not_allow_is_counted_not_obeyed():
    """HARP: a server's registration answer arriving after the LIS left the phases that
    register (here: it was switched to broadcast meanwhile) is RemoteProtocolError in
    PHASE_MACHINE: counted rx_dropped_out_of_state; the server is not marked responsive."""
    from ipaddress import IPv4Address, IPv4Network

    from daemons.constants import ULA_HARP_SERVER
    from harpd.constants import Op as HOp
    from harpd.core import HarpCore, LisConfig
    from harpd.drops import Drop as HDrop
    from harpd.wire import decode as hdecode

    c1, srv = bytes.fromhex("020000000002"), bytes.fromhex("020000000001")
    core = HarpCore([LisConfig(IPv4Network("192.0.2.0/24"), role="client")], 0.0)
    core.set_port(c1, [IPv4Address("192.0.2.2")], 0.0)
    t, reg = 0.0, []
    while not reg:
        core.handle_timer(t)
        reg = [hdecode(p) for d, p in core.outgoing() if d == ULA_HARP_SERVER]
        t += 1.0
    lis = core.lis[0]
    lis.phase = Phase.OPER_BCAST  # the fabric turned out to broadcast while the registration was out
    core.receive(srv, reg[0].reply(IPv4Address("192.0.2.1"), ULA_HARP_SERVER, HOp.INHARP_REPLY).encode(), t)
    assert core.counters[HDrop.OUT_OF_STATE] == 1 and core.counters["rx_dropped_out_of_state"] == 1
    assert lis.phase is Phase.OPER_BCAST and not lis.servers[0].responsive


def test_the_link_moves_through_its_table_up_failed_and_reset_by_its_peer():
    """A pair of Links (the oracle; CLink mirrors it under the differential tests): up
    by RESET_ACK, down by the dead interval (FAILED), up again; a peer's new RESET
    while up keeps it up with the new nonce."""
    from tests.unit.linkpair import Pair

    pair = Pair()
    pair.run(0.05)
    a, b = pair.links
    assert pair.up() and a.state is LinkState.UP
    pair.cut = True  # the cable goes silent: each side fails on its dead interval
    pair.run(a.timers.dead_interval + 0.05)
    assert a.state is LinkState.RESETTING and a.counters["link_down_silent"] >= 1
    pair.cut = False
    pair.run(0.2)
    assert pair.up()
    old = a.peer_nonce
    b.last_heard = pair.now - b.timers.dead_interval - 0.001  # b alone has missed a: FAILED,
    b.handle_timer(pair.now)  # it resets with a new nonce, and a (up) takes its RESET: PEER_RESET
    pair.run(0.2)
    assert pair.up() and a.peer_nonce != old and a.counters["link_down_peer_reset"] == 1
