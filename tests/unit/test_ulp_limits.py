"""The ULP payload limit agrees end to end: what gsnd's ULP socket accepts
(ULP_MAX_PAYLOAD bytes after LLC/SNAP) the receiving gsnd reassembles and delivers;
one byte more is refused at the sender (test_ulp_server) and never reaches a wire."""

from __future__ import annotations

import random

import pytest

from daemons import constants as C
from daemons.endpoint.core import Endpoint, MessageIn
from daemons.link.reassembly import Delivered, Reassembler
from daemons.wire.message import encode_stream, stream_records

A, B = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")


def records(payload: bytes):
    return stream_records(3, encode_stream(3, B, A, 0x88B5, payload))


@pytest.mark.parametrize("extra", [0, 1])
def test_reassembly_limit_is_the_ulp_payload_limit(extra):
    payload = random.Random(1).randbytes(C.ULP_MAX_PAYLOAD + extra)
    r = Reassembler(C.ULP_MAX_PAYLOAD)
    out = r.feed(3, records(payload))
    if extra:
        assert out == [] and r.counters["discard_too_large"] == 1
    else:
        assert [o.message.payload for o in out if isinstance(o, Delivered)] == [payload]


def test_a_limit_sized_message_crosses_a_link_between_two_endpoints():
    """Two gsnd cores back to back, stepped by hand: 4 MiB on VC3 arrives whole."""
    now = 0.0
    eps = [Endpoint(5, now, ula=A, rng=random.Random(1), max_payload=C.ULP_MAX_PAYLOAD),
           Endpoint(5, now, ula=B, rng=random.Random(2), max_payload=C.ULP_MAX_PAYLOAD)]
    got = []

    def step():
        nonlocal now
        now += 0.001
        for i, ep in enumerate(eps):
            for d in ep.handle_timer(now) + ep.link.datagrams(now):
                eps[1 - i].link.receive(d, now)
        for i, ep in enumerate(eps):
            ep.process(now)
            got.extend((i, ev.message) for ev in ep.events() if isinstance(ev, MessageIn))

    for _ in range(200):
        step()
        if all(ep.ula for ep in eps):
            break
    payload = random.Random(2).randbytes(C.ULP_MAX_PAYLOAD)
    assert eps[0].send(3, B, 0x88B5, payload)
    for _ in range(3000):
        step()
        if got:
            break
    assert [(i, m.payload == payload, m.s_ula) for i, m in got] == [(1, True, A)], eps[1].reasm.counters
