"""Structure-aware fuzzing of every cable path (issue 10 item 1).

Random bytes almost never carry a valid LCRC, so they stop at the first check.
Here a real, up, attacker :class:`Link` builds valid datagrams (correct shim,
nonces, sequence numbers, credits, ECRC and LCRC) around Messages and Admin
micropackets made with the codec; Hypothesis then mutates one field (TYPE incl.
reserved values, VC, TAIL, ERROR, ECRC, TSEQ, RSEQ, M_len, shim seq/ack/nonces/
cable/flags, Admin command/hop counts/route) and the LCRC is re-stamped, so the
mutation reaches the layer it targets.  Fed to a Link, to the gsnd endpoint core
and to the switch core: nothing may raise, and a mutation that makes the input
invalid must move a drop counter.

The field helpers and the bring-up are shared with the coverage-guided targets in
fuzz/frames.py (``./gsn fuzz link gsnd.core switch.core``).
"""

from __future__ import annotations

import os
import random
import struct

import numpy as np
from hypothesis import HealthCheck, event, given, settings, strategies as st

from daemons import constants as C
from daemons.constants import MpType
from daemons.endpoint.core import Endpoint
from daemons.link.link import Link, Received
from daemons.switch.core import Switch
from daemons.wire.message import encode_stream, mps_for, single_records, stream_records
from daemons.wire.micropacket import MP_DTYPE, Micropacket
from daemons.wire.shim import Shim
from fuzz.frames import (CABLE, CONTROL_TYPES, FIELDS, NOT_SEQUENCED, S_ULA, bring_up, drops,  # shared builders
                          get_field, set_field)
from tests.unit.linkpair import each_impl

SETTINGS = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 150)), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


# --- what the attacker sends ---------------------------------------------------------
@st.composite
def upper_records(draw, d_ulas):
    """(vc, records, certain): a valid Message or Admin built with the codec, with
    upper-layer mutations already applied (ECRC kept correct unless mutated); ``certain``
    names the layer that must count it: None, "final" (the final destination)."""
    vc = draw(st.integers(0, 2))
    if draw(st.booleans()):  # a Message
        payload = draw(st.binary(max_size=150))
        stream = encode_stream(3, draw(st.sampled_from(d_ulas)), S_ULA, draw(st.integers(0, 0xFFFF)), payload)
        certain = None
        if draw(st.booleans()):  # M_len: anything a 32-bit field holds
            m_len = draw(st.one_of(st.integers(0, 300), st.integers(0, 2**32 - 1)))
            if m_len < C.LLC_SNAP_BYTES or mps_for(m_len) != mps_for(C.LLC_SNAP_BYTES + len(payload)):
                certain = "final"
            stream[12:16] = m_len.to_bytes(4, "big")
        return vc, stream_records(vc, stream), certain
    # an Admin: any command byte, hop counts, route index and route
    cmd = draw(st.one_of(st.sampled_from([int(c) for c in C.AdminCmd]), st.integers(0, 255)))
    hop = draw(st.integers(0, 3) | st.integers(0, 255))
    init = draw(st.integers(0, 3) | st.integers(0, 255))
    idx = draw(st.integers(0, 8) | st.integers(0, 255))
    route = draw(st.lists(st.sampled_from([1, 2, 3, 255, 0]) | st.integers(0, 255), min_size=7, max_size=7))
    args = draw(st.binary(min_size=16, max_size=16))
    data = struct.pack("!BBBBI7sB", cmd, hop, init, idx, draw(st.integers(0, 2**32 - 1)), bytes(route),
                       draw(st.integers(0, 255))) + args
    structural = idx > C.ADMIN_ROUTE_SLOTS or (hop > init and not cmd & C.ADMIN_RESPONSE_BIT)
    return vc, single_records(vc, MpType.ADMIN, data), "final" if structural else None


MUTATIONS = ["none", "type", "vc", "tail", "error", "ecrc", "tseq", "rseq", "vcr_cr", "seq", "ack",
             "src_nonce", "dst_nonce", "cable", "flags", "magic", "version", "lcrc_flip", "truncate"]
# mutation -> the layer that must count it ("link", "final" or None)
CERTAIN = {"type": "link", "tseq": "link", "rseq": "link", "seq": "link", "src_nonce": "link",
           "dst_nonce": "link", "cable": "link", "flags": "link", "magic": "link", "version": "link",
           "lcrc_flip": "link", "truncate": "link", "ecrc": "final", "error": "final"}


def mutate(draw, dgram: bytes) -> tuple[bytes, str]:
    """Apply one drawn mutation to an attacker datagram, re-stamping LCRC."""
    kind = draw(st.sampled_from(MUTATIONS))
    buf = bytearray(dgram)
    n = (len(buf) - C.SHIM_BYTES) // C.MP_BYTES
    recs = np.frombuffer(buf, MP_DTYPE, n, C.SHIM_BYTES)
    i = draw(st.integers(0, n - 1))
    if kind in ("ecrc", "error"):  # only the final destination checks these, and only on upper types
        upper = [j for j in range(n) if get_field(recs, j, "type") != MpType.CREDIT]
        if not upper:
            return bytes(buf), "none"
        i = draw(st.sampled_from(upper))
    magic, version, flags, cable, src, dst, seq, ack = struct.unpack_from("!HBBIIIQQ", buf)

    def other(old: int, width: int, near: bool = False) -> int:
        """A different value of a ``width``-bit field (close to ``old`` when ``near``)."""
        if near and draw(st.booleans()):
            return (max(0, old + draw(st.integers(-300, 300).filter(bool))) or old + 1) % (1 << width)
        return old ^ draw(st.integers(1, (1 << width) - 1))

    if kind == "type":
        set_field(recs, i, "type", draw(st.sampled_from(NOT_SEQUENCED)))
    elif kind in ("vc", "tail", "error", "ecrc", "tseq", "rseq"):
        set_field(recs, i, kind, other(get_field(recs, i, kind), FIELDS[kind][1]))
    elif kind == "vcr_cr":
        set_field(recs, i, "vcr", draw(st.integers(0, 3)))
        set_field(recs, i, "cr", draw(st.integers(0, 63)))
    elif kind == "seq":
        struct.pack_into("!Q", buf, 16, other(seq, 64, near=True))
    elif kind == "ack":
        struct.pack_into("!Q", buf, 24, other(ack, 64, near=True))
    elif kind == "src_nonce":
        struct.pack_into("!I", buf, 8, other(src, 32))
    elif kind == "dst_nonce":
        struct.pack_into("!I", buf, 12, other(dst, 32))
    elif kind == "cable":
        struct.pack_into("!I", buf, 4, other(cable, 32))
    elif kind == "flags":
        buf[3] = other(flags, 8)
    elif kind == "magic":
        struct.pack_into("!H", buf, 0, other(magic, 16))
    elif kind == "version":
        buf[2] = other(version, 8)
    elif kind == "lcrc_flip":  # one bit anywhere in one micropacket, LCRC left as it was
        bit = draw(st.integers(0, C.MP_BYTES * 8 - 1))
        buf[C.SHIM_BYTES + i * C.MP_BYTES + bit // 8] ^= 1 << (bit % 8)
    elif kind == "truncate":
        buf = buf[: draw(st.integers(0, len(buf) - 1))]
    return bytes(buf), kind


def control_datagram(draw, victim: Link) -> tuple[bytes, str | None]:
    """An unsequenced batch: any TYPE (reserved included) and fields, LCRC correct."""
    mps = []
    certain = None
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from([int(t) for t in CONTROL_TYPES]) | st.integers(0, 15))
        if kind not in CONTROL_TYPES:
            certain = "link"
        mps.append(Micropacket(data=draw(st.binary(min_size=32, max_size=32)), vc=draw(st.integers(0, 3)),
                               type=kind, tail=draw(st.integers(0, 1)), rseq=draw(st.integers(0, 255)),
                               tseq=draw(st.integers(0, 255)), ecrc=draw(st.integers(0, 0xFFFF))).encode())
    nonce = st.sampled_from([victim.my_nonce, victim.peer_nonce, 0]) | st.integers(0, 2**32 - 1)
    shim = Shim(0, victim.cable_id, draw(nonce), draw(nonce), draw(st.integers(0, 2**64 - 1)),
                draw(st.sampled_from([C.NO_ACK, 0, victim.next_seq]) | st.integers(0, 2**64 - 1)))
    return shim.encode() + b"".join(mps), certain


# --- harness ---------------------------------------------------------------------------
def attack(draw, attacker: Link, victim_link: Link, d_ulas, now: float) -> tuple[list[bytes], str | None]:
    """The datagram(s) the attacker sends this round and which layer must count them."""
    if draw(st.integers(0, 4)) == 0:
        dgram, certain = control_datagram(draw, victim_link)
        event(f"control batch, must drop: {certain == 'link'}")
        return [dgram], certain
    vc, recs, certain = draw(upper_records(d_ulas))
    attacker.enqueue(vc, recs)
    dgrams = attacker.datagrams(now)
    assert dgrams, "attacker has credits after bring-up"
    dgram, kind = mutate(draw, dgrams[0])
    event(f"mutation {kind}")
    if kind not in CERTAIN and kind not in ("none", "vcr_cr"):
        certain = None  # e.g. a cleared TAIL leaves a bad Message open, not yet counted
    return [dgram, *dgrams[1:]], CERTAIN.get(kind, certain)


@each_impl
@SETTINGS
@given(st.data(), st.integers(0, 1000))
def test_link_survives_structured_mutations(impl, data, seed):
    attacker = Link(CABLE, 0.0, rng=random.Random(seed))
    victim = impl(CABLE, 0.0, rng=random.Random(seed + 1))

    def victim_out(now):
        for ev in victim.events():
            if isinstance(ev, Received):
                victim.release(ev.vc, len(ev.recs))
        return victim.handle_timer(now) + victim.datagrams(now)

    now = bring_up(attacker, victim.receive, victim_out)
    assert attacker.up and victim.up
    for _ in range(data.draw(st.integers(1, 3))):
        before = drops(victim.counters)
        dgrams, certain = attack(data.draw, attacker, victim, [S_ULA, C.ULA_BROADCAST], now)
        for d in dgrams:
            victim.receive(d, now)
        victim_out(now)
        if certain == "link":
            assert drops(victim.counters) > before, (certain, dict(victim.counters))
        now += 0.01
    victim_out(now + 5.0)  # timers, including link-down after silence


@SETTINGS
@given(st.data(), st.integers(0, 1000))
def test_gsnd_core_survives_structured_mutations(data, seed):
    attacker = Link(CABLE, 0.0, rng=random.Random(seed))
    ep = Endpoint(CABLE, 0.0, ula=bytes.fromhex("020000000001"), rng=random.Random(seed + 1))

    def receive(d, now):
        ep.link.receive(d, now)
        ep.process(now)

    def ep_out(now):
        out = ep.handle_timer(now) + ep.link.datagrams(now)
        ep.events()
        return out

    now = bring_up(attacker, receive, ep_out)
    assert attacker.up and ep.link.up
    for _ in range(data.draw(st.integers(1, 3))):
        counters = (ep.link.counters, ep.reasm.counters, ep.counters)
        before = drops(*counters)
        dgrams, certain = attack(data.draw, attacker, ep.link, [ep.configured_ula, C.ULA_BROADCAST, S_ULA], now)
        for d in dgrams:
            receive(d, now)
        ep_out(now)
        if certain:
            assert drops(*counters) > before, (certain, [dict(c) for c in counters])
        now += 0.01
    ep_out(now + 5.0)


@SETTINGS
@given(st.data(), st.integers(0, 1000))
def test_switch_core_survives_structured_mutations(data, seed):
    # S_ULA is the attacker's port's, so its Messages pass source validation and reach forwarding
    sw = Switch(7, [1, 2], 0.0, rng=random.Random(seed), cable_ids={1: CABLE, 2: 2}, static={S_ULA: 1})
    attacker = Link(CABLE, 0.0, rng=random.Random(seed + 1))
    other = Link(2, 0.0, rng=random.Random(seed + 2))  # a well-behaved neighbour on port 2

    def receive(port, link):
        def rx(d, now):
            sw.ports[port].link.receive(d, now)
            sw.process(port, now)
        return rx

    def sw_out(port):
        def out(now):
            return sw.ports[port].link.handle_timer(now) + sw.ports[port].link.datagrams(now)
        return out

    def flush(now):
        for d in sw_out(2)(now):
            other.receive(d, now)
        for d in other.handle_timer(now) + other.datagrams(now):
            receive(2, other)(d, now)
        for ev in other.events():
            if isinstance(ev, Received):
                other.release(ev.vc, len(ev.recs))
        return sw_out(1)(now)

    now = bring_up(other, receive(2, other), sw_out(2))
    now = bring_up(attacker, receive(1, attacker), flush, now)
    assert attacker.up and sw.ports[1].link.up and sw.ports[2].link.up
    targets = [C.ULA_BROADCAST, C.ULA_NONE, sw.ula, *sw.table]
    for _ in range(data.draw(st.integers(1, 3))):
        port = sw.ports[1]
        before = drops(port.link.counters, port.counters)
        dgrams, certain = attack(data.draw, attacker, port.link, targets, now)
        for d in dgrams:
            receive(1, attacker)(d, now)
        for d in flush(now):
            attacker.receive(d, now)
        attacker.events()
        if certain == "link":
            assert drops(port.link.counters, port.counters) > before, (certain, dict(port.link.counters))
        now += 0.01
    flush(now + 5.0)
