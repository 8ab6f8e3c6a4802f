"""The TAP's virtio_net_hdr (daemons/_vnet.h against its oracle daemons/wire/vnet.py):
a frame whose checksum the kernel left to gsnd (NEEDS_CSUM) reaches the other side with
the checksum complete, as the IP packet itself (the wire format does not change); a TCP or
UDP segment is written to the TAP as CHECKSUM_PARTIAL again (the receiving kernel does not
verify it) and completing it gives back the segment the sender checksummed; bad headers
are dropped and counted."""

from __future__ import annotations

import errno
import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from daemons.constants import ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6
from daemons.io.tap import set_vnet_le
from daemons.wire import vnet
from tests.unit.dprig import ULAS, Rig
from tests.unit.test_dataplane import expect, frame, ipv4

TCP = 6


def pseudo_sum(src: bytes, dst: bytes, proto: int, length: int) -> int:
    return vnet.inet_sum(src + dst + struct.pack("!BBH", 0, proto, length))


def tcp_partial(payload: bytes) -> tuple[bytes, int, int]:
    """An Ethernet frame with an IPv4 TCP segment as the kernel hands it over with
    CHECKSUM_PARTIAL (the field holds the pseudo-header's sum), csum_start, csum_offset."""
    src, dst = bytes([192, 0, 2, 1]), bytes([192, 0, 2, 2])
    seg = bytearray(struct.pack("!HHIIBBHHH", 40000, 5201, 1, 2, 5 << 4, 0x18, 512, 0, 0) + payload)
    struct.pack_into("!H", seg, 16, pseudo_sum(src, dst, TCP, len(seg)))
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(seg), 1, 0, 64, TCP, 0, src, dst))
    struct.pack_into("!H", ip, 10, ~vnet.inet_sum(ip) & 0xFFFF)
    return frame(ULAS[1], ETHERTYPE_IPV4, bytes(ip + seg)), 14 + 20, 16


def tcp_ok(f: bytes) -> bool:
    """The TCP checksum of an IPv4 frame verifies (the receiver's own computation)."""
    ip = f[14:]
    seg = ip[20:struct.unpack_from("!H", ip, 2)[0]]
    return (pseudo_sum(ip[12:16], ip[16:20], TCP, len(seg)) + vnet.inet_sum(seg)) % 0xFFFF == 0


@pytest.fixture
def rig():
    r = Rig(vnet=(True, True))
    r.bring_up()
    yield r
    r.close()


def test_inet_sum_is_rfc_1071s_example():
    assert vnet.inet_sum(bytes.fromhex("0001f203f4f5f6f7")) == 0xDDF2
    assert vnet.inet_sum(b"\x01") == 0x0100  # an odd byte is a word's high byte


def test_the_kernels_partial_checksum_is_completed_and_left_partial_again_on_receive(rig):
    frames, hdrs = [], []
    for size in (0, 1, 1459, 65000):
        f, start, off = tcp_partial(bytes(range(251)) * (size // 251) + bytes(size % 251))
        assert not tcp_ok(f)
        frames.append(f)
        hdrs.append(vnet.HDR.pack(vnet.F_NEEDS_CSUM, vnet.GSO_NONE, 0, 0, start, off))
    assert rig.send_frames(0, [h + f for h, f in zip(hdrs, frames)]) == len(frames)
    got = rig.taps[1].frames()
    assert len(got) == len(frames)
    for g, f, h in zip(got, frames, hdrs):
        assert g == h + f  # as the sending kernel handed it over: the pseudo-header's sum in the field
        done = vnet.take(g)  # what the kernel computes if the packet leaves the host again
        assert isinstance(done, bytes) and tcp_ok(done) and done == vnet.take(h + f)


def test_the_frame_on_the_cable_carries_the_complete_checksum():
    r = Rig(vnet=(True, False))  # the receiving side a plain TAP: it gets the frame as the cable carried it
    try:
        r.bring_up()
        frames = [tcp_partial(bytes([7]) * size) for size in (0, 3, 1460, 65000)]
        r.send_frames(0, [vnet.HDR.pack(vnet.F_NEEDS_CSUM, 0, 0, 0, start, off) + f for f, start, off in frames])
        got = r.taps[1].frames()
        assert len(got) == len(frames) and all(tcp_ok(g) for g in got)
        assert got == [vnet.take(vnet.HDR.pack(vnet.F_NEEDS_CSUM, 0, 0, 0, start, off) + f) for f, start, off in frames]
    finally:
        r.close()


def test_what_is_not_a_tcp_or_udp_checksum_is_written_plain(rig):
    udp_no_csum = bytearray(ipv4(60))
    udp_no_csum[9] = 17
    fragment = bytearray(tcp_partial(bytes(100))[0][14:])
    fragment[6] = 0x20  # more fragments
    frames = [frame(ULAS[1], ETHERTYPE_IPV4, bytes(udp_no_csum)), frame(ULAS[1], ETHERTYPE_IPV4, bytes(fragment)),
              frame(ULAS[1], ETHERTYPE_IPV6, bytes([0x60]) + bytes(5) + b"\x2c" + bytes(100)),  # a fragment header
              frame(ULAS[1], ETHERTYPE_ARP, bytes(28))]
    rig.send_frames(0, [vnet.PLAIN + f for f in frames])
    assert rig.taps[1].frames() == [vnet.PLAIN + f for f in frames]


def test_bad_headers_are_dropped_and_counted(rig):
    f = frame(ULAS[1], ETHERTYPE_IPV6, bytes(100))
    bad = [b"\x01" * 5,  # shorter than the header
           vnet.HDR.pack(0, 1, 54, 1448, 0, 0) + f,  # TSO: never offered
           vnet.HDR.pack(vnet.F_NEEDS_CSUM, 0, 0, 0, len(f) - 1, 0) + f,  # field past the end
           vnet.HDR.pack(vnet.F_NEEDS_CSUM, 0, 0, 0, 0xFFFF, 0xFFFF) + f]
    rig.send_frames(0, bad)
    assert rig.taps[1].frames() == []
    tap = rig.dps[0].counters("tap", {})
    assert tap["read_drop_gso"] == 1 and tap["read_drop_bad_csum_offsets"] == 2
    assert rig.dps[0].counters("ip", {})["tx_drop_runt_frame"] == 1
    assert [vnet.take(b) for b in bad] == ["tx_drop_runt_frame", "read_drop_gso"] + ["read_drop_bad_csum_offsets"] * 2


@st.composite
def vnet_frames(draw):
    size = draw(st.integers(0, 2000)) if draw(st.booleans()) else draw(st.integers(60000, 65000))
    body = draw(st.binary(min_size=min(size, 97), max_size=min(size, 97))) * (size // 97 + 1)
    kind = draw(st.integers(0, 3))
    if kind == 0:  # a TCP segment as the kernel hands it over
        f, start, off = tcp_partial(body[:size])
        return vnet.HDR.pack(vnet.F_NEEDS_CSUM, 0, 0, 0, start, off) + f
    if kind == 1:  # IPv6 with TCP or UDP behind it, its payload length right or not
        body = (bytes([0x60, 0, 0, 0]) + draw(st.integers(0, 0xFFFF)).to_bytes(2, "big")
                + bytes([draw(st.sampled_from([6, 17, 44])), 64]) + body)[:max(size, 48)]
    f = frame(ULAS[1], draw(st.sampled_from([ETHERTYPE_IPV4, ETHERTYPE_IPV6])), body[:size])
    flags = draw(st.sampled_from([0, vnet.F_NEEDS_CSUM, 2, 0xFF]))
    gso = draw(st.sampled_from([0, 0, 0, 1, 4]))
    start = draw(st.one_of(st.integers(0, len(f)), st.integers(0, 0xFFFF)))
    off = draw(st.one_of(st.integers(0, 64), st.integers(0, 0xFFFF)))
    return vnet.HDR.pack(flags, gso, 0, 0, start, off) + f


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(vnet_frames(), min_size=1, max_size=6))
def test_compiled_matches_the_oracle(bufs):
    r = Rig(vnet=(True, True))
    try:
        r.bring_up()
        r.send_frames(0, bufs)
        want = []
        for b in bufs:
            t = vnet.take(b)
            want.append(expect(t) if isinstance(t, bytes) else t)
        assert r.taps[1].frames() == [vnet.to_tap(w) for w in want if isinstance(w, bytes)]
        drops = {**r.dps[0].counters("tap", {}), **r.dps[0].counters("ip", {}), **r.eps[1].status()["counters"]}
        for reason in set(w for w in want if isinstance(w, str)):
            assert drops.get(reason) == sum(w == reason for w in want), (reason, drops)
    finally:
        r.close()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=3000), st.sampled_from([TCP, 17]))
def test_a_checksummed_segment_left_partial_completes_to_itself(payload, proto):
    f, start, off = tcp_partial(payload)
    done = bytearray(vnet.take(vnet.HDR.pack(vnet.F_NEEDS_CSUM, 0, 0, 0, start, off) + f))
    if proto == 17:  # the same bytes as a UDP datagram: its checksum at offset 6
        done[14 + 9] = 17
        struct.pack_into("!H", done, 14 + 10, 0)
        struct.pack_into("!H", done, 14 + 10, ~vnet.inet_sum(done[14:34]) & 0xFFFF)
        seed = pseudo_sum(done[26:30], done[30:34], 17, len(done) - 34)
        struct.pack_into("!H", done, 34 + 6, seed)
        done = bytearray(vnet.take(vnet.HDR.pack(vnet.F_NEEDS_CSUM, 0, 0, 0, 34, 6) + bytes(done)))
    out = vnet.to_tap(bytes(done))
    assert out[0] == vnet.F_NEEDS_CSUM and vnet.take(out) == bytes(done)


def test_vnet_le_is_skipped_where_the_kernel_has_no_such_ioctl():
    r, w = os.pipe()  # not a TUN/TAP descriptor: the kernel answers ENOTTY, as one without TUNSETVNETLE does
    try:
        assert set_vnet_le(r) is False
    finally:
        os.close(r), os.close(w)


def test_vnet_le_other_errors_are_raised():
    r, w = os.pipe()
    os.close(r), os.close(w)
    with pytest.raises(OSError) as exc:
        set_vnet_le(r)  # a closed descriptor is a bug, not a missing ioctl
    assert exc.value.errno == errno.EBADF
