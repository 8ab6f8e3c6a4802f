"""The ServerNet and InfiniBand-style dissectors (wireshark/gsn_servernet.lua, gsn_ib.lua)
against pcaps written from the project's own encoders (servernet/codec.py, ib/packet.py,
ib/mgmt.py, ib/sa.py): every packet type decodes to the values encoded, a flipped byte
is flagged CRC-bad, and hostile input gives expert info, never a Lua error."""

from __future__ import annotations

import random
from ipaddress import IPv4Address, IPv6Address

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ib import addr, arp, mgmt, nodeinfo, packet, sa
from ib.constants import ETHERTYPE_PACKETWAY_NATIVE, QKEY_IPOIB_DEFAULT, QPN_MCAST
from ib.mgmt import Kind, Status
from pktwayd.constants import PT
from pktwayd.eep import Packet as EepPacket
from servernet.codec import Packet, envelope
from servernet.constants import Fabric, TType
from tests.tshark import experts, ipv4_udp, needs_tshark, tshark_json, values, write_pcap
from tests.unit.test_dissectors_files import icmp_echo

pytestmark = needs_tshark

ROUTER, NODE = ("127.0.0.1", 7500), ("127.0.0.1", 7510)  # etc/snetd.toml, etc/snet-router-x.env
ELSEWHERE = [("10.9.1.1", 41000), ("10.9.1.2", 41001)]  # no registered port: the heuristics must find these
A, B = 0x04001, 0x08001

SN_PACKETS = [
    Packet(B, A, TType.READ, False, 3, address=0x00100000, length=64),
    Packet(A, B, TType.READ, True, 3, ack=True, data=bytes(range(64))),
    Packet(B, A, TType.WRITE, False, 5, path=Fabric.Y, address=0x00300000, data=b"doorbell"),
    Packet(A, B, TType.WRITE, True, 5, path=Fabric.Y, ack=False),
    Packet(B, A, TType.BARRIER, False, 15, address=0),
    Packet(A, B, TType.BARRIER, True, 15, ack=True),
    Packet(B, A, TType.DIAG, False, 0, address=0xFFFFFFFC, data=b"status!!"),
]
SN_II = Packet(B, A, TType.WRITE, False, 9, address=0x00101000, data=bytes(256), ii=True)


def sn_datagram(p: Packet) -> bytes:
    return envelope(p.encode(), p.path, ii=p.ii)


def sn_layer(js: list[dict], i: int) -> dict:
    return js[i]["_source"]["layers"]["servernet"]


@pytest.fixture(scope="module")
def servernet(tmp_path_factory):
    dgrams = [sn_datagram(p) for p in SN_PACKETS] + [sn_datagram(SN_II)]
    pkts = [ipv4_udp(NODE, ROUTER, d) for d in dgrams] + [ipv4_udp(ELSEWHERE[0], ELSEWHERE[1], dgrams[0])]
    return tshark_json(write_pcap(tmp_path_factory.mktemp("sn") / "sn.pcap", pkts))


def test_servernet_every_packet_type(servernet):
    assert len(servernet) == len(SN_PACKETS) + 2
    for i, p in enumerate(SN_PACKETS):
        js = servernet[i]
        assert [int(v, 16) for v in values(js, "servernet.did")] == [p.did]
        assert [int(v, 16) for v in values(js, "servernet.sid")] == [p.sid]
        assert [int(v, 16) for v in values(js, "servernet.ttype")] == [p.ttype]
        assert values(js, "servernet.rsp") == [str(int(p.rsp))] and values(js, "servernet.ack") == [str(int(p.ack))]
        assert values(js, "servernet.tid") == [str(p.tid)] and values(js, "servernet.path") == [str(p.path)]
        assert values(js, "servernet.env.fabric") == [str(p.path)]
        assert [int(v, 16) for v in values(js, "servernet.address")] == ([] if p.address is None else [p.address])
        assert [bytes.fromhex(v.replace(":", "")) for v in values(js, "servernet.data")] == ([p.data] if p.data else [])
        assert values(js, "servernet.crc_ok") == ["1"] and not experts(js)
    assert values(servernet[0], "servernet.length") == ["64"]  # what the read asks for


def test_servernet_ii_mode_counts_len_in_8_byte_units(servernet):
    js = servernet[len(SN_PACKETS)]
    assert values(js, "servernet.env.ii") == ["1"]
    assert values(js, "servernet.len") == ["32"] and values(js, "servernet.length") == ["256"]
    assert values(js, "servernet.crc_ok") == ["1"] and not experts(js)


def test_servernet_heuristic_finds_any_port(servernet):
    assert values(servernet[-1], "servernet.did") == values(servernet[0], "servernet.did")


def test_servernet_flipped_byte_is_crc_bad(tmp_path):
    good = sn_datagram(SN_PACKETS[2])
    pkts = []
    for at in (5, 12, len(good) - 1):  # header (SID), address/data, the CRC itself
        bad = bytearray(good)
        bad[at] ^= 0x01
        pkts.append(ipv4_udp(NODE, ROUTER, bytes(bad)))
    tpb = bytearray(good)
    tpb[3] |= 0x02  # a router marked it bad
    pkts.append(ipv4_udp(NODE, ROUTER, bytes(tpb)))
    js = tshark_json(write_pcap(tmp_path / "crc.pcap", pkts))
    for j in js[:3]:
        assert values(j, "servernet.crc_ok") == ["0"] and values(j, "servernet.crc_calc")
        assert any(e.startswith("CRC-32 0x") for e in experts(j))
    assert values(js[3], "servernet.env.tpb") == ["1"] and values(js[3], "servernet.crc_ok") == ["1"]


def test_servernet_malformed_gives_expert_info(tmp_path):
    rng = random.Random(7)
    hostile = [b"SN", b"SN\x02\x00" + bytes(12), b"SN\x01\x80" + bytes(12), b"SN\x01\x00" + bytes(90),
               b"XY\x01\x00" + bytes(20), b"SN\x01\x00" + bytes(5)]
    goods = [sn_datagram(p) for p in SN_PACKETS]
    for _ in range(120):
        d = bytearray(rng.choice(goods))
        for _ in range(rng.randint(1, 4)):
            d[rng.randrange(4, len(d))] = rng.randrange(256)
        hostile.append(bytes(d[: rng.randint(4, len(d))]))
    hostile += [bytes(rng.randrange(256) for _ in range(rng.randint(0, 90))) for _ in range(40)]
    js = tshark_json(write_pcap(tmp_path / "h.pcap", [ipv4_udp(NODE, ROUTER, d) for d in hostile]))
    assert len(js) == len(hostile)
    ex = experts(js)
    for text in ("shorter than the 4-byte envelope", "version 2 is not 1", "unknown flags 0x80",
                 "longer than any packet", "is not 0x534e", "shorter than header + CRC"):
        assert any(text in e for e in ex), text
    assert any("the header says" in e or "not supported" in e or "ACK set" in e for e in ex)


# --- InfiniBand-style ----------------------------------------------------------------------------

CABLE = [("127.0.0.1", 4800), ("127.0.0.1", 4701)]  # etc/ipoibd-ib0.toml <-> etc/ib-switch-a.toml port 1
SM = ("127.0.0.1", 4791)
PREFIX = 0xFE80000000000000
GID_A, GID_B = addr.gid(PREFIX, 0x0002C90300000001), addr.gid(PREFIX, 0x0002C90300000002)
IPOIB_IP = b"\x08\x00\x00\x00" + icmp_echo()
IPOIB_ARP = b"\x08\x06\x00\x00" + arp.Arp(1, bytes(20), IPv4Address("192.0.2.1").packed, bytes(20),
                                         IPv4Address("192.0.2.2").packed).encode()
EEP = EepPacket(dt=0x60, sa=0x40, pt=PT.USER, data=b"over the fabric")
IPOIB_PW = ETHERTYPE_PACKETWAY_NATIVE.to_bytes(2, "big") + b"\0\0" + EEP.encode()
UD = [
    packet.UdPacket(slid=2, dlid=3, pkey=0xFFFF, dqpn=0x48, sqpn=0x49, qkey=QKEY_IPOIB_DEFAULT, payload=IPOIB_IP,
                    psn=77, sl=3, vl=1),
    packet.UdPacket(slid=2, dlid=0xC000, pkey=0x8001, dqpn=QPN_MCAST, sqpn=0x48, qkey=QKEY_IPOIB_DEFAULT,
                    payload=IPOIB_ARP + b"x", grh=packet.Grh(GID_A, addr.broadcast_mgid(0x8001), 5, 0x12345, 9)),
    packet.UdPacket(slid=2, dlid=3, pkey=0xFFFF, dqpn=0xA0, sqpn=0xA0, qkey=0x5057, payload=IPOIB_PW),
]
PR = sa.PathRecord(dgid=GID_B, sgid=GID_A, dlid=3, slid=2, pkey=0xFFFF, sl=1, mtu=4, rate=3, hop_limit=4)
MC = sa.MCMemberRecord(mgid=addr.broadcast_mgid(0xFFFF), port_gid=GID_A, qkey=QKEY_IPOIB_DEFAULT, mlid=0xC001,
                       pkey=0xFFFF, mtu=4, join_state=sa.JOIN_FULL, scope=2)
MGMT = [
    mgmt.Mgmt(Kind.REGISTER, 1, 0, body=mgmt.register_body(0x0002C90300000001, 0x0002C90300000001)),
    mgmt.Mgmt(Kind.REGISTER_REPLY, 1, 0xE1, body=mgmt.PortInfo(2, 1, PREFIX, (0xFFFF, 0x8001)).encode()),
    mgmt.Mgmt(Kind.PATH_GET, 2, 0xE1, body=mgmt.masked_body(sa.PR_IPOIB_QUERY, PR.encode())),
    mgmt.Mgmt(Kind.PATH_REPLY, 2, 0xE1, body=PR.encode()),
    mgmt.Mgmt(Kind.MC_JOIN, 3, 0xE1, body=mgmt.masked_body(sa.MC_BROADCAST_JOIN, MC.encode())),
    mgmt.Mgmt(Kind.MC_REPLY, 3, 0xE1, body=MC.encode()),
    mgmt.Mgmt(Kind.PATH_REPLY, 4, 0xE1, Status.NO_RECORDS),
    mgmt.Mgmt(Kind.SET_LFT, 5, 0xE1, body=mgmt.encode_lft(7, {2: 1, 3: 3})),
]


@pytest.fixture(scope="module")
def infiniband(tmp_path_factory):
    dgrams = [p.encode() for p in UD] + [nodeinfo.hello(1, 0x0002C90300000001, 1)]
    pkts = [ipv4_udp(CABLE[0], CABLE[1], d) for d in dgrams]
    pkts += [ipv4_udp(("127.0.0.1", 40000), SM, m.encode()) for m in MGMT]
    pkts.append(ipv4_udp(ELSEWHERE[0], ELSEWHERE[1], MGMT[2].encode()))  # the heuristic, off the SM port
    return tshark_json(write_pcap(tmp_path_factory.mktemp("ib") / "ib.pcap", pkts))


def ints(js, key: str) -> list[int]:
    return [int(v, 0) for v in values(js, key)]


def test_ib_ud_headers_and_ipoib(infiniband):
    local, grh, pw, hello = infiniband[:4]
    p = UD[0]
    assert ints(local, "gsn_ib.lrh.dlid") == [3] and ints(local, "gsn_ib.lrh.slid") == [2]
    assert ints(local, "gsn_ib.lrh.vl") == [1] and ints(local, "gsn_ib.lrh.sl") == [3]
    assert ints(local, "gsn_ib.lrh.lnh") == [2] and ints(local, "gsn_ib.lrh.pktlen") == [len(p.encode()) // 4]
    assert ints(local, "gsn_ib.bth.opcode") == [0x64] and ints(local, "gsn_ib.bth.pkey") == [0xFFFF]
    assert ints(local, "gsn_ib.bth.dqpn") == [0x48] and ints(local, "gsn_ib.bth.psn") == [77]
    assert ints(local, "gsn_ib.deth.qkey") == [QKEY_IPOIB_DEFAULT] and ints(local, "gsn_ib.deth.sqpn") == [0x49]
    assert ints(local, "gsn_ib.ipoib.type") == [0x0800] and values(local, "icmp.type") == ["8"]
    assert values(local, "ip.dst")[-1] == "192.0.2.2"
    assert values(local, "gsn_ib.icrc_ok") == ["1"] and not experts(local)
    # GRH to the broadcast group; a 1-byte pad; ARP handed to Wireshark (hw type 32)
    assert ints(grh, "gsn_ib.lrh.lnh") == [3] and ints(grh, "gsn_ib.bth.padcnt") == [3]
    assert ints(grh, "gsn_ib.grh.tclass") == [5] and ints(grh, "gsn_ib.grh.flow_label") == [0x12345]
    assert ints(grh, "gsn_ib.grh.hoplmt") == [9] and ints(grh, "gsn_ib.grh.nxthdr") == [0x1B]
    assert values(grh, "gsn_ib.grh.sgid") == ["fe80::2:c903:0:1"]
    assert values(grh, "gsn_ib.grh.dgid") == [str(IPv6Address(addr.broadcast_mgid(0x8001)))]
    assert ints(grh, "gsn_ib.ipoib.type") == [0x0806] and values(grh, "arp.opcode") == ["1"]
    assert values(grh, "gsn_ib.icrc_ok") == ["1"]
    # PacketWay native (0x88B5) goes to gsn_pktway.lua
    assert ints(pw, "gsn_ib.ipoib.type") == [ETHERTYPE_PACKETWAY_NATIVE] and ints(pw, "pktway.dt") == [0x60]
    # the cable hello on QP0
    assert ints(hello, "gsn_ib.bth.dqpn") == [0] and ints(hello, "gsn_ib.lrh.vl") == [15]
    assert ints(hello, "gsn_ib.hello.node_type") == [1] and ints(hello, "gsn_ib.hello.guid") == [0x0002C90300000001]
    assert values(hello, "gsn_ib.icrc_ok") == ["1"]


def test_ib_management_datagrams(infiniband):
    js = infiniband[4:]
    assert [ints(j, "gsn_ib_mgmt.kind") for j in js] == [[m.kind] for m in MGMT] + [[Kind.PATH_GET]]
    assert not experts(js)
    assert ints(js[0], "gsn_ib_mgmt.port_guid") == [0x0002C90300000001]
    assert ints(js[1], "gsn_ib_mgmt.lid") == [2] and ints(js[1], "gsn_ib_mgmt.pkey") == [0xFFFF, 0x8001]
    for j in (js[2], js[3], js[-1]):
        assert ints(j, "gsn_ib_mgmt.pr.dlid") == [3] and ints(j, "gsn_ib_mgmt.pr.slid") == [2]
        assert ints(j, "gsn_ib_mgmt.pr.mtu") == [4] and ints(j, "gsn_ib_mgmt.pr.rate") == [3]
        assert values(j, "gsn_ib_mgmt.pr.dgid") == ["fe80::2:c903:0:2"]
    assert ints(js[2], "gsn_ib_mgmt.comp_mask") == [sa.PR_IPOIB_QUERY] and not values(js[3], "gsn_ib_mgmt.comp_mask")
    for j in (js[4], js[5]):
        assert ints(j, "gsn_ib_mgmt.mc.mlid") == [0xC001] and ints(j, "gsn_ib_mgmt.mc.qkey") == [QKEY_IPOIB_DEFAULT]
        assert ints(j, "gsn_ib_mgmt.mc.join_state") == [1] and ints(j, "gsn_ib_mgmt.mc.scope") == [2]
    assert ints(js[4], "gsn_ib_mgmt.comp_mask") == [sa.MC_BROADCAST_JOIN]
    assert ints(js[6], "gsn_ib_mgmt.status") == [Status.NO_RECORDS] and ints(js[6], "gsn_ib_mgmt.tid") == [4]
    assert ints(js[7], "gsn_ib_mgmt.entries") == [2] and ints(js[7], "gsn_ib_mgmt.table_version") == [7]


def test_ib_icrc_ignores_variant_fields_and_flags_flipped_bytes(tmp_path):
    local, glob = UD[0].encode(), UD[1].encode()
    variant = []
    for raw, spots in ((local, ((0, 0xF0),)), (glob, ((0, 0xF0), (8, 0x0F), (9, 0xFF), (15, 0xFF)))):
        v = bytearray(raw)  # what a switch may change: VL, traffic class, flow label, hop limit
        for at, mask in spots:
            v[at] ^= mask
        v[8 + (40 if raw is glob else 0) + 4] ^= 0xFF  # the BTH reserved byte
        variant.append(bytes(v))
    flipped = []
    for raw, at in ((local, 2), (local, 30), (local, len(local) - 1), (glob, 20), (glob, 60)):
        f = bytearray(raw)
        f[at] ^= 0x01
        flipped.append(bytes(f))
    assert all(packet.decode(v) for v in variant)  # the reference agrees
    js = tshark_json(write_pcap(tmp_path / "icrc.pcap", [ipv4_udp(CABLE[0], CABLE[1], d) for d in variant + flipped]))
    for j in js[: len(variant)]:
        assert values(j, "gsn_ib.icrc_ok") == ["1"]
    for j in js[len(variant):]:
        assert values(j, "gsn_ib.icrc_ok") == ["0"] and any(e.startswith("ICRC 0x") for e in experts(j))


def test_ib_malformed_gives_expert_info(tmp_path):
    rng = random.Random(11)
    goods = [p.encode() for p in UD]
    ud_bad = []
    for _ in range(120):
        d = bytearray(rng.choice(goods))
        for _ in range(rng.randint(1, 4)):
            d[rng.randrange(len(d))] = rng.randrange(256)
        ud_bad.append(bytes(d))
    ud_bad += [bytes(rng.randrange(256) for _ in range(rng.randint(0, 90))) for _ in range(30)]
    mgoods = [m.encode() for m in MGMT]
    m_bad = [b"IM", b"IM\x02\x01" + bytes(20), b"IM\x01\x63" + bytes(20), b"IM\x01\x03" + bytes(20 + 30)]
    for _ in range(80):
        d = bytearray(rng.choice(mgoods))
        if rng.random() < 0.5:
            d = d[: rng.randint(0, len(d))]
        for _ in range(rng.randint(0, 3)):
            if d:
                d[rng.randrange(len(d))] = rng.randrange(256)
        m_bad.append(bytes(d))
    pkts = [ipv4_udp(CABLE[0], CABLE[1], d) for d in ud_bad] + [ipv4_udp(("127.0.0.1", 40000), SM, d) for d in m_bad]
    js = tshark_json(write_pcap(tmp_path / "h.pcap", pkts))
    assert len(js) == len(pkts)
    ex = experts(js)
    assert any("ICRC 0x" in e for e in ex)
    for text in ("shorter than the 24-byte header", "version 2 is not 1", "unknown kind 99", "PATH_GET body of 30"):
        assert any(text in e for e in ex), text


def test_ib_ports_preference_decodes_without_the_heuristic(tmp_path):
    """A cable port named in the preference is decoded even when the heuristic would refuse
    (a wrong PktLen): the expert info says why."""
    bad = bytearray(UD[0].encode())
    bad[5] ^= 0x01
    pcap = write_pcap(tmp_path / "p.pcap", [ipv4_udp(CABLE[0], CABLE[1], bytes(bad))])
    assert not values(tshark_json(pcap), "gsn_ib.lrh.dlid")
    js = tshark_json(pcap, "-o", "gsn_ib.ports:4701")
    assert any("PktLen" in e for e in experts(js))


_sn_hostile = st.one_of(
    st.binary(max_size=100).map(lambda b: b"SN\x01" + b),
    st.tuples(st.integers(0, 7), st.binary(min_size=8, max_size=8), st.binary(max_size=80)).map(
        lambda t: b"SN\x01" + bytes([t[0]]) + t[1] + t[2]),
)
_ib_hostile = st.one_of(
    st.tuples(st.sampled_from([p.encode() for p in UD]), st.integers(0, 500), st.integers(0, 255)).map(
        lambda t: t[0][: t[1] % len(t[0])] + bytes([t[2]]) + t[0][t[1] % len(t[0]) + 1:]),
    st.binary(max_size=100).map(lambda b: b"IM\x01" + b),
)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_sn_hostile, min_size=1, max_size=30), st.lists(_ib_hostile, min_size=1, max_size=30))
def test_hypothesis_hostile_san_datagrams(tmp_path_factory, sn, ib):
    """Whatever arrives, every packet is dissected; tshark_json fails on a Lua error."""
    path = tmp_path_factory.mktemp("hyp") / "h.pcap"
    pkts = [ipv4_udp(NODE if i % 2 else ELSEWHERE[0], ROUTER, d) for i, d in enumerate(sn)]
    pkts += [ipv4_udp(CABLE[0] if i % 2 else ELSEWHERE[0], SM if d[:2] == b"IM" else CABLE[1], d)
             for i, d in enumerate(ib)]
    assert len(tshark_json(write_pcap(path, pkts))) == len(pkts)
