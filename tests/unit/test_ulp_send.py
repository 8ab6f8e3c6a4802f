"""A Message queued from its fields (``enqueue_message``: gsnd's ULP SENDs) is encoded in
C by CLink (daemons/_ulpsend.h) and must put on the wire exactly what the oracle puts
there: Link.enqueue_message, and CLink fed the numpy-free-of-C path's micropackets
(stream_records(encode_stream(...))).  Same datagrams byte for byte, same counters."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from daemons.endpoint.core import Endpoint
from daemons.link.clink import CLink
from daemons.link.link import Link
from daemons.wire.message import encode_stream, max_payload, stream_records_numpy

ULAS = st.binary(min_size=6, max_size=6)


def _link(impl):
    link = impl(9, 0.0, rng=random.Random(7))
    link._go_up(1, 0.0)
    return link


def _wire(link, now=0.0):
    out = []
    for _ in range(50):
        ds = link.datagrams(now)
        if not ds:
            break
        out += ds
    return [bytes(d) for d in out]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), ULAS, ULAS, st.integers(0, 0xFFFF),
                          st.one_of(st.binary(max_size=200), st.integers(0, 9000).map(lambda n: bytes(range(256)) * (n // 256)))),
                min_size=1, max_size=6))
def test_enqueue_message_matches_the_oracles(messages):
    oracle, compiled, fed = _link(Link), _link(CLink), _link(CLink)
    for vc, d, s, et, payload in messages:
        payload = payload[:max_payload(vc)]
        n = oracle.enqueue_message(vc, d, s, et, payload)
        assert compiled.enqueue_message(vc, d, s, et, memoryview(payload)) == n
        recs = stream_records_numpy(vc, encode_stream(vc, d, s, et, payload))
        assert len(recs) == n
        fed.enqueue(vc, recs)
    for vc in range(4):
        assert compiled.queued(vc) == oracle.queued(vc) == fed.queued(vc)
    wire = _wire(oracle)
    assert wire and _wire(compiled) == wire == _wire(fed)
    assert +compiled.counters == +oracle.counters


@pytest.mark.parametrize("vc", range(4))
def test_the_largest_payload_and_one_more(vc):
    size = min(max_payload(vc), 300_000)  # VC3's limit is the 32-bit M_len: a large one stands for it
    a, b = _link(CLink), _link(Link)
    assert a.enqueue_message(vc, b"\x01" * 6, b"\x02" * 6, 0x88B5, bytes(size)) == \
        b.enqueue_message(vc, b"\x01" * 6, b"\x02" * 6, 0x88B5, bytes(size))
    if vc < 3:
        for link in (a, b):
            with pytest.raises(ValueError, match=f"exceeds the VC{vc} limit of {max_payload(vc)}"):
                link.enqueue_message(vc, b"\x01" * 6, b"\x02" * 6, 0x88B5, bytes(max_payload(vc) + 1))
    assert a.queued(vc) == b.queued(vc)


@pytest.mark.parametrize("args, error", [
    ((4, b"\x01" * 6, b"\x02" * 6, 1, b""), IndexError),
    ((-1, b"\x01" * 6, b"\x02" * 6, 1, b""), IndexError),
    ((1, b"\x01" * 5, b"\x02" * 6, 1, b""), ValueError),
    ((1, b"\x01" * 6, b"\x02" * 7, 1, b""), ValueError),
    ((1, b"\x01" * 6, b"\x02" * 6, 0x10000, b""), ValueError),
    ((1, b"\x01" * 6, b"\x02" * 6, -1, b""), ValueError),
    ((1, b"\x01" * 6, b"\x02" * 6, 1, "text"), TypeError),
    ((1, b"\x01" * 6, b"\x02" * 6, 1), TypeError),
])
def test_bad_arguments_raise_and_queue_nothing(args, error):
    link = _link(CLink)
    with pytest.raises(error):
        link.enqueue_message(*args)
    assert sum(link.queued(vc) for vc in range(4)) == 0


def test_gsnd_endpoint_sends_through_the_compiled_encode():
    """Endpoint.send (gsnd's ULP SEND) queues what the oracle encodes."""
    ep = Endpoint(9, 0.0, rng=random.Random(7))
    ep.link._go_up(1, 0.0)
    ep.ula = b"\x02" * 6
    ref = _link(Link)
    for vc, size in ((1, 65536), (3, 100), (0, 2000)):
        assert ep.send(vc, b"\x05" * 6, 0x88B5, bytes(range(256)) * (size // 256) + bytes(size % 256))
        ref.enqueue_message(vc, b"\x05" * 6, b"\x02" * 6, 0x88B5, bytes(range(256)) * (size // 256) + bytes(size % 256))
    assert [ep.link.queued(vc) for vc in range(4)] == [ref.queued(vc) for vc in range(4)]
    assert ep.counters["tx_messages"] == 3
