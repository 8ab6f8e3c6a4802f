"""Fuzz target for the link's receive check, lcrc_scan (daemons/_crcvec.h), driven
directly through _fastpath.lcrc_check with its ``ok`` and ``blocks`` outputs, under
every block CRC the CPU has (tables, clmul, vpclmul: the AVX-512 path takes four
micropackets at a time and leaves the rest to the scalar tail).

The input picks the CRC kernel, a batch of 0..200 micropackets (a real Message's, or
raw bytes) and what to do to it: single bit flips, the same bit flipped in two
micropackets (errors a whole-datagram fold cancels), flips confined to the control
word or to the LCRC itself.  Differential against the numpy oracles, micropacket by
micropacket: ok[i] is lcrc_exact's, blocks[i] is block_crc0 of the data, the count the
number of bad ones; on one micropacket those oracles are held to the definitions
(lcrc_scalar, crc_hqx).

``one_input(data)`` is driven by atheris (fuzz_lcrc.py), Hypothesis (test_fuzz_lcrc.py)
and ./gsn fuzz (target lcrc_scan).
"""

from __future__ import annotations

import binascii
import struct

import numpy as np

from daemons import _fastpath as F
from daemons.constants import MP_BYTES
from daemons.wire.crc import block_crc0
from daemons.wire.micropacket import MP_DTYPE, lcrc_exact, lcrc_scalar
from tests.fuzz.fastpath_target import Reader

_DEFAULT = F.crc_impl()
IMPLS = ["tables"] + [i for i in ("clmul", "vpclmul") if F.crc_impl(i) == i]
F.crc_impl(_DEFAULT)
MAX_MPS = 200  # more than three of lcrc_check's 64-micropacket chunks


def _batch(r: Reader) -> bytearray:
    n = r.int(1) % (MAX_MPS + 1)
    if r.int(1) % 4 == 0:  # raw bytes: mostly bad LCRCs
        return bytearray(r.take(n * MP_BYTES).ljust(n * MP_BYTES, b"\0"))
    if n == 0:
        return bytearray()
    fill = r.take(8) or b"\0"
    stream = (fill * (32 * n))[: 32 * n]
    out = bytearray(n * MP_BYTES)
    F.encode(stream[:24], stream[24:], out, r.int(1) % 4)  # a Message's (F.encode's own target: fastpath)
    return out


def _corrupt(r: Reader, raw: bytearray) -> None:
    n = len(raw) // MP_BYTES
    if not n:
        return
    for _ in range(r.int(1) % 5):
        how, i, bit = r.int(1) % 4, r.int(2) % n, r.int(2)
        if how == 0:  # anywhere in the micropacket
            raw[i * MP_BYTES + bit % MP_BYTES] ^= 1 << (bit >> 13)
        elif how == 1:  # the same bit in two micropackets: cancels in an XOR fold
            j = (i + 1 + r.int(2) % max(1, n - 1)) % n
            for k in {i, j}:
                raw[k * MP_BYTES + bit % MP_BYTES] ^= 1 << (bit >> 13)
        elif how == 2:  # the control word's first six bytes
            raw[i * MP_BYTES + 32 + bit % 6] ^= 1 << (bit >> 13)
        else:  # the LCRC itself
            raw[i * MP_BYTES + 38 + bit % 2] ^= 1 << (bit >> 13)


def one_input(data: bytes) -> None:
    r = Reader(data)
    impl = IMPLS[r.int(1) % len(IMPLS)]
    raw = _batch(r)
    _corrupt(r, raw)
    n = len(raw) // MP_BYTES
    ok, blocks = bytearray(n + 3), bytearray(2 * n + 3)  # slack: nothing beyond n may be written
    try:
        F.crc_impl(impl)
        bad = F.lcrc_check(raw, ok, blocks=blocks)
    finally:
        F.crc_impl(_DEFAULT)
    recs = np.frombuffer(bytes(raw), MP_DTYPE)
    want_ok = lcrc_exact(recs).astype(np.uint8)
    want_blocks = block_crc0(recs["data"]).astype(np.uint16)
    if n:  # the numpy oracles against the definitions, on one micropacket
        i = r.int(2) % n
        (ctrl,) = struct.unpack(">Q", raw[i * MP_BYTES + 32 : (i + 1) * MP_BYTES])
        data32 = bytes(raw[i * MP_BYTES : i * MP_BYTES + 32])
        assert want_ok[i] == (lcrc_scalar(data32, ctrl) == ctrl & 0xFFFF)
        assert want_blocks[i] == binascii.crc_hqx(data32, 0)
    assert bytes(ok[:n]) == want_ok.tobytes(), (impl, n)
    assert bytes(blocks[: 2 * n]) == want_blocks.tobytes(), (impl, n)
    assert bad == n - int(want_ok.sum())
    assert ok[n:] == bytes(3) and blocks[2 * n :] == bytes(3)
