"""IP over PacketWay: the IP/ICMP helpers (ippacket) and the sans-IO pw0 core (ipnode):
resolution, queues, MTU and the ICMP errors, every input from the SAN or pw0 hostile."""

import ipaddress
import struct

from hypothesis import given, settings, strategies as st

from pktwayd import constants as K
from pktwayd import messages as M
from pktwayd.constants import ADDR_HEY_YOU, PT, ErrTE, RrpTE
from pktwayd.eep import L2RH, Packet, decode
from pktwayd.ippacket import checksum, parse, too_big
from pktwayd.ipnode import IpNode, plateau_below
from pktwayd.rrp import Addr, Ladr, Mtur, Name, Srqr

ME, PEER, OTHER = 0x40, 0x60, 0x61
A4, B4, C4 = "10.77.0.1", "10.77.0.2", "10.77.0.3"
A6, B6 = "fd77::1", "fd77::2"


def v4(src=A4, dst=B4, size=100, df=True, proto=1) -> bytes:
    h = struct.pack(">BBHHHBBH4s4s", 0x45, 0, size, 1, 0x4000 if df else 0, 64, proto, 0,
                    ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed)
    h = h[:10] + struct.pack(">H", checksum(h)) + h[12:]
    return h + bytes(size - 20)


def v6(src=A6, dst=B6, size=100) -> bytes:
    return struct.pack(">IHBB16s16s", 6 << 28, size - 40, 59, 64, ipaddress.IPv6Address(src).packed,
                       ipaddress.IPv6Address(dst).packed) + bytes(size - 40)


def pw(actions):
    return [a[1] for a in actions if a[0] == "pw"]


def tun(actions):
    return [a[1] for a in actions if a[0] == "tun"]


def alive(n: IpNode, t: float, route=b"r") -> None:
    """My router says something (its INFO) at ``t``."""
    n.from_pw_bytes(M.info(ME, 0x50, 0x50, None, ()).encode(), "pw0", route, t)


def node(**kw) -> IpNode:
    return IpNode(ME, peers={B4: PEER, B6: PEER}, name=A4.encode(), **{"router": b"r"} | kw)


# --- ippacket ---------------------------------------------------------------------------------
def test_parse_v4_v6():
    assert parse(v4()) == (K.PT_IPV4, ipaddress.ip_address(A4), ipaddress.ip_address(B4))
    assert parse(v6()) == (K.PT_IPV6, ipaddress.ip_address(A6), ipaddress.ip_address(B6))
    assert parse(v4()[:50]) is None  # total length beyond the bytes
    assert parse(v6()[:60]) is None
    assert parse(b"") is None and parse(b"\x45" + bytes(10)) is None


@given(st.binary(max_size=200))
def test_parse_never_raises(data):
    parse(data)
    too_big(data, 1280)


def test_icmp_frag_needed_is_valid():
    pkt = v4(size=3000)
    icmp = too_big(pkt, 1400)
    ip, body = icmp[:20], icmp[20:]
    assert checksum(ip) == 0 and checksum(body) == 0  # both checksums verify
    assert ip[16:20] == pkt[12:16] and ip[12:16] == pkt[16:20] and ip[9] == 1
    assert body[:2] == b"\x03\x04" and struct.unpack(">H", body[6:8])[0] == 1400
    assert body[8:] == pkt[:28]  # the header and 8 bytes of its data


def test_icmpv6_packet_too_big_is_valid():
    pkt = v6(size=3000)
    icmp = too_big(pkt, 1400)
    assert len(icmp) <= 1280 and icmp[6] == 58
    src, dst, body = icmp[8:24], icmp[24:40], icmp[40:]
    assert src == pkt[24:40] and dst == pkt[8:24] and body[0] == 2
    assert struct.unpack(">I", body[4:8])[0] == 1400
    pseudo = src + dst + struct.pack(">I3xB", len(body), 58)
    assert checksum(pseudo + body) == 0


# --- the core: pw0 -> SAN ---------------------------------------------------------------------
def test_start_announces_and_asks_route_mtu():
    out = pw(node().start())
    assert out[0].te == RrpTE.INFO and M.records(out[0]) == [Addr(ME), Name(A4.encode()), Ladr((0xE00001, 0xE80001))]
    assert out[1].te == RrpTE.GVL2 and M.records(out[1]) == [Addr(PEER)]


def test_ip_packets_become_l3_packets_of_their_ethertype():
    n = node()
    (p4,) = pw(n.from_tun(v4(), 0))
    (p6,) = pw(n.from_tun(v6(), 0))
    assert (p4.dt, p4.sa, p4.pt, p4.data) == (PEER, ME, 0x0800, v4())
    assert (p6.dt, p6.pt, p6.data) == (PEER, 0x86DD, v6())
    assert decode(p4.encode()).data == v4()  # the pad is not part of the IP packet
    assert n.counters["tx_ipv4"] == 1 and n.counters["tx_ipv6"] == 1


def test_mtu_follows_the_route_at_bring_up_then_icmp_per_destination():
    n = node()
    n.start()
    reply = M.l2sr(ME, 0x50, PEER, [(2, (), 1024)])
    assert n.from_pw(reply, b"r") == [("mtu", 8192 - 24)]
    assert pw(n.from_tun(v4(size=8168), 0))
    # the route shrinks: the router returns my packet (ERR/GENERAL with its copy)
    big = Packet(dt=PEER, sa=ME, pt=0x0800, data=v4(size=6000))
    out = n.from_pw(M.err(ErrTE.GENERAL, ME, 0x50, raw=big.encode()[:K.ERR_GENERAL_COPY_MAX]), b"r")
    (ask,) = pw(out)
    assert ask.te == RrpTE.GVL2 and not tun(out)
    out = n.from_pw(M.l2sr(ME, 0x50, PEER, [(2, (), 512)]), b"r")
    (icmp,) = tun(out)
    assert ("mtu", 4072) not in out  # pw0 keeps its MTU: the IP stack learns per destination
    assert icmp[20:22] == b"\x03\x04" and struct.unpack(">H", icmp[26:28])[0] == 4096 - 24
    # now known: a too-big packet with DF is answered at once, without DF dropped (counted)
    (icmp,) = tun(n.from_tun(v4(size=5000), 0))
    assert struct.unpack(">H", icmp[26:28])[0] == 4072
    assert n.from_tun(v4(size=5000, df=False), 0) == [] and n.counters["tun_drop_over_mtu_fragmentable"] == 1
    (icmp6,) = tun(n.from_tun(v6(size=5000), 0))
    assert icmp6[40] == 2 and struct.unpack(">I", icmp6[44:48])[0] == 4072


def test_pw0_mtu_follows_the_routes_every_recheck():
    n = IpNode(ME, peers={B4: PEER, C4: OTHER}, mtu_recheck=30.0, router=b"r")
    assert pw(n.handle_timer(500.0)) == [] and not n.mtu_queries  # nothing asked before start (no port yet)
    n.now = 0.0
    n.start()
    assert n.from_pw(M.l2sr(ME, 0x50, PEER, [(2, (), 8192)]), b"r") == []  # waits for every peer
    assert n.from_pw(M.l2sr(ME, 0x50, OTHER, [(2, (), 1024)]), b"r") == [("mtu", 8192 - 24)]
    assert n.timer() == K.IP_ROUTER_PROBE_S  # my router's probe comes first
    alive(n, 29.0)
    assert n.handle_timer(29.0) == []
    asks = pw(n.handle_timer(30.0))
    assert sorted(M.records(p)[0].addr for p in asks if p.te == RrpTE.GVL2) == [PEER, OTHER]
    n.from_pw(M.l2sr(ME, 0x50, OTHER, [(2, (), 2048)]), b"r")  # grew
    assert n.from_pw(M.l2sr(ME, 0x50, PEER, [(2, (), 4096)]), b"r") == [("mtu", 2048 * 8 - 24)]
    sent = n.counters["gvl2_sent"]
    for t in (60.0, 61.5, 62.5, 63.5):  # nobody answers: asked 3 times, then pw0 keeps what it had
        alive(n, t)
        n.handle_timer(t)
    assert n.counters["gvl2_sent"] - sent == 2 * K.IP_RESOLVE_TRIES and n.counters["mtu_query_unanswered"] == 2
    assert n.mtu == 2048 * 8 - 24 and n.counters["mtu_changed"] == 2


def test_no_recheck_when_fixed_or_disabled():
    for kw in ({"mtu": 1400}, {"mtu_recheck": 0}):
        n = node(**kw)
        assert [p.te for p in pw(n.start())] == [RrpTE.INFO, RrpTE.GVL2]  # per-destination limits all the same
        n.from_pw(M.l2sr(ME, 0x50, PEER, [(2, (), 1024)]), b"r")
        assert n.timer() == K.IP_ROUTER_PROBE_S  # my router's probe only
        assert not [p for p in pw(n.handle_timer(1000.0)) if p.te == RrpTE.GVL2]


def test_unanswered_mtu_query_falls_back_to_a_plateau():
    n = node()
    big = Packet(dt=OTHER, sa=ME, pt=0x86DD, data=v6(dst="fd77::3", size=9000))
    n.from_pw(M.err(ErrTE.GENERAL, ME, 0x50, raw=big.encode()[:512]), b"r")
    (icmp,) = tun(n.handle_timer(10.0))
    assert struct.unpack(">I", icmp[44:48])[0] == plateau_below(9000, True) == 8166


def test_resolution_by_tell_name_queues_then_sends():
    n = node()
    out = pw(n.from_tun(v4(dst=C4), 0))
    assert out[0].te == RrpTE.TELL and M.records(out[0]) == [Name(C4.encode())]
    assert n.from_tun(v4(dst=C4), 0) == []  # queued, one question only
    info = M.rrp(RrpTE.INFO, ME, 0x50, [Addr(OTHER), Name(C4.encode())])
    sent = pw(n.from_pw(info, b"r"))
    assert [p.dt for p in sent] == [OTHER, OTHER] and n.resolve(ipaddress.ip_address(C4)) == OTHER


def test_resolution_retries_then_negative():
    n = node()
    n.from_tun(v4(dst=C4), 0)
    asks = [p for t in (1.0, 2.0) for p in pw(n.handle_timer(t))]
    assert len(asks) == 2
    assert n.handle_timer(3.0) == [] and n.counters["drop_unresolved"] == 1
    assert n.from_tun(v4(dst=C4), 3.1) == [] and n.counters["tun_drop_unknown_destination"] == 1
    n.handle_timer(3.0 + K.IP_NEGATIVE_S)
    assert pw(n.from_tun(v4(dst=C4), 9.0))  # asked again


def test_unknown_answer_drops_the_queue():
    n = node()
    n.from_tun(v4(dst=C4), 0)
    unk = M.err(ErrTE.UNK, ME, 0x50, [Addr(0), Name(C4.encode())])
    assert n.from_pw(unk, b"r") == [] and n.counters["drop_unresolved"] == 1


def test_pending_queues_are_bounded():
    n = node()
    for i in range(K.IP_PENDING_DESTS + 5):
        n.from_tun(v4(dst=f"10.78.{i // 250}.{i % 250 + 1}"), 0)
    for _ in range(K.IP_PENDING_PACKETS + 3):
        n.from_tun(v4(dst="10.78.0.1"), 0)
    assert len(n.pending) == K.IP_PENDING_DESTS and n.counters["tun_drop_resolving_full"] == 5
    assert max(len(p.packets) for p in n.pending.values()) == K.IP_PENDING_PACKETS
    assert n.counters["tun_drop_pending_full"] == 4


def test_multicast_and_broadcast_go_to_logical_addresses():
    n = node()
    ((_, p6, route),) = n.from_tun(v6(dst="ff02::1:ff00:2"), 0)
    assert route is None and p6.dt == 0xE80002 and p6.pt == 0x86DD
    assert pw(n.from_tun(v4(dst="239.1.2.3"), 0))[0].dt == 0xE10203
    assert pw(n.from_tun(v4(dst="255.255.255.255"), 0))[0].dt == 0x7FFFFF
    assert n.counters["tx_group_ipv4"] == 2 and n.counters["tx_group_ipv6"] == 1 and not n.pending


def test_groups_announced_and_received():
    n = IpNode(ME, name=A4.encode(), groups=["239.1.2.3"], router=b"r")
    ladr = M.records(pw(n.start())[0])[-1]
    assert set(ladr.addrs) == {0xE00001, 0xE80001, 0xE10203}
    for dst, logical in (("239.1.2.3", 0xE10203), ("224.0.0.1", 0xE00001), ("255.255.255.255", 0x7FFFFF)):
        pkt = Packet(dt=logical, sa=OTHER, pt=0x0800, data=v4(src=C4, dst=dst))
        assert n.from_pw(pkt, b"r") == [("tun", pkt.data)]
    assert n.from_pw(Packet(dt=0xE80001, sa=OTHER, pt=0x86DD, data=v6(dst="ff02::1")), b"r")
    other = Packet(dt=0xE00000 | 0x50505, sa=OTHER, pt=0x0800, data=v4(src=C4, dst="239.5.5.5"))
    assert n.from_pw(other, b"r") == [] and n.counters["rx_drop_not_for_me"] == 1
    # a unicast IP packet sent to a group address, or a packet from a group source: dropped
    wrong = Packet(dt=0xE00001, sa=OTHER, pt=0x0800, data=v4(src=C4, dst=A4))
    fake = Packet(dt=0xE00001, sa=OTHER, pt=0x0800, data=v4(src="224.0.0.1", dst="224.0.0.1"))
    assert n.from_pw(wrong, b"r") == [] and n.from_pw(fake, b"r") == []
    assert n.counters["rx_drop_bad_ip"] == 1 and n.counters["rx_drop_group_source"] == 1


def test_groups_must_be_multicast():
    for bad in (["10.0.0.1"], ["255.255.255.255"], [f"239.0.0.{i}" for i in range(K.IP_GROUPS_MAX)]):
        try:
            IpNode(ME, groups=bad)
        except ValueError:
            continue
        raise AssertionError(bad)


# --- the core: SAN -> pw0 --------------------------------------------------------------------------
def test_received_ip_goes_to_pw0_and_teaches_the_source():
    n = node()
    pkt = Packet(dt=ME, sa=OTHER, pt=0x0800, data=v4(src=C4, dst=A4))
    assert n.from_pw_bytes(pkt.encode(), "pw0", b"r", 0) == [("tun", v4(src=C4, dst=A4))]
    assert n.resolve(ipaddress.ip_address(C4)) == OTHER
    wrong = Packet(dt=ME, sa=OTHER, pt=0x86DD, data=v4(src=C4, dst=A4))  # PT says IPv6, bytes say IPv4
    assert n.from_pw(wrong, b"r") == [] and n.counters["rx_drop_bad_ip"] == 1
    assert n.from_pw(Packet(dt=0x99, sa=OTHER, pt=0x0800, data=v4()), b"r") == []


SPOOFER = 0x66


def test_spoofed_source_never_moves_a_confirmed_entry():
    n = node()
    n.from_tun(v4(dst=C4), 0)
    n.from_pw(M.rrp(RrpTE.INFO, ME, 0x50, [Addr(OTHER), Name(C4.encode())]), b"r")  # the router's answer
    spoof = Packet(dt=ME, sa=SPOOFER, pt=0x0800, data=v4(src=C4, dst=A4))
    assert n.from_pw(spoof, b"r") == [("tun", spoof.data)]  # delivered, but teaches nothing
    assert n.resolve(ipaddress.ip_address(C4)) == OTHER and n.counters["learn_refused_confirmed"] == 1
    assert not n.pending  # confirmed: nothing to ask


def test_conflicting_unverified_sources_are_asked_of_the_router():
    n = node()
    n.from_pw(Packet(dt=ME, sa=SPOOFER, pt=0x0800, data=v4(src=C4, dst=A4)), b"r")  # first, unverified
    assert n.resolve(ipaddress.ip_address(C4)) == SPOOFER
    out = pw(n.from_pw(Packet(dt=ME, sa=OTHER, pt=0x0800, data=v4(src=C4, dst=A4)), b"r"))
    assert [p.te for p in out] == [RrpTE.TELL] and M.records(out[0]) == [Name(C4.encode())]
    assert n.resolve(ipaddress.ip_address(C4)) == SPOOFER and n.counters["learn_refused_conflict"] == 1
    n.from_pw(M.rrp(RrpTE.INFO, ME, 0x50, [Addr(OTHER), Name(C4.encode())]), b"r")
    assert n.resolve(ipaddress.ip_address(C4)) == OTHER  # the router decides
    n.from_pw(Packet(dt=ME, sa=SPOOFER, pt=0x0800, data=v4(src=C4, dst=A4)), b"r")
    assert n.resolve(ipaddress.ip_address(C4)) == OTHER and n.counters["learn_refused_confirmed"] == 1


def test_an_expired_entry_is_learnt_anew_and_refresh_keeps_confirmation():
    n = node()
    n.from_tun(v4(dst=C4), 0)
    n.from_pw(M.rrp(RrpTE.INFO, ME, 0x50, [Addr(OTHER), Name(C4.encode())]), b"r")
    n.now = 10.0
    n.from_pw(Packet(dt=ME, sa=OTHER, pt=0x0800, data=v4(src=C4, dst=A4)), b"r")  # same address: refreshed
    assert n.learned[ipaddress.ip_address(C4)] == (OTHER, 10.0 + K.IP_LEARNED_S, True)
    n.now = 20.0 + K.IP_LEARNED_S
    n.from_pw(Packet(dt=ME, sa=SPOOFER, pt=0x0800, data=v4(src=C4, dst=A4)), b"r")
    assert n.learned[ipaddress.ip_address(C4)][::2] == (SPOOFER, False)


def test_learned_table_is_bounded():
    n = node()
    for i in range(K.IP_NEIGHBOURS_MAX + 10):
        src = str(ipaddress.IPv4Address(0x0A500000 + i))
        n.from_pw(Packet(dt=ME, sa=OTHER, pt=0x0800, data=v4(src=src, dst=A4)), b"r")
    assert len(n.learned) == K.IP_NEIGHBOURS_MAX and n.counters["neighbour_evicted"] == 10


def test_wru_answered_to_whoever_asked():
    n = node()
    ((_, info, route),) = n.from_pw(M.rrp(RrpTE.WRU, ADDR_HEY_YOU, 0x50, []), b"asker")
    assert route == b"asker" and M.records(info) == [Addr(ME), Name(A4.encode()), Ladr((0xE00001, 0xE80001))]


def test_tell_about_me_answered():
    n = node()
    ((_, info, route),) = n.from_pw(M.rrp(RrpTE.TELL, ME, OTHER, [Name(A4.encode())]), b"back")
    assert route == b"back" and info.dt == OTHER and info.te == RrpTE.INFO and M.records(info)[0] == Addr(ME)
    ((_, unk, _),) = n.from_pw(M.rrp(RrpTE.TELL, ME, OTHER, [Addr(0x77)]), b"back")
    assert unk.pt == PT.ERR and unk.te == ErrTE.UNK


@settings(max_examples=300, deadline=None)  # CPU time varies with the shared machine's load
@given(st.binary(max_size=600))
def test_hostile_san_bytes_never_raise(data):
    n = node()
    out = n.from_pw_bytes(data + bytes(-len(data) % 8), "pw0", b"r", 0)
    assert all(a[0] in ("pw", "tun", "mtu") for a in out)


@settings(max_examples=300, deadline=None)  # CPU time varies with the shared machine's load
@given(st.sampled_from([PT.RRP, PT.ERR, 0x0800, 0x86DD]), st.integers(0, 12), st.binary(max_size=300))
def test_hostile_packets_of_every_type_never_raise(pt, te, data):
    asking = node(router=None, routers=[b"r"])  # no router yet: asking b"r" which to use (HRTO)
    asking.start()
    for n in (node(), asking):
        n.own_route = b"me"
        n.from_tun(v4(dst=C4), 0)
        for dt in (ME, ADDR_HEY_YOU):
            n.from_pw(Packet(dt=dt, sa=OTHER, pt=pt, te=te, data=data), b"r")
        n.from_pw(Packet(dt=ME, sa=OTHER, pt=PT.ERR, te=ErrTE.GENERAL,
                         data=Packet(dt=PEER, sa=ME, pt=0x0800, data=data).encode()), b"r")
        n.handle_timer(K.IP_ROUTER_MISSES * K.IP_ROUTER_PROBE_S)


@given(st.binary(max_size=300))
def test_hostile_tun_bytes_never_raise(data):
    n = node()
    out = n.from_tun(data, 0)
    assert all(a[0] in ("pw", "tun") for a in out)


@given(st.lists(st.tuples(st.integers(0, 0xFFFF), st.integers(0, (1 << 24) - 1)), max_size=3))
def test_l2sr_answers_of_any_mtu(routes):
    n = node()
    n.start()
    reply = M.rrp(RrpTE.L2SR, ME, 0x50, [Addr(PEER)] + [Srqr(q, (), Mtur(m)) for q, m in routes])
    for a in n.from_pw(reply, b"r"):
        assert a[0] != "mtu" or 68 <= a[1] <= 65535


# --- level B: redirects ------------------------------------------------------------------------------
HR_ME, BUDDY = 0x50, 0x52


def redirected(n: IpNode, d=PEER, h=BUDDY, route=b"r", now=0.0):
    n.now = now
    return n.from_pw(M.rdrc(ME, HR_ME, d, h), route)


def test_redirect_asks_who_then_sends_to_the_new_first_hop():
    n = node(router=b"r")
    assert pw(n.from_tun(v4(), 0))[0].dt == PEER and n.from_tun(v4(), 0)[0][2] is None  # through my router
    ((_, wru, route),) = redirected(n)
    assert route is None and wru.dt == BUDDY and wru.te == RrpTE.WRU  # L3 through my router: H answers natively
    assert redirected(n) == []  # asked already: no second WRU while the first may still be answered
    ((_, _, route),) = n.from_tun(v4(), 0)
    assert route is None and n.counters["tx_redirect_route_unknown"] == 1  # not known yet: my router still
    n.from_pw(M.info(ME, BUDDY, BUDDY, None, [(2, b"\0\1\0")]), b"buddy")
    ((_, pkt, route),) = n.from_tun(v4(), 0.5)
    assert route == b"buddy" and pkt.dt == PEER and n.counters["tx_redirected"] == 1
    assert n.counters["native_route_learnt"] == 1 and n.counters["redirect_obeyed"] == 1


def test_redirect_lasts_its_ttl_then_the_router_again():
    n = node(router=b"r")
    redirected(n)
    n.from_pw(M.info(ME, BUDDY, BUDDY, None, ()), b"buddy")
    assert n.timer() <= K.IP_REDIRECT_TTL_S
    n.handle_timer(K.IP_REDIRECT_TTL_S)
    assert n.from_tun(v4(), K.IP_REDIRECT_TTL_S)[0][2] is None and n.counters["redirect_expired"] == 1
    assert redirected(n, now=K.IP_REDIRECT_TTL_S + 1) == []  # redirected again: the route is still known
    assert n.from_tun(v4(), K.IP_REDIRECT_TTL_S + 1)[0][2] == b"buddy"


def test_use_me_clears_the_redirect():
    n = node(router=b"r")
    redirected(n)
    n.from_pw(M.info(ME, BUDDY, BUDDY, None, ()), b"buddy")
    redirected(n, h=HR_ME)  # RDRC(D, my router itself)
    assert n.from_tun(v4(), 0)[0][2] is None and n.counters["redirect_cleared"] == 1


def test_only_my_routers_redirects_and_only_asked_infos_count():
    n = node(router=b"r")
    assert redirected(n, route=b"evil") == [] and not n.redirects  # not my router's frame
    assert n.counters["rdrc_not_from_my_router"] == 1
    assert redirected(node(router=None), route=b"r") == []  # no router known: no redirect obeyed
    n.from_pw(M.info(ME, BUDDY, BUDDY, None, ()), b"evil")  # an INFO I did not ask for
    assert not n.native
    redirected(n)
    n.from_pw(M.info(ME, BUDDY, BUDDY, None, ()), b"r")  # relayed by my router: not BUDDY's own route
    n.from_pw(M.info(ME, 0x66, 0x66, None, ()), b"x")  # an answer from someone else
    assert not n.native
    for d, h in ((0xE10203, BUDDY), (ME, BUDDY), (PEER, ADDR_HEY_YOU), (PEER, ME)):
        redirected(n, d=d, h=h)
    assert n.counters["rdrc_unusable"] == 4 and list(n.redirects) == [PEER]


def test_redirects_are_bounded_and_unanswered_wrus_expire():
    n = node(router=b"r")
    for i in range(K.IP_REDIRECTS_MAX + 5):
        redirected(n, d=0x1000 + i, h=0x2000 + i)
    assert len(n.redirects) == K.IP_REDIRECTS_MAX and n.counters["rdrc_refused_full"] == 5
    assert len(n.wru_asked) == K.IP_REDIRECTS_MAX
    n.handle_timer(K.IP_RESOLVE_RETRY_S)
    assert not n.wru_asked and n.counters["redirect_wru_unanswered"] == K.IP_REDIRECTS_MAX
    assert redirected(n, d=0x1000, h=0x2000, now=K.IP_RESOLVE_RETRY_S) == []  # unanswered: quiet for a while ...
    later = K.IP_RESOLVE_RETRY_S + K.IP_WRU_QUIET_S
    n.handle_timer(later)
    assert not n.wru_quiet and pw(redirected(n, d=0x1000, h=0x2000, now=later))[0].te == RrpTE.WRU  # ... then asked again


def test_two_pw0_nodes_of_one_san_learn_each_other_through_a_redirect():
    """A's router redirects A to B (RDRC(B, B): "B is on your SAN"); A's WRU goes through the
    router carrying A's native route, B answers there straight, A learns B's own route."""
    a, b = node(router=b"ra"), IpNode(PEER, peers={A4: ME}, name=B4.encode(), router=b"rb")
    a.own_route, b.own_route = b"A-ula", b"B-ula"
    ((_, wru, via),) = redirected(a, d=PEER, h=PEER, route=b"ra")
    assert via is None and wru.dt == PEER and M.records(wru) == [Srqr(0, (L2RH(b"A-ula"),))]
    ((_, info, back),) = b.from_pw(wru, b"rb")  # the router hairpinned it: its own route
    assert back == b"A-ula" and info.dt == ME and b.counters["wru_answered_direct"] == 1
    a.from_pw(info, b"B-ula")
    assert a.native == {PEER: b"B-ula"} and a.from_tun(v4(), 0.1)[0][2] == b"B-ula"
    # asked again within the retry period: answered through the router (no reflector)
    assert b.from_pw(wru, b"rb")[0][2] == b"rb" and b.counters["wru_direct_held"] == 1
    b.now = K.IP_RESOLVE_RETRY_S
    assert b.from_pw(wru, b"rb")[0][2] == b"A-ula"


def test_wru_answered_the_way_it_came_unless_through_my_router_with_a_route():
    b = IpNode(PEER, name=B4.encode(), router=b"rb")
    b.own_route = b"B-ula"
    said = [Srqr(0, (L2RH(b"A-ula"),))]
    cases = [(M.rrp(RrpTE.WRU, PEER, ME, said), b"other"),  # not through my router
             (M.rrp(RrpTE.WRU, PEER, ME, []), b"rb"),  # no route said
             (M.rrp(RrpTE.WRU, ADDR_HEY_YOU, ME, said), b"rb"),  # not to me by address
             (M.rrp(RrpTE.WRU, PEER, ME, [Srqr(0, (L2RH(b"rb"),))]), b"rb"),  # my router's own route
             (M.rrp(RrpTE.WRU, PEER, ME, [Srqr(0, (L2RH(b"B-ula"),))]), b"rb"),  # mine
             (M.rrp(RrpTE.WRU, PEER, ME, said + said), b"rb"),
             (Packet(dt=PEER, sa=ME, pt=PT.RRP, te=RrpTE.WRU, data=b"\xff" * 8), b"rb")]  # not records
    for wru, route in cases:
        ((_, info, back),) = b.from_pw(wru, route)
        assert back == route and info.te == RrpTE.INFO
    assert not b.counters["wru_answered_direct"]


def test_direct_wru_answers_are_bounded():
    b = IpNode(PEER, name=B4.encode(), router=b"rb")
    said = [Srqr(0, (L2RH(b"A-ula"),))]
    for i in range(K.IP_REDIRECTS_MAX + 3):
        b.from_pw(M.rrp(RrpTE.WRU, PEER, 0x1000 + i, said), b"rb")
    assert b.counters["wru_answered_direct"] == K.IP_REDIRECTS_MAX and b.counters["wru_direct_refused_full"] == 3
    b.now = K.IP_RESOLVE_RETRY_S  # the old ones expired: room again
    assert b.from_pw(M.rrp(RrpTE.WRU, PEER, 0x7000, said), b"rb")[0][2] == b"A-ula"
    assert len(b.wru_direct) == 1


# --- level C: which router? (HRTO) ---------------------------------------------------------------------
def hrtos(actions):
    return [(a[1].te, a[2]) for a in actions if a[0] == "pw" and a[1].te in (RrpTE.HRTO, RrpTE.INFO)]


def test_without_a_router_ask_the_known_ones_which_to_use():
    n = node(router=None, routers=[b"r1", b"r2"])
    out = n.start()
    # announce myself to each (they answer HRTO for nodes of their SAN only), then HRTO(my first peer)
    assert hrtos(out) == [(RrpTE.INFO, b"r1"), (RrpTE.HRTO, b"r1"), (RrpTE.INFO, b"r2"), (RrpTE.HRTO, b"r2")]
    assert M.records(pw(out)[1]) == [Addr(PEER)] and pw(out)[1].dt == ADDR_HEY_YOU
    assert n.from_tun(v4(), 0)[0][2] is None  # no router: the driver counts the drop
    assert n.timer() == K.IP_HRTO_RETRY_S and hrtos(n.handle_timer(0.5)) == []
    assert len(hrtos(n.handle_timer(K.IP_HRTO_RETRY_S))) == 4  # nobody answered: asked again
    # r2 answers RDRC(PEER, r2): "use me" - r2 is my router; the redirect from r1 later does not move it
    out = n.from_pw(M.rdrc(ME, 0x52, PEER, 0x52), b"r2")
    assert n.router == b"r2" and n.hrs[b"r2"] == 0x52 and n.counters["router_chosen"] == 1
    assert [p.te for p in pw(out)][:2] == [RrpTE.INFO, RrpTE.GVL2]  # announced, the route's MTU asked of it
    n.from_pw(M.rdrc(ME, 0x50, PEER, 0x50), b"r1")
    assert n.router == b"r2" and n.counters["rdrc_not_from_my_router"] == 1
    assert n.timer() == K.IP_HRTO_RETRY_S + K.IP_ROUTER_PROBE_S  # now the probe of my router


def test_a_silent_router_is_probed_then_replaced():
    n = node(routers=[b"r2"], mtu=1400)
    n.start()
    assert pw(n.handle_timer(K.IP_ROUTER_PROBE_S - 1)) == []
    alive(n, 4.0)  # heard: no probe due at 5
    assert [p for p in pw(n.handle_timer(K.IP_ROUTER_PROBE_S)) if p.te == RrpTE.WRU] == []
    t = 4.0 + K.IP_ROUTER_PROBE_S
    while n.timer() < 4.0 + K.IP_ROUTER_MISSES * K.IP_ROUTER_PROBE_S:  # quiet: probed every period
        t = n.timer()
        out = n.handle_timer(t)
        assert [(p.te, p.dt) for p in pw(out)] == [(RrpTE.WRU, ADDR_HEY_YOU)] and out[0][2] is None
    assert n.counters["router_probed"] == K.IP_ROUTER_MISSES - 1 and n.router == b"r"
    out = n.handle_timer(4.0 + K.IP_ROUTER_MISSES * K.IP_ROUTER_PROBE_S)
    assert n.router is None and n.counters["router_silent"] == 1
    assert [r for te, r in hrtos(out) if te == RrpTE.HRTO] == [b"r", b"r2"]  # the silent one may come back
    n.from_pw(M.rdrc(ME, 0x52, PEER, 0x52), b"r2")
    assert n.router == b"r2"


def test_a_routers_power_up_wru_makes_it_known_and_answers_choose_it():
    n = node(router=None)
    assert n.start() == [] and n.counters["hrto_no_router_known"] == 1
    out = n.from_pw(M.rrp(RrpTE.WRU, ADDR_HEY_YOU, 0x50, [Addr(ADDR_HEY_YOU)]), b"r1")
    assert out[0][2] == b"r1" and n.hrs == {b"r1": 0x50} and n.counters["hr_heard"] == 1  # answered, kept
    assert hrtos(n.handle_timer(K.IP_HRTO_RETRY_S))[1] == (RrpTE.HRTO, b"r1")
    # "PEER is on your SAN": r1 becomes my router and the redirect is obeyed (WRU to PEER through it)
    out = n.from_pw(M.rdrc(ME, 0x50, PEER, PEER), b"r1")
    assert n.router == b"r1" and n.redirects[PEER][0] == PEER
    assert [p.dt for p in pw(out) if p.te == RrpTE.WRU] == [PEER]


def test_known_routers_are_bounded_and_unasked_answers_choose_nothing():
    n = node(router=None)
    n.start()
    for i in range(K.IP_HRS_MAX + 4):
        n.from_pw(M.rrp(RrpTE.WRU, ADDR_HEY_YOU, 0x100 + i, []), bytes([i]))
    assert len(n.hrs) == K.IP_HRS_MAX
    n.from_pw(M.rdrc(ME, 0x50, PEER, 0x50), b"\x01")  # known, but not asked yet this round
    assert n.router is None
    assert len(hrtos(n.handle_timer(K.IP_HRTO_RETRY_S))) == 2 * K.IP_HRS_MAX


@settings(max_examples=200, deadline=None)
@given(st.integers(0, (1 << 24) - 1), st.integers(0, (1 << 24) - 1), st.binary(max_size=8))
def test_any_redirect_never_raises(d, h, route):
    n = node(router=b"r")
    for r in (route, b"r"):
        out = redirected(n, d=d, h=h, route=r) + n.from_pw(M.info(ME, h, h, None, ()), route)
        assert all(a[0] == "pw" for a in out)
    n.from_tun(v4(), 0)


# --- the kernel's memberships on pw0 -------------------------------------------------------------------
IGMP = """Idx\tDevice    : Count Querier\tGroup    Users Timer\tReporter
1\tlo        :     1      V3
\t\t\t\t010000E0     1 0:00000000\t\t0
7\tpw0       :     2      V3
\t\t\t\t030201EF     1 0:00000000\t\t0
\t\t\t\t010000E0     1 0:00000000\t\t0
\t\t\t\tZZZZZZZZ     1 0:00000000\t\t0
\t\t\t\t0100000A     1 0:00000000\t\t0
8\tpw1       :     1      V3
\t\t\t\t090201EF     1 0:00000000\t\t0
"""
IGMP6 = """1    lo              ff020000000000000000000000000001     1 0000000C 0
7    pw0             ff020000000000000000000000000001     1 0000000C 0
7    pw0             ff010000000000000000000000000001     1 00000008 0
7    pw0             ff0e0000000000000000000000000042     1 00000004 0
7    pw0             fd770000000000000000000000000001     1 00000004 0
7    pw0             nothex
"""


def test_kernel_memberships_parsed_per_device():
    from pktwayd.ipgroups import parse_igmp, parse_igmp6

    ip = ipaddress.ip_address
    assert parse_igmp(IGMP, "pw0") == {ip("239.1.2.3"), ip("224.0.0.1")}  # unicast and garbage skipped
    assert parse_igmp(IGMP, "pw1") == {ip("239.1.2.9")} and parse_igmp(IGMP, "pw9") == set()
    assert parse_igmp6(IGMP6, "pw0") == {ip("ff02::1"), ip("ff0e::42")}  # interface-local and unicast left out


@given(st.text(max_size=400), st.sampled_from(["pw0", "lo", ""]))
def test_kernel_membership_text_never_raises(text, dev):
    from pktwayd.ipgroups import parse_igmp, parse_igmp6

    assert all(g.is_multicast for g in parse_igmp(text, dev) | parse_igmp6(text, dev))


def test_kernel_joins_and_leaves_are_announced():
    n = node()
    ip = ipaddress.ip_address
    assert n.set_kernel_groups({ip("224.0.0.1"), ip("ff02::1")}) == []  # nothing new: no announcement
    ((_, info, route),) = n.set_kernel_groups({ip("239.1.2.3"), ip("224.0.0.1")})
    assert route is None and info.dt == ADDR_HEY_YOU and M.records(info)[-1] == Ladr((0xE00001, 0xE10203, 0xE80001))
    assert n.from_pw(Packet(dt=0xE10203, sa=OTHER, pt=0x0800, data=v4(src=C4, dst="239.1.2.3")), b"r")[-1][0] == "tun"
    ((_, info, _),) = n.set_kernel_groups(set())  # left: all-hosts/all-nodes stay
    assert M.records(info)[-1] == Ladr((0xE00001, 0xE80001)) and n.counters["groups_changed"] == 2
    assert n.from_pw(Packet(dt=0xE10203, sa=OTHER, pt=0x0800, data=v4(src=C4, dst="239.1.2.3")), b"r") == []


def test_kernel_groups_are_bounded_and_joins_kept():
    n = IpNode(ME, groups=["239.9.9.9"])
    many = {ipaddress.IPv4Address(0xEF000000 + i) for i in range(2 * K.IP_GROUPS_MAX)}
    n.set_kernel_groups(many)
    assert len(n.groups) == K.IP_GROUPS_MAX and 0xE10909 in n.groups and 0xE00001 in n.groups
    assert n.counters["groups_over_max"] > 0


@given(st.one_of(st.binary(min_size=4, max_size=4), st.binary(min_size=16, max_size=16)))
def test_is_group_on_bytes_agrees_with_logical_of(addr):
    from pktwayd.ippacket import is_group
    from pktwayd.ipnode import logical_of

    assert is_group(addr) == (logical_of(ipaddress.ip_address(addr)) is not None)


def test_configured_peers_take_the_short_path_with_the_same_checks():
    n = node()
    n.static_packed.clear()  # the general path ...
    slow = [n.from_tun(v4(), 0), n.from_pw(Packet(dt=ME, sa=PEER, pt=0x0800, data=v4(src=B4, dst=A4)), b"r")]
    fast = node()  # ... and the short one give the same actions
    assert [fast.from_tun(v4(), 0), fast.from_pw(Packet(dt=ME, sa=PEER, pt=0x0800, data=v4(src=B4, dst=A4)), b"r")] == slow
    assert fast.counters == n.counters
    bad = Packet(dt=ME, sa=PEER, pt=0x86DD, data=v4(src=B4, dst=A4))  # PT and IP version disagree
    assert fast.from_pw(bad, b"r") == [] and fast.counters["rx_drop_bad_ip"] == 1


def test_ip_cli_router_errors_are_one_line():
    from click.testing import CliRunner

    from pktwayd.cli import pktway_main

    for args, needle in ((["--ib", "0x1,127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"], "need at least one --router"),
                         (["--ulp", "/nonexistent", "--router", "zz"], "--router")):
        r = CliRunner().invoke(pktway_main, ["ip", "--addr", "0x40", *args])
        assert r.exit_code == 2 and needle in r.output and "Traceback" not in r.output, r.output
