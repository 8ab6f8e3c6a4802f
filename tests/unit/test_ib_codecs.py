"""Codecs of the InfiniBand-style emulation: vectors from the spec's formulas
(../shared/spec/servernet-ipoib.md Part 2) and Hypothesis round trips and garbage."""

import ipaddress
import struct

import pytest
from hypothesis import given, settings, strategies as st

from ib import addr, arp, mgmt, nd, packet, sa
from ib.constants import ARPHRD_INFINIBAND, IPOIB_ARP_BYTES, QPN_MCAST

GID = addr.gid(0xFE80000000000000, 0x0002C90300001234)


# --- vectors ---------------------------------------------------------------------
def test_broadcast_address_of_pkey_8001():
    hw = addr.broadcast_hwaddr(0x8001).pack()
    assert hw == bytes.fromhex("00ffffff" "ff12401b" "8001" "000000000000" "ffffffff")
    # the full bit is forced: a limited P_Key maps to the same address [LNX]
    assert addr.broadcast_hwaddr(0x0001).pack() == hw
    assert addr.gid_text(addr.broadcast_mgid(0xFFFF)) == "ff12:401b:ffff::ffff:ffff"


def test_mgid_of_all_hosts_224_0_0_1():
    assert addr.gid_text(addr.mgid_ipv4("224.0.0.1", 0xFFFF)) == "ff12:401b:ffff::1"
    # only the low 28 bits of the group go in
    assert addr.mgid_ipv4("239.1.2.3", 0x8001)[12:] == bytes([0x0F, 1, 2, 3])
    assert addr.mgid_ipv4("224.0.0.1", 0x8001, scope=5)[:6] == bytes.fromhex("ff15401b8001")


def test_mgid_of_ipv6_groups():
    assert addr.gid_text(addr.mgid_ipv6("ff02::1", 0xFFFF)) == "ff12:601b:ffff::1"
    sol = addr.mgid_ipv6("ff02::1:ff00:2", 0x8001)
    assert sol == bytes.fromhex("ff12601b8001") + ipaddress.IPv6Address("ff02::1:ff00:2").packed[6:]
    assert addr.mcast_mac_for_mgid(sol) == bytes.fromhex("3333ff000002")
    assert addr.mcast_mac_for_mgid(addr.mgid_ipv4("224.0.0.251", 0xFFFF)) == bytes.fromhex("01005e0000fb")


def test_hwaddr_layout():
    hw = addr.HwAddr(0x000048, GID)
    b = hw.pack()
    assert len(b) == 20 and b[:4] == b"\x00\x00\x00\x48" and b[4:] == GID
    assert addr.HwAddr.unpack(b) == hw and not hw.multicast
    assert addr.broadcast_hwaddr(0xFFFF).multicast and addr.broadcast_hwaddr(0xFFFF).qpn == QPN_MCAST


def test_lemac_and_remac():
    assert addr.lemac(0x0002C90300001234) == bytes.fromhex("0002c9001234")
    assert addr.remac(0x48, 0x0005) == bytes.fromhex("020000480005")


def test_arp_hw_type_32_is_56_bytes():
    a = arp.Arp(1, addr.HwAddr(0x48, GID).pack(), bytes([10, 0, 0, 1]), bytes(20), bytes([10, 0, 0, 2]))
    b = a.encode()
    assert len(b) == IPOIB_ARP_BYTES == 56
    assert b[:8] == struct.pack("!HHBBH", ARPHRD_INFINIBAND, 0x0800, 20, 4, 1)
    assert b[8:28] == bytes.fromhex("00000048") + GID and b[28:32] == bytes([10, 0, 0, 1])
    assert arp.decode(b, ARPHRD_INFINIBAND) == a
    eth = arp.Arp(2, b"\x02" * 6, bytes(4), b"\x04" * 6, bytes(4)).encode()
    assert len(eth) == 28 and eth[:2] == b"\x00\x01"


def test_path_record_is_64_bytes_in_osm_order():
    pr = sa.PathRecord(dgid=GID, sgid=GID[:15] + b"\x01", dlid=5, slid=7, pkey=0xFFFF, sl=0, mtu=4, rate=3,
                       packet_lifetime=18)
    b = pr.encode()
    assert len(b) == 64
    assert b[8:24] == GID and b[40:42] == b"\x00\x05" and b[42:44] == b"\x00\x07"
    assert b[50:52] == b"\xff\xff" and b[54] == 0x84 and b[55] == 0x83  # selector 2 = exactly
    assert sa.PathRecord.decode(b) == pr


def test_mcmember_record_is_52_bytes():
    rec = sa.MCMemberRecord(mgid=addr.broadcast_mgid(0xFFFF), port_gid=GID, qkey=0x0B1B, mlid=0xC000, mtu=4,
                            pkey=0xFFFF, rate=3, scope=2, join_state=sa.JOIN_FULL)
    b = rec.encode()
    assert len(b) == 52 and b[32:36] == b"\x00\x00\x0b\x1b" and b[36:38] == b"\xc0\x00"
    assert b[48] == 0x21  # scope 2, JoinState full
    assert sa.MCMemberRecord.decode(b) == rec


def test_ud_packet_layout_and_icrc():
    p = packet.UdPacket(slid=3, dlid=9, pkey=0xFFFF, dqpn=0x48, sqpn=0x49, qkey=0x0B1B, payload=b"\x08\x00\x00\x00ab")
    b = p.encode()
    assert len(b) == 8 + 12 + 8 + 8 + 4 and len(b) % 4 == 0
    assert b[0:2] == bytes([0x00, 0x02]) and b[2:4] == b"\x00\x09" and b[6:8] == b"\x00\x03"
    assert int.from_bytes(b[4:6], "big") == len(b) // 4
    assert b[8] == 0x64 and (b[9] >> 4) & 3 == 2  # UD SEND only, 2 pad bytes
    assert packet.decode(b) == p
    # the VL may change on the way (a variant field) without breaking the ICRC
    assert packet.decode(bytes([0x70]) + b[1:]).payload == p.payload
    with pytest.raises(packet.PacketError, match="bad_icrc"):
        packet.decode(b[:-5] + bytes([b[-5] ^ 1]) + b[-4:])


def test_nd_options_grow_to_24_bytes_and_back():
    src, dst = ipaddress.IPv6Address("fe80::1").packed, ipaddress.IPv6Address("ff02::1:ff00:2").packed
    icmp = bytearray(bytes([135, 0, 0, 0, 0, 0, 0, 0]) + ipaddress.IPv6Address("fe80::2").packed
                     + bytes([1, 1]) + b"\x02\x00\x00\x00\x00\x01")
    icmp[2:4] = nd.checksum(src, dst, bytes(icmp)).to_bytes(2, "big")
    ip6 = bytes([0x60, 0, 0, 0]) + len(icmp).to_bytes(2, "big") + bytes([58, 255]) + src + dst + bytes(icmp)
    hw = addr.HwAddr(0x48, GID).pack()
    ib = nd.rewrite(ip6, True, lambda mac: hw if mac == b"\x02\x00\x00\x00\x00\x01" else None)
    assert len(ib) == len(ip6) + 16
    opt = ib[40 + 24:]
    assert opt == bytes([1, 3, 0, 0]) + hw
    assert nd.checksum(ib[8:24], ib[24:40], ib[40:]) == 0
    back = nd.rewrite(ib, False, lambda h: b"\x02\x00\x00\x00\x00\x01" if h == hw else None)
    assert back == ip6
    assert nd.rewrite(ip6, True, lambda mac: None) is None  # unknown address: refused


# --- Hypothesis ------------------------------------------------------------------------
gids = st.binary(min_size=16, max_size=16)
u16, u24, u32 = st.integers(0, 0xFFFF), st.integers(0, 0xFFFFFF), st.integers(0, 0xFFFFFFFF)


@st.composite
def packets(draw):
    grh = draw(st.none() | st.builds(packet.Grh, gids, gids, st.integers(0, 255), st.integers(0, 0xFFFFF),
                                     st.integers(0, 255)))
    return packet.UdPacket(draw(u16), draw(u16), draw(u16), draw(u24), draw(u24), draw(u32),
                           draw(st.binary(max_size=3000)), draw(st.integers(0, 15)), draw(st.integers(0, 15)),
                           draw(u24), grh)


@given(packets())
def test_packet_round_trip(p):
    assert packet.decode(p.encode()) == p


@given(packets(), st.data())
def test_packet_corruption_is_caught(p, data):
    b = bytearray(p.encode())
    i = data.draw(st.integers(0, len(b) - 1))
    b[i] ^= data.draw(st.integers(1, 255))
    try:
        q = packet.decode(bytes(b))
    except packet.PacketError:
        return
    # only the variant fields (VL, GRH tclass/flow/hop, BTH reserved byte) may change unseen
    assert q.payload == p.payload and (q.slid, q.dlid, q.dqpn, q.sqpn, q.qkey) == (p.slid, p.dlid, p.dqpn, p.sqpn,
                                                                                   p.qkey)


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_garbage_never_escapes_the_codecs(b):
    for fn in (packet.decode, mgmt.decode, sa.PathRecord.decode, sa.MCMemberRecord.decode,
               mgmt.PortInfo.decode, mgmt.SwitchReport.decode, mgmt.decode_lft, mgmt.decode_mft,
               mgmt.parse_register, lambda x: arp.decode(x, 32), lambda x: arp.decode(x, 1),
               lambda x: addr.HwAddr.unpack(x)):
        try:
            fn(b)
        except ValueError:
            pass
    out = nd.rewrite(bytes([0x60, 0, 0, 0]) + len(b).to_bytes(2, "big") + bytes([58, 255]) + bytes(32) + b, True,
                     lambda m: bytes(20))
    assert out is None or isinstance(out, bytes)


@given(st.builds(sa.PathRecord, gids, gids, u16, u16, u16, st.integers(0, 15), st.integers(0, 63),
                 st.integers(0, 63), st.integers(0, 63), st.integers(0, 255), st.integers(0, 0xFFFFF),
                 st.integers(0, 255), st.booleans(), st.integers(0, 127), st.integers(0, 2**64 - 1),
                 st.integers(0, 255)))
def test_path_record_round_trip(pr):
    assert sa.PathRecord.decode(pr.encode()) == pr


@given(st.builds(sa.MCMemberRecord, gids, gids, u32, u16, st.integers(0, 63), st.integers(0, 255), u16,
                 st.integers(0, 63), st.integers(0, 63), st.integers(0, 15), st.integers(0, 0xFFFFF),
                 st.integers(0, 255), st.integers(0, 15), st.integers(0, 15), st.booleans()))
def test_mcmember_round_trip(rec):
    assert sa.MCMemberRecord.decode(rec.encode()) == rec


@given(st.sampled_from(list(mgmt.Kind)), st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1),
       st.sampled_from(list(mgmt.Status)), st.binary(max_size=100))
def test_mgmt_round_trip(kind, tid, epoch, status, body):
    m = mgmt.Mgmt(kind, tid, epoch, status, body)
    assert mgmt.decode(m.encode()) == m


@given(st.dictionaries(st.integers(1, 0xBFFF), st.integers(1, 64), max_size=50),
       st.dictionaries(st.integers(0xC000, 0xFFFE), st.integers(0, 2**64 - 1), max_size=50), u32)
def test_tables_round_trip(lft, mft, version):
    assert mgmt.decode_lft(mgmt.encode_lft(version, lft)) == (version, lft)
    assert mgmt.decode_mft(mgmt.encode_mft(version, mft)) == (version, mft)


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1),
       st.lists(st.tuples(st.integers(1, 63), st.integers(0, 2**64 - 1), st.integers(0, 255),
                          st.integers(0, 2)), max_size=64))
def test_switch_report_round_trip(guid, lv, mv, ports):
    r = mgmt.SwitchReport(guid, lv, mv, tuple(ports))
    assert mgmt.SwitchReport.decode(r.encode()) == r


@given(st.lists(st.integers(0, 0xFFFF), max_size=32), u16, u16, st.integers(0, 2**64 - 1))
def test_port_info_round_trip(pkeys, lid, sm, prefix):
    pi = mgmt.PortInfo(lid, sm, prefix, tuple(pkeys))
    assert mgmt.PortInfo.decode(pi.encode()) == pi
