"""The sequenced datagram's per-micropacket checks (TYPE, TSEQ, RSEQ) and the shim's
ack, CLink against Link, on datagrams whose fields were changed with the LCRC made
right again, so the checks after the LCRC's are the ones that decide (CLink does the
three in one pass and must give the same reason, counters and state as Link)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from daemons import _fastpath as F, _link
from daemons.link.clink import CLink
from daemons.link.link import Link
from daemons.wire.message import Message
from tests.fuzz.link_target import A, B, _obs, _pair

SHIM, MP = 32, 40

edits = st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(["type", "tseq", "rseq"]), st.integers(0, 255)),
                 max_size=3)


def rewrite(d: bytes, mp_edits, ack) -> bytes:
    out = bytearray(d)
    n = (len(out) - SHIM) // MP
    for where, field, value in mp_edits:
        at = SHIM + (where % n) * MP
        (ctrl,) = struct.unpack_from("!Q", out, at + 32)
        shift, mask = {"type": (58, 0xF), "tseq": (32, 0xFF), "rseq": (40, 0xFF), "vc": (62, 0x3),
                       "vcr": (54, 0x3), "cr": (48, 0x3F)}[field]
        ctrl = (ctrl & ~(mask << shift)) | ((value & mask) << shift)
        struct.pack_into("!Q", out, at + 32, ctrl)
        struct.pack_into("!H", out, at + 38, F.crc16(bytes(out[at:at + 38])))  # the LCRC made right
    if ack is not None:
        struct.pack_into("!Q", out, 24, ack)
    return bytes(out)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(sizes=st.lists(st.integers(1, 3000), min_size=1, max_size=3), mp_edits=edits,
       ack=st.one_of(st.none(), st.integers(0, 40), st.just(2**64 - 1)), pick=st.integers(0, 100))
def test_rewritten_fields_are_judged_alike(sizes, mp_edits, ack, pick):
    judged_alike(sizes, mp_edits, ack, pick)


def judged_alike(sizes, mp_edits, ack, pick, fill: bytes = b"\0") -> None:
    """Messages of ``sizes`` (payload: ``fill`` repeated) sent by Link and by CLink (the
    same datagrams), one of them rewritten, then received by each: both receivers
    observe the same."""
    sides = [_pair(Link), _pair(CLink)]
    now = sides[0][2] + 0.001
    sent = []
    for a, _b, _ in sides:
        for n in sizes:
            a.enqueue(1, Message(1, A, B, 0x88B5, (fill * n)[:n]).records())
        sent.append([bytes(d) for d in a.handle_timer(now) + a.datagrams(now)])
    assert sent[0] == sent[1] and sent[0]
    d = rewrite(sent[0][pick % len(sent[0])], mp_edits, ack)
    for _a, b, _ in sides:
        b.receive(d, now)
    assert _obs(sides[0][1], now) == _obs(sides[1][1], now)


# VC, TYPE and the credit fields changed anywhere in a long datagram: CLink takes the
# control words eight at a time and one group of one VC without credits or CREDIT
# micropackets as one run (receive_sequenced); any other group goes one by one
VC_EDITS = [("type", 4), ("type", 0), ("type", 2), ("vc", 0), ("vc", 2), ("vc", 3), ("vcr", 2), ("cr", 5), ("cr", 63)]
vc_edits = st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(VC_EDITS)).map(lambda t: (t[0], *t[1])),
                    min_size=1, max_size=6)


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(sizes=st.lists(st.integers(200, 3000), min_size=1, max_size=3), mp_edits=vc_edits, pick=st.integers(0, 100))
@example(sizes=[2000], mp_edits=[(20, "type", 4)], pick=0)  # a CREDIT micropacket inside a group of eight
@example(sizes=[2000], mp_edits=[(20, "vc", 2)], pick=0)
@example(sizes=[2000], mp_edits=[(20, "cr", 5)], pick=0)
def test_vc_type_and_credit_edits_in_long_datagrams_are_judged_alike(sizes, mp_edits, pick):
    judged_alike(sizes, mp_edits, None, pick)


# receive_sequenced takes a datagram's control words eight at a time in one AVX-512 pass
# where the CPU has it (crc_impl "vpclmul"; ctrl_scan_avx512), else the scalar loop: both
# against Link.  A payload whose every 8 bytes look like a VC 1 DATA control word (TSEQ and
# RSEQ 0) makes a pass that read a data word instead of a control word see one clean run
# (and then a TSEQ that Link does not see), where zero payloads made it fall back unseen.
_DEFAULT = _link.crc_impl()
IMPLS = ["tables"] + [i for i in ("clmul", "vpclmul") if _link.crc_impl(i) == i]
_link.crc_impl(_DEFAULT)
LOOKALIKE = struct.pack("!Q", (1 << 62) | (1 << 58))  # VC 1, TYPE DATA


@pytest.fixture(params=IMPLS)
def crc_impl(request):
    before = _link.crc_impl()
    assert _link.crc_impl(request.param) == request.param
    yield request.param
    _link.crc_impl(before)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(sizes=st.lists(st.integers(200, 3000), min_size=1, max_size=3),
       mp_edits=st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(["tseq", "rseq", "type"]),
                                   st.integers(0, 255)), max_size=2),
       pick=st.integers(0, 100), lookalike=st.booleans())
@example(sizes=[2000], mp_edits=[], pick=0, lookalike=True)
@example(sizes=[2000], mp_edits=[(13, "tseq", 7)], pick=0, lookalike=True)  # micropacket 5 of its group
def test_each_scan_of_the_control_words_is_judged_alike(crc_impl, sizes, mp_edits, pick, lookalike):
    judged_alike(sizes, mp_edits, None, pick, LOOKALIKE if lookalike else b"\0")
