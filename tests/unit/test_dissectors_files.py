"""The Lua dissectors (wireshark/*.lua) against pcaps written from the project's own
encoders: two sans-IO links (the C link gsnd uses) exchange real cable datagrams, and
every datagram either sends is captured.  tshark must decode exactly what the Python
codecs encode, flag bad CRCs, and survive malformed input with expert info only."""

from __future__ import annotations

import os
import random
import struct
import subprocess
from ipaddress import IPv4Address, IPv6Address
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from daemons.constants import AdminCmd, MpType
from daemons.link.clink import CLink
from daemons.wire.admin import Admin, i_am_args
from daemons.wire.message import Message, single_records, stream_records
from daemons.wire.micropacket import lcrc_scalar, restamp
from daemons.wire.shim import Shim
from harpd.constants import Op as HarpOp
from harpd.wire import Harp
from pktwayd.constants import PT, RrpTE
from pktwayd.eep import L2RH, OptField, Packet, Symbol
from pktwayd import messages as M
from pktwayd.rrp import Mtur, Rcvf, Rthd, Srqr
from pktwayd.udpsan import native
from stpd.constants import OPT_ERROR_CODE, Flag, Op as StOp
from stpd.wire import Header, checksum, encode_options
from tests.tshark import (LUA_FILES, experts, ipv4_udp, needs_tshark, read_pcap, rewrite_pcap, tshark_json,
                          tshark_scripts, values, write_pcap)
from tests.unit.linkpair import Pair

pytestmark = needs_tshark

A_ULA, B_ULA = bytes.fromhex("024753010100"), bytes.fromhex("024753010200")
ENDS = [("10.9.0.1", 40001), ("10.9.0.2", 40002)]  # not 6400: the heuristic must find the cable


def icmp_echo() -> bytes:
    icmp = bytearray(struct.pack("!BBHHH", 8, 0, 0, 0x4242, 7) + b"gsn-revival ping")
    total = sum(struct.unpack(f"!{len(icmp) // 2}H", icmp))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    struct.pack_into("!H", icmp, 2, ~total & 0xFFFF)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(icmp), 1, 0, 64, 1, 0, IPv4Address("192.0.2.1").packed,
                     IPv4Address("192.0.2.2").packed)
    s = sum(struct.unpack("!10H", ip))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ip[:10] + struct.pack("!H", ~s & 0xFFFF) + ip[12:] + bytes(icmp)


def st_packet(h: Header, rest: bytes = b"") -> bytes:
    raw = h.encode() + rest
    return raw[:12] + struct.pack(">H", checksum(raw[:12] + b"\0\0" + raw[14:])) + raw[14:]


HARP_V4 = Harp(HarpOp.HARP_REQUEST, IPv4Address("192.0.2.1"), IPv4Address("192.0.2.2"), A_ULA, bytes(6))
HARP_V6 = Harp(HarpOp.INHARP_REPLY, IPv6Address("2001:db8::1"), IPv6Address("2001:db8::2"), B_ULA, A_ULA)
ST_RC = Header(StOp.RC, Flag.INTERRUPT, dc=1, param=20, d_port=5001, s_port=40000, d_key=0x1234, mx=0x8181,
               d_id=0xFFFFFFFF, s_id=0x11223344)
ST_END = Header(StOp.END, d_port=5001, s_port=40000, d_key=0x99)
ST_OPTS = encode_options([(OPT_ERROR_CODE, struct.pack(">H", 4))])
RRP_INFO = M.info(0x000060, 0x000040, 0x000040, name=b"router-a", caps=[(7, b"\x01\x02")])
RRP_RTBL = M.rrp(RrpTE.RTBL, 0x60, 0x40, [Rthd(0x000200, 17, (Rcvf((0x40, 0x41)), Srqr(3, (L2RH(b"\x05\x03\x00"),),
                                                                                              Mtur(1024)))), ])
EEP_USER = Packet(dt=0x60, sa=0x40, pt=PT.USER, data=b"hello over packetway",
                  prefix=(L2RH(bytes.fromhex("024753010200")), Symbol(1, b"x")), options=(OptField(9, b"opt"),),
                  tail=0x8000000000000001)
MW_USER = Packet(dt=0x0123, sa=0x0040, pt=PT.USER, te=7, data=b"abc", prefix=(L2RH(bytes([3, 0, 3, 0])),),
                 free=0x1234)
ADMIN_I_AM = Admin(AdminCmd.I_AM, xid=0xABCDEF01, hop_count=1, init_hops=1, args=i_am_args(2, 8, B_ULA))


def batch(recs, seq: int, cable: int = 77) -> bytes:
    """A sequenced cable datagram carrying ``recs`` from wide sequence ``seq`` (TSEQ stamped)."""
    recs = recs.copy()
    tseq = (np.arange(len(recs), dtype=np.uint64) + np.uint64(seq)) & np.uint64(0xFF)
    restamp(recs, (recs["ctrl"].astype(np.uint64) & ~np.uint64(0xFF << 32)) | (tseq << np.uint64(32)))
    return Shim(1, cable, 1, 2, seq, 0).encode() + recs.tobytes()


def link_capture(max_mps: int, drop: float = 0.0, seed: int = 3, seconds: float = 0.3):
    """Datagrams of a link pair carrying one of each Message; (packets, messages B received)."""
    packets = []
    pair = Pair(seed=seed, impl=CLink, max_mps=max_mps, drop=drop,
                tap=lambda i, d: packets.append(ipv4_udp(ENDS[i], ENDS[1 - i], d)))
    pair.run(0.05)
    assert pair.up()
    a = pair.links[0]
    for ethertype, payload in ((0x0800, icmp_echo()), (0x0806, HARP_V4.encode()), (0x0806, HARP_V6.encode()),
                               (0x8181, st_packet(ST_RC)), (0x8181, st_packet(ST_END, ST_OPTS)),
                               (0x88B6, RRP_INFO.encode()), (0x88B6, RRP_RTBL.encode()),
                               (0x88B6, EEP_USER.encode()), (0x88B6, MW_USER.encode("mw5"))):
        a.enqueue(1, Message(1, B_ULA, A_ULA, ethertype, payload).records())
    a.enqueue(3, Message(3, B_ULA, A_ULA, 0x8181, st_packet(Header(StOp.DATA, dc=3), bytes(range(256)) * 40))
              .records())
    a.enqueue(1, single_records(1, MpType.ADMIN, ADMIN_I_AM.encode()))
    for _ in range(int(seconds / 0.001)):  # until all 10 Messages are in
        pair.step()
        if len(pair.got[1]) == 10:
            break
    pair.run(0.05)  # the last acks and credits
    return packets, pair.got[1]


@pytest.fixture(scope="module")
def decoded(tmp_path_factory):
    path = tmp_path_factory.mktemp("dissect") / "links.pcap"
    packets, got = link_capture(max_mps=8)
    assert len(got) == 10
    write_pcap(path, packets)
    return path, tshark_json(path)


def msgs(js):
    return [m for p in js for m in values(p, "gsn_msg")]


def test_shim_and_micropacket_fields(decoded):
    _, js = decoded
    assert set(values(js, "gsn.magic")) == {"0x4753"}
    assert set(values(js, "gsn.cable_id")) == {"9"}
    types = set(values(js, "gsn.mp.type"))
    assert {"1", "2", "3", "4", "5", "6"} <= types  # DATA HEADER ADMIN CREDIT RESET RESET_ACK
    assert set(values(js, "gsn.mp.vc")) >= {"1", "3"}
    assert set(values(js, "gsn.mp.lcrc_ok")) == {"1"}
    assert "1" in values(js, "gsn.mp.tail") and int(max(values(js, "gsn.mp.cr"), key=int)) > 0
    assert "duplicate (retransmission)" not in values(js, "gsn.mp.status")
    # every TSEQ is its wide sequence's low 8 bits
    for mp in values(js, "gsn_mp"):
        if "gsn.mp.seq" in mp:
            assert int(mp["gsn.mp.ctrl_tree"]["gsn.mp.tseq"]) == int(mp["gsn.mp.seq"]) & 0xFF


def test_messages_reassembled_with_ecrc_and_ethertypes(decoded):
    _, js = decoded
    ms = msgs(js)
    assert len(ms) == 10  # ADMIN is not a Message
    assert all(m["gsn.msg.ecrc_ok"] == "1" for m in ms)
    assert [m["gsn.msg.ethertype"] for m in ms] == ["0x0800", "0x0806", "0x0806", "0x8181", "0x8181", "0x88b6",
                                                     "0x88b6", "0x88b6", "0x88b6", "0x8181"]
    assert {m["gsn.msg.d_ula"] for m in ms} == {"02:47:53:01:02:00"}
    assert {m["gsn.msg.s_ula"] for m in ms} == {"02:47:53:01:01:00"}
    assert ms[0]["gsn.msg.m_len"] == str(8 + len(icmp_echo()))
    big = ms[-1]
    assert big["gsn.msg.vc"] == "3" and int(big["gsn.msg.micropackets"]) == -(-(16 + 8 + 40 + 10240) // 32)
    assert int(big["gsn.msg.first_frame"]) < max(int(f) for p in js for f in values(p, "frame.number"))
    assert values(js, "icmp.type") == ["8"] and values(js, "icmp.checksum.status") == ["1"]
    assert "192.0.2.2" in values(js, "ip.dst")


def test_harp(decoded):
    _, js = decoded
    assert values(js, "harp.op") == ["1", "9"]
    assert values(js, "harp.hrd") == ["28", "28"]
    assert values(js, "harp.rpa") == ["192.0.2.1"] and values(js, "harp.tpa") == ["192.0.2.2"]
    assert values(js, "harp.rpa6") == ["2001:db8::1"]
    assert values(js, "harp.rha") == ["02:47:53:01:01:00", "02:47:53:01:02:00"]


def test_st(decoded):
    _, js = decoded
    assert values(js, "st.op") == ["0x0001", "0x001e", "0x001b"]
    assert set(values(js, "st.checksum_ok")) == {"1"}
    assert values(js, "st.d_port")[0] == "5001" and values(js, "st.s_id")[0] == "0x11223344"
    assert values(js, "st.flags.interrupt")[0] == "1" and values(js, "st.dc")[0] == "1"
    assert values(js, "st.option.reason") == ["4"]
    assert values(js, "st.dc")[2] == "3"


def test_pktway(decoded):
    _, js = decoded
    assert values(js, "pktway.dialect") == ["pw0", "pw0", "pw0", "mw5"]
    assert values(js, "pktway.pt") == ["0x0002", "0x0002", "0x0006", "0x0006"]
    assert values(js, "pktway.te.rrp") == [str(int(RrpTE.INFO)), str(int(RrpTE.RTBL))]
    assert values(js, "pktway.rrp.name") == ["router-a"]
    assert values(js, "pktway.rrp.capability") == ["7"]
    assert values(js, "pktway.rrp.san_id") == ["0x000200"] and values(js, "pktway.rrp.sn") == ["17"]
    assert values(js, "pktway.rrp.q") == ["3"] and values(js, "pktway.rrp.mtu") == ["1024"]
    assert values(js, "pktway.l2rh") == ["05:03:00", "02:47:53:01:02:00", "03:00:03:00"]
    assert values(js, "pktway.symbol") == ["0x000001"] and values(js, "pktway.oh.type") == ["9"]
    assert values(js, "pktway.tail")[2] == "0x8000000000000001"
    assert values(js, "pktway.dt")[3] == "0x000123" and values(js, "pktway.mw.free") == ["0x1234"]
    assert not experts(js)


def test_admin(decoded):
    _, js = decoded
    assert values(js, "gsn.admin.command") == ["0x84"]
    assert values(js, "gsn.admin.xid") == ["0xabcdef01"]
    assert values(js, "gsn.admin.element_type") == ["2"] and values(js, "gsn.admin.ports") == ["8"]
    assert values(js, "gsn.admin.ula") == ["02:47:53:01:02:00"]


def test_flipped_byte_is_lcrc_bad(decoded, tmp_path):
    path, js = decoded
    linktype, recs = read_pcap(path)
    # the datagram holding the ICMP echo's HEADER: flip a data byte of that micropacket
    frame = next(int(p["_source"]["layers"]["frame"]["frame.number"]) for p in js if values(p, "icmp.type"))
    head, pkt = recs[frame - 1]
    hdr_off = pkt.index(bytes.fromhex("aaaa03000000") + b"\x08\x00") - 16
    bad = bytearray(pkt)
    bad[hdr_off + 30] ^= 0x01
    recs[frame - 1] = (head, bytes(bad))
    out = tshark_json(rewrite_pcap(path, tmp_path / "bad.pcap", recs, linktype))
    p = out[frame - 1]
    assert "0" in values(p, "gsn.mp.lcrc_ok")
    assert any("LCRC mismatch" in e for e in experts(p))
    assert not values(p, "icmp.type")  # the receiver drops it: nothing reassembled from it
    assert "dropped (LCRC error)" in values(p, "gsn.mp.status")


def test_retransmissions_reassembled_once(tmp_path):
    """A lossy cable: resends are shown as duplicates and each Message is reassembled
    exactly once, as the receiving link delivered it; the receiver's SACK NULLs show
    their ranges."""
    packets, got = link_capture(max_mps=32, drop=0.1, seed=11, seconds=2.0)
    js = tshark_json(write_pcap(tmp_path / "lossy.pcap", packets))
    ms = msgs(js)
    assert len(got) == 10
    assert [m["gsn.msg.ethertype"] for m in ms] == [f"{int(g.ethertype):#06x}" for g in got]
    assert all(m["gsn.msg.ecrc_ok"] == "1" for m in ms)
    assert "duplicate (retransmission)" in values(js, "gsn.mp.status")
    starts, ends = values(js, "gsn.mp.sack.start"), values(js, "gsn.mp.sack.end")
    assert starts and len(starts) == len(ends)
    assert all(0 < int(a) < int(b) for a, b in zip(starts, ends))


def test_emulated_san_datagram(tmp_path):
    raw = native(5) + RRP_INFO.encode()
    js = tshark_json(write_pcap(tmp_path / "san.pcap", [ipv4_udp(("10.9.0.1", 40100), ("10.9.0.2", 40101), raw)]))
    assert values(js, "pktway.san.port") == ["5"] and values(js, "pktway.te.rrp") == [str(int(RrpTE.INFO))]
    assert values(js, "pktway.rrp.addr") == ["0x000040"]


def test_trailer_after_micropackets(tmp_path):
    packets, _ = link_capture(max_mps=8)
    with_trailer = []
    for pkt in packets[:40]:
        src, dst = (ENDS[0], ENDS[1]) if pkt[15] == 1 else (ENDS[1], ENDS[0])  # 10.9.0.1 sent it
        with_trailer.append(ipv4_udp(src, dst, pkt[28:] + b"T" * 16))
    js = tshark_json(write_pcap(tmp_path / "trailer.pcap", with_trailer))
    assert set(values(js, "gsn.trailer")) == {"54:" * 15 + "54"}
    assert set(values(js, "gsn.mp.lcrc_ok")) == {"1"}


def test_authenticated_cable_trailer(tmp_path):
    """A keyed cable's datagrams (daemons/wire/cableauth.py) show session, counter and tag."""
    from daemons.wire.cableauth import CableAuth

    packets, _ = link_capture(max_mps=8)
    auth = CableAuth(bytes(range(32)), 0, session=0x1122334455667788)
    sealed = []
    for pkt in packets[:20]:
        src, dst = (ENDS[0], ENDS[1]) if pkt[15] == 1 else (ENDS[1], ENDS[0])
        sealed.append(ipv4_udp(src, dst, auth.seal(pkt[28:])))
    js = tshark_json(write_pcap(tmp_path / "auth.pcap", sealed))
    assert set(values(js, "gsn.auth.session")) == {str(0x1122334455667788)}
    assert values(js, "gsn.auth.counter") == [str(i) for i in range(20)]
    assert len(set(values(js, "gsn.auth.tag"))) == 20
    assert set(values(js, "gsn.mp.lcrc_ok")) == {"1"}
    assert not any("after the last micropacket" in e for e in experts(js))


def test_malformed_input_gives_expert_info_never_a_lua_error(tmp_path):
    rng = random.Random(5)
    packets, _ = link_capture(max_mps=8)
    cable = [p[28:] for p in packets]
    good_harp, good_st, good_eep = HARP_V4.encode(), st_packet(ST_RC), RRP_RTBL.encode()
    hostile = [b"GS\x01", b"GS\x01\x00" + bytes(28), b"GS\x02\x01" + bytes(68), b"GS\x01\x80" + bytes(68)]
    for _ in range(150):
        base = bytearray(rng.choice(cable))
        for _ in range(rng.randint(1, 6)):
            base[rng.randrange(len(base))] = rng.randrange(256)
        hostile.append(bytes(base[: rng.randint(32, len(base))]))
    # Messages whose payloads are cut or mangled, wrapped in valid micropackets
    inner = []
    for et, payload in ((0x0806, good_harp), (0x8181, good_st), (0x88B6, good_eep), (0x88B6, MW_USER.encode("mw5"))):
        for _ in range(25):
            p = bytearray(payload[: rng.randint(0, len(payload))])
            for _ in range(rng.randint(0, 3)):
                if p:
                    p[rng.randrange(len(p))] = rng.randrange(256)
            inner.append((et, bytes(p)))
    bad_llc = bytearray(Message(1, B_ULA, A_ULA, 0x0800, icmp_echo()).stream())
    bad_llc[16] = 0x42
    dgrams = [batch(stream_records(1, bytes(bad_llc)), 0)]
    for i, (et, p) in enumerate(inner):
        dgrams.append(batch(Message(1, B_ULA, A_ULA, et, p).records(), 100 + 1000 * i))
    san = [native(1) + bytes(rng.randrange(256) for _ in range(rng.choice((24, 32, 48)))) for _ in range(50)]
    pkts = [ipv4_udp(("10.9.0.3", 6400), ("10.9.0.4", 6400), d) for d in hostile + dgrams]
    pkts += [ipv4_udp(("10.9.0.3", 40200), ("10.9.0.4", 40201), d) for d in san]
    js = tshark_json(write_pcap(tmp_path / "hostile.pcap", pkts))
    assert len(js) == len(pkts)
    ex = experts(js)
    assert any("shorter than the 32-byte shim" in e for e in ex)
    assert any("unsupported version 2" in e for e in ex) and any("unknown flag bits" in e for e in ex)
    assert any("LLC/SNAP is not" in e for e in ex)
    assert any(e.startswith("truncated") or "too short" in e for e in ex)  # HARP
    assert any("shorter than the 40-byte header" in e for e in ex)  # ST
    assert any("Malformed" in e or "run" in e for e in ex)


def test_coalesced_datagrams_are_split(tmp_path):
    """A capture where the kernel coalesced UDP (GRO) holds several cable datagrams in one
    UDP payload, all of one size but the last: each is dissected on its own."""
    packets, _ = link_capture(max_mps=8)
    mine = [p[28:] for p in packets if p[15] == 1]  # sent by 10.9.0.1
    i = next(k for k in range(len(mine) - 1) if len(mine[k]) >= len(mine[k + 1]) and mine[k][3] == 1
             and mine[k + 1][3] == 1)
    merged = [ipv4_udp(ENDS[0], ENDS[1], d) for d in mine[:i]] + [ipv4_udp(ENDS[0], ENDS[1], mine[i] + mine[i + 1])]
    js = tshark_json(write_pcap(tmp_path / "gro.pcap", merged))
    last = js[-1]
    seqs = [int(s) for s in values(last, "gsn.seq")]
    assert len(seqs) == 2 and seqs[1] == seqs[0] + (len(mine[i]) - 32) // 40
    assert set(values(last, "gsn.mp.lcrc_ok")) == {"1"} and not values(last, "gsn.trailer")


def test_wireshark_install_then_tshark_loads_the_plugins(tmp_path):
    """./gsn wireshark-install --user puts the dissectors where tshark finds them itself."""
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, HOME=str(tmp_path))
    r = subprocess.run([str(repo / "gsn"), "wireshark-install", "--user"], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    dest = tmp_path / ".local/lib/wireshark/plugins/gsn-revival"
    assert sorted(p.name for p in dest.glob("*.lua")) == sorted(p.name for p in LUA_FILES)
    listing = subprocess.run(["tshark", "-G", "plugins"], capture_output=True, text=True, env=env, timeout=60).stdout
    assert all(str(dest / p.name) in listing for p in LUA_FILES)
    bad = subprocess.run([str(repo / "gsn"), "wireshark-install", "--frobnicate"], capture_output=True, text=True,
                         env=env, timeout=60)
    assert bad.returncode == 2 and "unknown argument '--frobnicate'" in bad.stderr
    if tshark_scripts():  # no copy in the global plugin folder: tshark must decode with the user's copy alone
        pcap = write_pcap(tmp_path / "ping.pcap", link_capture(max_mps=8)[0])
        out = subprocess.run(["tshark", "-n", "-r", str(pcap), "-Y", "icmp.type == 8"], capture_output=True,
                             text=True, env=env, timeout=60)
        assert "cable 9" in out.stdout and "Echo (ping) request" in out.stdout and "Lua" not in out.stderr, out.stderr


def _micropacket(data: bytes, ctrl: int) -> bytes:
    ctrl &= ~0xFFFF
    return data + (ctrl | lcrc_scalar(data, ctrl)).to_bytes(8, "big")


_mps = st.lists(st.tuples(st.binary(min_size=32, max_size=32), st.integers(0, (1 << 64) - 1)), min_size=1,
                max_size=12)
_hostile = st.one_of(
    st.binary(max_size=200).map(lambda b: b"GS\x01" + b),  # anything behind the magic
    st.tuples(st.integers(0, 1), st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1), _mps,
              st.binary(max_size=45)).map(  # well-formed micropackets, random control words and headers
        lambda t: Shim(t[0], 5, 1, 2, t[2], 0).encode() + b"".join(_micropacket(d, c) for d, c in t[3]) + t[4]),
    st.tuples(st.sampled_from((0x0800, 0x0806, 0x8181, 0x88B6)), st.binary(max_size=120)).map(  # random payloads
        lambda t: batch(Message(1, B_ULA, A_ULA, t[0], t[1]).records(), 0, cable=6)),
    st.binary(max_size=64).map(lambda b: native(3) + b),  # emulated SAN
)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_hostile, min_size=1, max_size=40))
def test_hypothesis_hostile_datagrams(tmp_path_factory, datagrams):
    """Whatever arrives, every packet is dissected and problems are expert info: tshark_json
    fails on a Lua error or a "dissector error" the dissectors caught themselves."""
    path = tmp_path_factory.mktemp("hyp") / "h.pcap"
    pkts = [ipv4_udp(("10.9.0.5", 6400 if i % 2 else 40300), ("10.9.0.6", 40301), d) for i, d in enumerate(datagrams)]
    assert len(tshark_json(write_pcap(path, pkts))) == len(pkts)


def test_two_pass_dissection_gives_the_same_messages(decoded):
    """Wireshark re-dissects frames (GUI clicks, tshark -2): reassembly is worked out once,
    in frame order, and every later pass shows the same Messages and verdicts."""
    path, js = decoded
    again = tshark_json(path, "-2")
    for key in ("gsn.msg.ecrc_ok", "gsn.msg.first_frame", "gsn.mp.status", "icmp.type", "harp.op", "st.op",
                "pktway.pt", "gsn.admin.command"):
        assert values(again, key) == values(js, key), key


def test_batches_the_link_would_drop_are_marked(tmp_path):
    """As daemons/link/link.py: a sequenced batch whose TSEQs do not follow the shim's
    sequence, or that holds an unsequenced TYPE, is dropped whole."""
    recs = Message(1, B_ULA, A_ULA, 0x0800, icmp_echo()).records()  # TSEQ 0, 0: not 40, 41
    wrong_tseq = Shim(1, 8, 1, 2, 40, 0).encode() + recs.tobytes()
    reset_inside = Shim(1, 8, 1, 2, 0, 0).encode() + _micropacket(bytes(32), int(MpType.RESET) << 58)
    js = tshark_json(write_pcap(tmp_path / "drop.pcap", [ipv4_udp(ENDS[0], ENDS[1], d)
                                                         for d in (wrong_tseq, reset_inside)]))
    assert set(values(js[0], "gsn.mp.status")) == {"dropped (batch's TSEQs do not follow the shim's sequence)"}
    assert values(js[1], "gsn.mp.status") == ["dropped (batch holds an unsequenced TYPE)"]
    assert not values(js, "gsn_msg") and not values(js, "icmp.type")


def test_snap_length_cut_datagrams(tmp_path):
    """tcpdump -s N: the micropackets kept are shown, the rest counted; Messages that lose
    micropackets to the cut are not reassembled, and no gap is reported for them."""
    packets, _ = link_capture(max_mps=8)
    js = tshark_json(write_pcap(tmp_path / "snap.pcap", packets, snaplen=28 + 32 + 2 * 40 + 5))
    assert any(e.startswith("the capture kept 117 of 352 bytes: 2 of 8") for e in experts(js))  # UDP payload
    assert not values(js, "gsn.trailer") and not any("not captured" in e for e in experts(js))
    assert len(values(js, "gsn_mp")) < sum(int(c) for c in values(js, "gsn.micropackets"))
    assert values(js, "gsn.msg.ethertype") == ["0x8181"]  # ST RC fits in 2 micropackets; the others were cut
    assert not any("no Message open" in e for e in experts(js))  # their DATA is not a protocol error
