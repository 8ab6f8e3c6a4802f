"""Fuzz target for the keyed cable's open in C (CompiledCableAuth, daemons/_cableauth.h),
differential against CableAuth (daemons/wire/cableauth.py).

The input is read as a sequence of datagrams for one receiver: raw bytes of any length,
or a datagram the genuine peer sealed (any session, any counter, so reordered, replayed,
restarted and too old ones) with a few bits flipped, or cut short.  After each, the C
open and the oracle must return the same body and count the same reason; the C one must
never raise.  ``one_input(data)`` is driven by atheris (fuzz_cableauth.py) and by
Hypothesis (test_fuzz_cableauth.py).
"""

from __future__ import annotations

from daemons import constants as C
from daemons.wire.cableauth import CableAuth, CompiledCableAuth
from tests.fuzz.fastpath_target import Reader

KEY = bytes(range(32))
T0 = 1 << 60


def one_input(data: bytes) -> None:
    r = Reader(data)
    window = 1 + r.int(2) % 200
    oracle, compiled = CableAuth(KEY, 1, T0, window=window), CompiledCableAuth(KEY, 1, T0, window=window)
    while r.pos < len(r.data):
        mode = r.int(1)
        if mode & 1:
            peer = CableAuth(KEY, 0, T0 - 8 + r.int(1) % 16)
            peer.counter = r.int(2)
            n_mps = 1 + r.int(1) % 8
            raw = bytearray(peer.seal(bytes(C.SHIM_BYTES) + r.take(n_mps * C.MP_BYTES).ljust(n_mps * C.MP_BYTES, b"\0")))
            for _ in range(mode >> 5):
                s = r.int(2)
                raw[(s >> 3) % len(raw)] ^= 1 << (s & 7)
            if mode & 2:
                del raw[r.int(2) % (len(raw) + 1):]
            d = bytes(raw)
        else:
            d = r.take(r.int(2) % 700)
        assert compiled.open(d) == oracle.open(d)
        assert compiled.counters == oracle.counters, (compiled.counters, oracle.counters)
