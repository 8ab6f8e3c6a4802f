"""The C reassembly (daemons/_reasm.h, through ``_link.reassemble``) against its oracle
:class:`daemons.link.reassembly.Reassembler`: the same batches give the same Messages,
ADMIN micropackets and counters.  Shared by the differential test and the fuzz target."""

from __future__ import annotations

import numpy as np

from daemons import _link
from daemons.link.reassembly import AdminIn, Delivered, Reassembler
from daemons.wire.message import decode_stream
from daemons.wire.micropacket import MP_DTYPE


def oracle(batches, max_payload=None):
    r = Reassembler(max_payload)
    out = []
    for b in batches:
        if b is None:
            r.reset()
            continue
        vc, mps = b
        for o in r.feed(vc, np.frombuffer(mps, MP_DTYPE)):
            if isinstance(o, Delivered):
                out.append(("message", o.message, o.mps))
            else:
                assert isinstance(o, AdminIn)
                out.append(("admin", o.vc, o.data))
    return out, {k: v for k, v in r.counters.items() if v}


def compiled(batches, max_payload=None):
    outs, counters = _link.reassemble(-1 if max_payload is None else max_payload, batches)
    out = []
    for o in outs:
        if o[0] == "message":
            _, vc, stream, mps = o
            assert len(stream) == 32 * mps
            out.append(("message", decode_stream(vc, stream, mps), mps))
        else:
            out.append(o)
    return out, counters


def check(batches, max_payload=None):
    want = oracle(batches, max_payload)
    got = compiled(batches, max_payload)
    assert got[0] == want[0]
    assert got[1] == want[1]
    return want
