"""gsnd's compiled data plane (tap_pump, rx_pump, dp_send, the C reassembly) against
the Python path it replaces: every frame either arrives at the other TAP exactly as
wire/ether.py's frame_to_message + message_to_frame make it, or is dropped under the
reason frame_to_message gives, counted under the same name."""

from __future__ import annotations

import struct
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from daemons.constants import ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6, SHIM_BYTES, ULA_BROADCAST
from daemons.wire.shim import decode_datagram
from daemons.wire.ether import FrameDrop, frame_to_message, message_to_frame
from tests.unit.dprig import MTU, ULAS, Rig


@pytest.fixture
def rig():
    r = Rig()
    r.bring_up()
    yield r
    r.close()


def ipv4(size: int, dst=(192, 0, 2, 2), total: int | None = None) -> bytes:
    body = bytearray(max(size, 20))
    body[0] = 0x45
    struct.pack_into("!H", body, 2, size if total is None else total)
    body[16:20] = bytes(dst)
    return bytes(body)


def frame(dst: bytes, ethertype: int, payload: bytes, src: bytes = ULAS[0]) -> bytes:
    return dst + src + struct.pack("!H", ethertype) + payload


def expect(f: bytes, arp: bool = True, mtu: int = MTU):
    """What the Python path does with frame f from side 0: (frame at side 1) or the drop reason."""
    out = frame_to_message(f, mtu)
    if isinstance(out, FrameDrop):
        return out.counter
    d, et, pl = out
    if et == ETHERTYPE_ARP and not arp:
        return "tx_drop_arp_off"
    if d != ULAS[1] and d != ULA_BROADCAST:
        return "rx_drop_not_for_us"
    return message_to_frame(d, ULAS[0], et, pl)


def test_link_comes_up_through_the_data_plane_admin_included(rig):
    # WHAT_ARE_YOU / I_AM crossed VC1 and VC2: ADMIN on VC1 went through the C reassembly
    assert all(ep.neighbour == "endpoint" and ep.ula == ULAS[i] for i, ep in enumerate(rig.eps))


def test_full_size_ipv4_and_ipv6_and_multicast_arrive_intact(rig):
    frames = [frame(ULAS[1], ETHERTYPE_IPV4, ipv4(65266)),
              frame(ULAS[1], ETHERTYPE_IPV6, bytes(range(256)) * 200),
              frame(bytes.fromhex("01005e000001"), ETHERTYPE_IPV4, ipv4(100, dst=(224, 0, 0, 1))),
              frame(bytes.fromhex("333300000001"), ETHERTYPE_IPV6, bytes(24) + b"\xff" + bytes(15) + b"\0\0\0\1"),
              frame(ULAS[1], ETHERTYPE_IPV4, ipv4(60) + b"ethernet padding")]
    assert rig.send_frames(0, frames) == len(frames)
    got = rig.taps[1].frames()
    assert got == [expect(f) for f in frames]
    st = rig.eps[1].status()
    assert st["counters"]["rx_messages"] == len(frames)
    assert rig.dps[1].counters("ip", {})["rx_frames"] == len(frames)
    assert rig.dps[0].counters("ip", {})["tx_frames"] == len(frames)


def test_drops_are_counted_under_the_python_names(rig):
    frames = [b"short", frame(ULAS[1], 0x88B5, b"x" * 50), frame(bytes(6), ETHERTYPE_IPV4, ipv4(40)),
              frame(ULAS[1], ETHERTYPE_IPV6, bytes(MTU + 1)), frame(bytes.fromhex("020000000009"), ETHERTYPE_IPV4,
                                                                     ipv4(40))]
    rig.send_frames(0, frames)
    assert rig.taps[1].frames() == []
    ip0 = rig.dps[0].counters("ip", {})
    for reason in ("tx_drop_runt_frame", "tx_drop_not_ip_or_arp", "tx_drop_unknown_ula", "tx_drop_over_mtu"):
        assert ip0[reason] == 1, (reason, ip0)
    assert rig.eps[1].status()["counters"]["rx_drop_not_for_us"] == 1


def test_link_down_and_arp_off_drop_on_the_send_side():
    r = Rig(arp=False)
    try:
        r.send_frames(0, [frame(ULAS[1], ETHERTYPE_IPV4, ipv4(40))])  # not up yet
        assert r.dps[0].counters("ip", {})["tx_drop_link"] == 1
        assert r.eps[0].status()["counters"]["tx_drop_link_down"] == 1
        r.bring_up()
        r.send_frames(0, [frame(ULA_BROADCAST, ETHERTYPE_ARP, bytes(28))])
        assert r.dps[0].counters("ip", {})["tx_drop_arp_off"] == 1
    finally:
        r.close()


def test_held_vc1_withholds_credits_then_returns_them(rig):
    ep1 = rig.eps[1]
    ep1.hold(1, True)
    rig.send_frames(0, [frame(ULAS[1], ETHERTYPE_IPV4, ipv4(30000))] * 3)
    assert len(rig.taps[1].frames()) == 3  # the TAP still takes them; the peer's credits stay out
    ep1.hold(1, False)
    for _ in range(20):
        rig.step()
    assert ep1.withheld[1] == 0 and ep1.status()["counters"]["credits_withheld_vc1_mps"] > 0
    assert ep1.link.ledger.balanced()
    assert rig.eps[0].link.credits[1] == ep1.link.ledger.buffers[1]


def test_non_ip_on_vc1_goes_up_to_python(rig):
    assert rig.eps[0].send(1, ULAS[1], 0x88B5, b"ulp payload" * 10)
    for _ in range(20):
        rig.step()
    assert [m.payload for m in rig.messages[1]] == [b"ulp payload" * 10]
    assert rig.taps[1].frames() == []


ETHERTYPES = st.sampled_from([ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_ARP, 0x88B5, 0x0000])
@pytest.mark.parametrize("max_mps", [3, 36, 223])
def test_messages_across_many_small_datagrams_arrive_intact(max_mps):
    """Datagrams cut for a 1500- or 9000-byte underlay (36, 223 micropackets) or smaller:
    most of a large Message's datagrams hold neither its HEADER nor its tail, and the C
    reassembly takes those without looking for the Message's end (ra_feed's plain runs);
    small Messages between them start and end inside one datagram."""
    r = Rig()
    try:
        r.bring_up()
        for ep in r.eps:
            ep.link.max_mps = max_mps
        fs = [frame(ULAS[1], ETHERTYPE_IPV4, ipv4(65266)), frame(ULAS[1], ETHERTYPE_IPV4, ipv4(60)),
              frame(ULAS[1], ETHERTYPE_IPV6, bytes(range(256)) * 40), frame(ULAS[1], ETHERTYPE_IPV4, ipv4(1000)),
              frame(ULAS[1], ETHERTYPE_IPV4, ipv4(30000))]
        for f in fs:
            r.taps[0].outer.send(f)
        r.dps[0].tap_batch(1 << 30)
        got: list[bytes] = []
        for _ in range(3000):
            r.step()
            got += r.taps[1].frames()
            if len(got) == len(fs):
                break
        assert got == [expect(f) for f in fs]
        assert not r.dps[1].counters("reassembly", {}), r.dps[1].counters("reassembly", {})
    finally:
        r.close()


DSTS = st.sampled_from([ULAS[1], ULA_BROADCAST, bytes(6), bytes.fromhex("01005e7f0001"), bytes.fromhex("0a0000000001")])


@st.composite
def frames(draw):
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.binary(max_size=40))
    et = draw(ETHERTYPES)
    size = draw(st.integers(0, 3000)) if kind < 8 else draw(st.integers(60000, MTU + 20))
    if et == ETHERTYPE_IPV4 and draw(st.booleans()):
        payload = ipv4(max(size, 20), dst=draw(st.tuples(*[st.integers(0, 255)] * 4)),
                       total=draw(st.one_of(st.none(), st.integers(0, 0xFFFF))))
    else:
        payload = draw(st.binary(min_size=min(size, 64), max_size=min(size, 64))) * (size // 64 + 1)
        payload = payload[:size]
    return frame(draw(DSTS), et, payload)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(frames(), min_size=1, max_size=8))
def test_compiled_path_matches_the_python_path(fs):
    r = Rig(arp=True)
    try:
        r.bring_up()
        r.send_frames(0, fs)
        want = [expect(f) for f in fs]
        assert r.taps[1].frames() == [w for w in want if isinstance(w, bytes)]
        drops = {**r.dps[0].counters("ip", {}), **r.eps[1].status()["counters"]}
        for reason in set(w for w in want if isinstance(w, str)):
            assert drops.get(reason) == sum(w == reason for w in want), (reason, drops)
    finally:
        r.close()


def cable_rx_counts(payload: bytes, key: bytes | None) -> list[tuple[dict, dict]]:
    """(cable rx_* counters, link bad_* counters) each path adds when side 1's cable gets
    ``payload`` from its peer's address: the compiled path (rx_pump), then the Python one."""
    seen = []
    for dataplane in (True, False):
        r = Rig(dataplane=dataplane, key=key)
        try:
            r.bring_up()
            t, link = r.transports[1], r.eps[1].link
            cable = lambda: r.dps[1].counters("cable", t.counters) if dataplane else dict(t.counters)  # noqa: E731
            c0, l0 = cable(), dict(link.counters)
            r.transports[0].sock.sendto(payload, t.sock.getsockname())
            r.step()
            c1, l1 = cable(), dict(link.counters)
            seen.append(({k: c1[k] - c0.get(k, 0) for k in c1 if k.startswith("rx_") and c1[k] != c0.get(k, 0)},
                         {k: l1[k] - l0.get(k, 0) for k in l1 if k.startswith("bad_") and l1[k] != l0.get(k, 0)}))
        finally:
            r.close()
    return seen


def test_a_forged_datagram_on_a_keyed_cable_is_not_counted_received():
    """io/udp.py counts rx_datagrams for the datagrams that open; rx_pump counted a forged
    one (100 zero bytes: rx_auth_truncated) as received too."""
    compiled, python = cable_rx_counts(bytes(100), bytes(range(32)))
    assert python[0].get("rx_auth_truncated") == 1  # (other traffic of the step may add to rx_*)
    assert compiled == python


@pytest.mark.parametrize("key", [None, bytes(range(32))])
def test_an_empty_cable_datagram_is_counted_as_the_python_path_counts_it(key):
    """An empty datagram from the peer's address: io/udp.py hands it on, so the Python path
    counts it (rx_datagrams and bad_shim_shim; keyed: rx_auth_truncated); rx_pump skipped it."""
    compiled, python = cable_rx_counts(b"", key)
    assert (python[1].get("bad_shim_shim") if key is None else python[0].get("rx_auth_truncated")) == 1
    assert compiled == python


@pytest.mark.parametrize("key", [None, bytes(range(32))])
def test_a_datagram_whose_shim_seq_was_moved_loses_messages_but_never_corrupts_one(key):
    """No CRC covers the cable shim.  A copy of a real datagram sent from the peer's address
    with its seq moved 512 ahead (TSEQ, its low byte, still matches) is kept out of order on
    an unkeyed cable and, when the sequence reaches it, displaces the real one: the Messages
    it overlaps are lost and counted by the reassembly, and every frame that does arrive is
    one that was sent.  A keyed cable refuses the forged datagram and loses nothing."""
    g = Rig(key=key)
    try:
        g.bring_up()
        a = g.eps[0]
        a.send(1, ULAS[1], 0x88B5, bytes(300))
        real = a.link.datagrams(g.now)
        shim, _ = decode_datagram(real[0])
        d = replace(shim, seq=shim.seq + 512).encode() + bytes(real[0])[SHIM_BYTES:]
        g.transports[0].sock.sendto(d, g.transports[1].local)  # keyed: the forger has no key
        g.dps[0].send_many(real)
        sent, got = [], []
        for i in range(40):  # ~900 micropackets: past the moved seq
            fs = [ULAS[1] + ULAS[0] + ETHERTYPE_IPV4.to_bytes(2, "big") + bytes([i, j]) * 100 for j in range(3)]
            g.send_frames(0, fs)
            sent += [expect(f) for f in fs]
            got += g.taps[1].frames()
        counts = g.dps[1].link.dp_counters()
    finally:
        g.close()
    assert all(f in sent for f in got)
    if key is None:
        assert len(got) < len(sent) and counts["reassembly"].get("stray_data_mps", 0) > 0
    else:
        assert got == sent
