"""Half-router planning and forwarding on the Appendix-B network (spec §4.3)."""

from pktwayd import messages as M
from pktwayd.constants import PT, ErrTE, RrpTE
from pktwayd.eep import L2RH, Packet, decode
from pktwayd.engine import Engine
from pktwayd.rrp import Addr, Mtur
from tests.sim.test_rrp_appendix_b import ADDR, build
from pktwayd.topology import converge

H0, H2, H8 = ADDR(0), ADDR(2), ADDR(8)
RAB, RAD, RBA = ADDR(21), ADDR(25), ADDR(22)


def engines():
    routers = build()
    converge(routers)
    out = {a: Engine(hr) for a, hr in routers.items()}
    for e in out.values():
        e.twin_alive, e.twin_heard = True, 0.0  # as after their first exchange
    return out


def only(actions):
    assert len(actions) == 1, actions
    return actions[0]


def test_gvl2_answers_match_the_simulation():
    e = engines()
    where, to, pkt = only(e[RAB].from_san(M.gvl2(RAB, H0, H8)))
    assert (where, to) == ("san", H0) and pkt.te == RrpTE.RDRC and M.records(pkt) == [Addr(H8), Addr(RAD)]
    where, to, pkt = only(e[RAD].from_san(M.gvl2(RAD, H0, H8)))
    assert pkt.te == RrpTE.L2SR
    recs = M.records(pkt)
    assert recs[0] == Addr(H8)
    best = recs[1]
    assert best.q == 4 and best.mtu == Mtur(256) and len(best.route) == 2  # D: Rda->Rde, E: Red->H8
    where, to, pkt = only(e[RAB].from_san(M.gvl2(RAB, H0, H2)))
    recs = M.records(pkt)
    assert pkt.te == RrpTE.L2SR and recs[1].q == 2 and recs[1].mtu == Mtur(1024) and len(recs[1].route) == 1
    assert decode(pkt.encode()) == pkt


def test_l3_forward_and_redirect():
    e = engines()
    data = Packet(dt=H8, sa=H0, pt=PT.USER, data=b"to E")
    acts = e[RAB].from_san(data)
    assert ("san", RAD, data) in acts  # forwarded on A to Rad ...
    redirect = [p for w, to, p in acts if to == H0][0]
    assert redirect.te == RrpTE.RDRC and M.records(redirect) == [Addr(H8), Addr(RAD)]  # ... and H0 redirected
    where, _, p = only(e[RAD].from_san(data))
    assert where == "twin" and p.tail == 0  # EI shifted (still 0: no error)


def test_unknown_destination_and_mtu():
    e = engines()
    acts = e[RAB].from_san(Packet(dt=0x7000, sa=H0, pt=PT.USER, data=b"?"))
    (_, to, p), = acts
    assert to == H0 and p.pt == PT.ERR and p.te == ErrTE.UNK and M.records(p) == [Addr(0x7000)]
    big = Packet(dt=H8, sa=H0, pt=PT.USER, data=bytes(8 * 300))  # over SAN E's 256-word MTU
    (_, to, p), = e[RAD].from_san(big)
    assert p.pt == PT.ERR and p.te == ErrTE.GENERAL and to == H0


def test_l2_route_is_consumed_by_the_twin():
    e = engines()
    pkt = Packet(dt=H2, sa=H0, pt=PT.USER, data=b"x", prefix=(L2RH(bytes([0, 3, 0])),))
    where, _, p = only(e[RAB].from_san(pkt))
    assert where == "twin" and p.prefix == pkt.prefix
    where, to, p = only(e[RBA].from_twin(p))
    assert (where, to) == ("san", H2) and p.prefix == ()


def test_wru_is_answered_with_info():
    e = engines()
    (_, to, p), = e[RAB].from_san(M.rrp(RrpTE.WRU, RAB, H0))
    assert to == H0 and p.te == RrpTE.INFO and M.records(p)[0] == Addr(RAB)


def test_routing_tables_travel_as_rtbl_messages():
    """The whole Appendix-B exchange carried as encoded RTBL packets reaches the same state."""
    from collections import deque

    from pktwayd.eep import decode as eep_decode
    from pktwayd.routing import records_to_rt, rt_to_records
    from tests.sim.test_rrp_appendix_b import REASONABLE_E, paths

    routers = build()
    eng = {a: Engine(hr) for a, hr in routers.items()}
    q = deque((a, act) for a, e in eng.items() for act in e.start())
    while q:
        src, (where, to, pkt) = q.popleft()
        dest = routers[src].twin if where == "twin" else to
        wire = eep_decode(pkt.encode())  # really through the codec
        e = eng[dest]
        acts = e.from_twin(wire) if where == "twin" else e.from_san(wire)
        q.extend((dest, a) for a in acts)
    assert paths(routers[RAB], "E") == REASONABLE_E and len(routers[RAB].rts) == 18
    rt = routers[RAB].routes(H8)[0][3]
    assert records_to_rt(rt_to_records(rt)) == rt
    # GVRT: the twin gets my LRT and buddy-learned RTs, a buddy my twin-learned ones
    assert {r.rcvf for _, r in eng[RAB].gvrt_answer(RBA)} and all(
        routers[RAB].learned_from.get(r.rcvf) == RBA for _, r in eng[RAB].gvrt_answer(RAD))


def test_hrdown_packet_withdraws_relays_and_relearns():
    e = engines()
    rab, rda = e[RAB], ADDR(26)
    before = len(rab.hr.rts)
    msg = M.err(ErrTE.HRDOWN, RAB, RAD, [Addr(rda)])
    acts = rab.from_san(decode(msg.encode()))
    assert len(rab.hr.rts) < before and not any(rda in r for r in rab.hr.rts)
    relayed = {(w, to) for w, to, p in acts if p.pt == PT.ERR and p.te == ErrTE.HRDOWN}
    assert relayed and ("san", RAD) not in relayed  # never back to the sender
    assert rab.from_san(decode(msg.encode())) == []  # nothing left to delete: not relayed again
    assert {p.te for _, _, p in rab.handle_timer(0.5)} == {RrpTE.WRU}  # twin and buddy probes only
    assert rab.timer() == 1.0
    gvrt = rab.handle_timer(1.0)
    assert {(w, to) for w, to, p in gvrt if p.te == RrpTE.GVRT} == {("twin", None), ("san", ADDR(23)), ("san", RAD)}


def test_tell_by_address_name_and_capability():
    """MessageWay Appendix C, steps 1-2: who is a floating-point DSP handling 64-bit data?"""
    from dataclasses import replace

    from pktwayd.rrp import Capa, Name
    from pktwayd.topology import converge as flood

    routers = build()
    # H8 on SAN E is a DSP "Super" with 32- and 64-bit IEEE words; H4 on C one with 32-bit only
    for hr in routers.values():
        hr.lrt_nodes = tuple(replace(n, name=b"Super", caps=((7, bytes([4, 8])),)) if n.addr == H8 else
                             replace(n, caps=((7, bytes([4])),)) if n.addr == ADDR(4) else n for n in hr.lrt_nodes)
        hr.rts[(hr.addr,)] = replace(hr.lrt, nodes=hr.lrt_nodes)
    flood(routers)
    e = Engine(routers[RAB])
    (_, to, p), = e.from_san(M.rrp(RrpTE.TELL, RAB, H0, [Capa(7, bytes([8]))]))
    assert to == H0 and p.te == RrpTE.INFO
    assert M.records(p) == [Addr(H8), Name(b"Super"), Capa(7, bytes([4, 8]))]
    (_, _, p), = e.from_san(M.rrp(RrpTE.TELL, RAB, H0, [Name(b"Super")]))
    assert M.records(p)[0] == Addr(H8)
    (_, _, p), = e.from_san(M.rrp(RrpTE.TELL, RAB, H0, [Capa(9)]))  # nobody is a printer
    assert p.pt == PT.ERR and p.te == ErrTE.UNK and M.records(p) == [Addr(0), Capa(9)]


def _with_options(total_words: int, dest: int) -> Packet:
    """A packet of ``total_words`` words (header 2 + options + DB + TAIL 1) carrying two
    optional header fields of 255 bytes, i.e. floor((255+9)/8) = 33 words each (spec §1.8)."""
    from pktwayd.eep import OptField

    opts = (OptField(1, bytes(255)), OptField(2, bytes(255)))
    pkt = Packet(dt=dest, sa=H0, pt=PT.USER, data=bytes(8 * (total_words - 2 - 66 - 1)), options=opts)
    assert len(pkt.encode()) == 8 * total_words and pkt.words == total_words
    return pkt


def test_mtu_counts_the_words_of_optional_fields_not_their_number():
    """Issue item 11: a 1059-word packet with two 33-word OH fields crossed SAN B (1024 words),
    because the check added 2 (the number of fields) instead of 66 (their words)."""
    e = engines()
    big = _with_options(1059, H2)
    (where, to, p), = e[RAB].from_san(big)  # the best route to H2 has MinMTU 1024 (SAN B)
    assert (where, to) == ("san", H0) and p.pt == PT.ERR and p.te == ErrTE.GENERAL
    assert e[RAB].counters["l3_over_mtu"] == 1 and e[RAB].counters["l3_forwarded"] == 0
    (where, _, p), = e[RBA].from_twin(big)  # Rba (its SAN is B) refuses it too; the ERR goes back via Rab
    assert where == "twin" and p.dt == H0 and p.te == ErrTE.GENERAL
    assert e[RBA].counters["l3_over_mtu"] == 1
    # the same packet fits a 2048-word path: H6 on SAN D, via Rad on A
    acts = e[RAB].from_san(_with_options(1059, ADDR(6)))
    assert ("san", RAD) in [(w, to) for w, to, _ in acts] and e[RAB].counters["l3_forwarded"] == 1
    # boundary: exactly the MTU passes, one word more does not
    assert ("twin", None) in [(w, to) for w, to, _ in e[RAB].from_san(_with_options(1024, H2))]
    (_, to, p), = e[RAB].from_san(_with_options(1025, H2))
    assert to == H0 and p.te == ErrTE.GENERAL and e[RAB].counters["l3_over_mtu"] == 2


# --- optional header fields (spec §1.8): no OH type is defined, so every type is unknown ------------
def _oh(*fields):
    from pktwayd.eep import OptField

    return tuple(OptField(t, data, mandatory=m) for t, data, m in fields)


def test_unknown_mandatory_header_field_is_dropped_with_err_general():
    """Issue item 12: T=1 and an unknown type: do not process the message; ERR/GENERAL
    (a raw copy of the message) to its SA, the drop counted."""
    e = engines()
    pkt = Packet(dt=H8, sa=H0, pt=PT.USER, data=b"to E", options=_oh((1, b"ab", False), (5, b"\xd1\xd2\xd3\xd4", True)))
    (where, to, p), = e[RAB].from_san(pkt)
    assert (where, to) == ("san", H0) and p.pt == PT.ERR and p.te == ErrTE.GENERAL and p.dt == H0 and p.sa == RAB
    assert p.data.startswith(pkt.encode()[:-8])  # the message as it arrived (TAIL after the EI rule)
    assert e[RAB].counters["drop_oh_unknown_mandatory"] == 1 and e[RAB].counters["l3_forwarded"] == 0
    # the same from the twin (L3): refused there too, the ERR goes back through the twin
    (where, _, p), = e[RBA].from_twin(replace_dt(pkt, H2))
    assert where == "twin" and p.dt == H0 and p.te == ErrTE.GENERAL
    assert e[RBA].counters["drop_oh_unknown_mandatory"] == 1


def replace_dt(pkt, dt):
    from dataclasses import replace

    return replace(pkt, dt=dt)


def test_unknown_mandatory_header_field_in_a_message_for_me_is_not_processed():
    e = engines()
    wru = M.rrp(RrpTE.WRU, RAB, H0)
    from dataclasses import replace

    (_, to, p), = e[RAB].from_san(replace(wru, options=_oh((9, b"", True))))
    assert to == H0 and p.pt == PT.ERR and p.te == ErrTE.GENERAL  # no INFO
    assert e[RAB].counters["rrp_WRU"] == 0 and e[RAB].counters["drop_oh_unknown_mandatory"] == 1
    # an INFO registration (Hey-You) with one is not processed either: nothing registered
    info = replace(M.info(0x7FFFFE, 0x77, 0x77), options=_oh((9, b"", True)))
    acts = e[RAB].from_san(info, src_route=bytes([9, 3, 0]))
    assert 0x77 not in e[RAB].registered and e[RAB].counters["drop_oh_unknown_mandatory"] == 2
    assert [p.te for _, _, p in acts] == []  # SA 0x77 is not (yet) on my SAN: no route for the ERR
    # an ERR message is dropped without an ERR about it (no ERR storms), still counted
    bad_err = replace(M.unk(RAB, H0, 0x7000), options=_oh((9, b"", True)))
    assert e[RAB].from_san(bad_err) == [] and e[RAB].counters["drop_oh_unknown_mandatory"] == 3


def test_unknown_optional_header_fields_are_forwarded_unchanged_and_ignored_by_me():
    e = engines()
    opts = _oh((1, b"ab", False), (63, bytes(40), False))
    pkt = Packet(dt=H8, sa=H0, pt=PT.USER, data=b"to E", options=opts)
    acts = e[RAB].from_san(pkt)
    fwd = [p for w, to, p in acts if (w, to) == ("san", RAD)]
    assert fwd == [pkt] and decode(fwd[0].encode()).options == opts  # parts 2-5 arrive exactly as sent (§1.1)
    from dataclasses import replace

    # for me: the unknown optional fields are dropped, the message processed
    (_, to, p), = e[RAB].from_san(replace(M.rrp(RrpTE.WRU, RAB, H0), options=opts))
    assert to == H0 and p.te == RrpTE.INFO
    (where, _, p), = e[RAB].from_san(Packet(dt=RAB, sa=H0, pt=PT.USER, data=b"mine", options=opts))
    assert where == "local" and p.options == () and p.data == b"mine"
    assert e[RAB].counters["oh_unknown_optional_ignored"] == 4


def test_trailer_fields_and_l2_forwarding_do_not_look_at_optional_fields():
    """OTs are opaque (the OT area is what lies between the DB and the TAIL, PC §1.8), even
    in OH format with T=1; an L2-forwarded packet's EEP header is not processed (§3.6)."""
    from pktwayd.eep import OptField

    e = engines()
    ot = OptField(5, b"crc!", mandatory=True).encode(last=True)
    pkt = Packet(dt=H8, sa=H0, pt=PT.USER, data=b"x", options=_oh((1, b"", False)), trailer=ot)
    assert ("san", RAD, pkt) in e[RAB].from_san(pkt)
    l2 = Packet(dt=H2, sa=H0, pt=PT.USER, data=b"x", prefix=(L2RH(bytes([0, 3, 0])),), options=_oh((5, b"", True)))
    where, _, p = only(e[RAB].from_san(l2))
    assert where == "twin"
    where, to, p = only(e[RBA].from_twin(p))
    assert (where, to) == ("san", H2) and p.options == l2.options
    assert e[RAB].counters["drop_oh_unknown_mandatory"] == 0


def test_an_rt_that_outgrows_rl_is_kept_but_not_passed_on_counted():
    """An RTBL of exactly 65535 words from the twin: the copy to pass on gains an RCVF
    address, one word more than RL can hold; that used to raise out of the engine."""
    from pktwayd.rrp import Mtur as MT, Name, Rcvf, Rthd, Srqr, encode_records

    e = engines()
    rt = Rthd(0x1FF, 7, (Srqr(0, (), MT(0)), Rcvf((RBA,)), Addr(0x7100), Name(bytes(8 * 65528 - 4)), Srqr(1, ())))
    body = encode_records([rt])
    assert int.from_bytes(body[2:4], "big") == 0xFFFF
    pkt = M.rrp(RrpTE.RTBL, RAB, RBA, [rt])
    acts = e[RAB].from_twin(decode(pkt.encode()))
    assert (RAB, RBA) in e[RAB].hr.rts and e[RAB].hr.routes(0x7100)
    assert e[RAB].counters["rtbl_unencodable"] == 2 and acts == []  # one per buddy (Rac, Rad)


def test_rtbl_nested_a_thousand_levels_deep_is_counted_not_a_crash():
    from tests.unit.test_rrp import _nested_rthd

    e = engines()
    pkt = Packet(dt=RAB, sa=RBA, pt=PT.RRP, te=RrpTE.RTBL, data=_nested_rthd(1000))
    (where, _, p), = e[RAB].from_twin(decode(pkt.encode()))
    assert where == "twin" and p.pt == PT.ERR and p.te == ErrTE.GENERAL and e[RAB].counters["rrp_bad"] == 1


def test_l2_forwarding_checks_the_mtu_of_my_san_too():
    """The 1059-word packet with two 33-word OH fields, source-routed (L2) through Rab/Rba
    onto SAN B (1024 words): Rba refuses it (ERR/GENERAL back through its twin)."""
    e = engines()
    route = (L2RH(bytes([0, 3, 0])),)  # Rba -> H2, port 0 of SAN B
    for words, ok in ((1059, False), (1025, False), (1024, True)):  # as sent on SAN B, the L2RH consumed
        pkt = replace_prefix(_with_options(words, H2), route)
        assert pkt.words == words + 1
        where, _, p = only(e[RAB].from_san(pkt))
        assert where == "twin"
        where, to, p = only(e[RBA].from_twin(p))
        if ok:
            assert (where, to) == ("san", H2) and p.words == words
        else:
            assert where == "twin" and p.dt == H0 and p.pt == PT.ERR and p.te == ErrTE.GENERAL
            assert p.data[:8] == pkt.encode()[8:16]  # the copy starts at the EEP header (§2.2)
    assert e[RBA].counters["l2_over_mtu"] == 2


def replace_prefix(pkt, prefix):
    from dataclasses import replace

    return replace(pkt, prefix=prefix)


def test_embedded_packet_to_a_router_goes_on_from_there():
    from pktwayd.special import embed

    e = engines()
    inner = Packet(dt=H2, sa=H0, pt=PT.USER, data=b"x", prefix=(L2RH(bytes([0, 3, 0])),))
    where, _, p = only(e[RAB].from_san(embed(inner, RAB, H0)))
    assert where == "twin" and p.prefix == inner.prefix and e[RAB].counters["embedded_unwrapped"] == 1
    nested = embed(embed(inner, RAB, H0), RAB, H0)
    assert e[RAB].from_san(nested) == [] and e[RAB].counters["embedded_nested_dropped"] == 1
    (_, to, err), = e[RAB].from_san(Packet(dt=RAB, sa=H0, pt=PT.EMBEDDED, data=bytes(8)))
    assert to == H0 and err.pt == PT.ERR and err.te == ErrTE.GENERAL


def test_one_redirect_per_node_and_destination_per_interval():
    from pktwayd.constants import REDIRECT_INTERVAL_S

    e = engines()
    rab = e[RAB]
    data = Packet(dt=H8, sa=H0, pt=PT.USER, data=b"to E")
    rdrcs = []
    for now in (0.0, 0.1, 0.5, REDIRECT_INTERVAL_S + 0.01, REDIRECT_INTERVAL_S + 0.2):
        rab.now = now
        acts = rab.from_san(data)
        assert ("san", RAD, data) in acts  # every packet is forwarded ...
        rdrcs += [now for w, to, p in acts if to == H0 and p.te == RrpTE.RDRC]
    assert rdrcs == [0.0, REDIRECT_INTERVAL_S + 0.01] and rab.counters["rdrc_held"] == 3  # ... redirects held
