"""CRC-16/IBM-3740 (poly 0x1021, init 0xFFFF, no reflection) for LCRC and ECRC.

Scalar CRCs use :func:`binascii.crc_hqx`, which is exactly this CRC.  The bulk
functions work on many micropackets at once with numpy and rely on linearity:
with a zero initial value the CRC is linear over GF(2), so

* the CRC of a fixed-length string is the XOR of per-position table entries
  (:func:`block_crc0` uses one 64 Ki-entry table per 16-bit word);
* ``crc(a XOR b) == crc(a) XOR crc(b)`` for strings of equal length, which lets a
  link re-stamp LCRC after changing a few control bytes, and verify a whole batch
  with one fold (:func:`ecrc_chain_ok`, tests only: errors can cancel).
"""

from __future__ import annotations

import binascii
from functools import cache

import numpy as np

from ..constants import CRC_INIT, MP_DATA_BYTES


def crc16(data: bytes, init: int = CRC_INIT) -> int:
    return binascii.crc_hqx(data, init)


def _crc0(data: bytes) -> int:
    return binascii.crc_hqx(data, 0)


@cache
def position_tables(length: int) -> np.ndarray:
    """``T[p, v]`` = zero-init CRC of a ``length``-byte string holding only byte v at p."""
    table = np.zeros((length, 256), np.uint16)
    for p in range(length):
        blk = bytearray(length)
        for v in range(256):
            blk[p] = v
            table[p, v] = _crc0(bytes(blk))
    return table


@cache
def word_tables(length: int) -> np.ndarray:
    """``W[p, v]`` for the little-endian 16-bit word v at word position p."""
    assert length % 2 == 0
    t8 = position_tables(length)
    v = np.arange(65536)
    return np.stack([t8[2 * p][v & 0xFF] ^ t8[2 * p + 1][v >> 8] for p in range(length // 2)])


@cache
def shift_table(nbytes: int, power: int = 1) -> np.ndarray:
    """Table of the linear map "feed ``nbytes`` zero bytes", applied ``power`` times."""
    assert nbytes >= 2
    t8 = position_tables(nbytes)
    # For this unreflected 16-bit CRC, starting from register x equals starting
    # from 0 with x XORed into the first two bytes: x advanced by n zero bytes
    # is crc0(hi, lo, n-2 zeros).
    v = np.arange(65536)
    once = t8[0][v >> 8] ^ t8[1][v & 0xFF]
    result = np.arange(65536, dtype=np.uint16)
    base = once
    p = power
    while p:
        if p & 1:
            result = base[result]
        base = base[base]
        p >>= 1
    return result.astype(np.uint16)


def block_crc0(blocks: np.ndarray) -> np.ndarray:
    """Zero-init CRC of each row of an (n, L) uint8 array (L even), vectorised."""
    n, length = blocks.shape
    tables = word_tables(length)
    words = np.ascontiguousarray(blocks).view("<u2")
    acc = tables[0][words[:, 0]]
    for p in range(1, length // 2):
        acc ^= tables[p][words[:, p]]
    return np.asarray(acc)


def running_crc(block_crcs: np.ndarray, init: int = CRC_INIT) -> np.ndarray:
    """Running CRC after each 32-byte block, given each block's zero-init CRC.

    ``R[k] = M(R[k-1]) ^ B[k]`` with ``R[-1] = init`` and M = "feed 32 zero bytes".
    Solved as a prefix scan with doubling (log2 n numpy steps, no Python loop per
    block).
    """
    r = block_crcs.astype(np.uint16, copy=True)
    if len(r) == 0:
        return r
    r[0] ^= shift_table(MP_DATA_BYTES)[init]
    step, power = 1, 1
    while step < len(r):
        r[step:] ^= shift_table(MP_DATA_BYTES, power)[r[:-step]]
        step *= 2
        power *= 2
    return r


def ecrc_chain_ok(data: np.ndarray, ecrcs: np.ndarray, init: int = CRC_INIT) -> bool:
    """Check a run of ECRC values against its (n, 32) data blocks with one fold.

    Each block's CRC is implied by consecutive ECRCs: ``B[k] = R[k] ^ M(R[k-1])``;
    by linearity the XOR of the implied values must equal the CRC of the XOR of
    the blocks.  A corrupt single block always fails; corrupt ECRC fields are
    caught by the LCRC, which covers them.  Errors in two blocks can cancel (the
    same bit flipped in both passes), so this is a test helper only; the
    destination uses the exact :func:`daemons._fastpath.ecrc_check`.
    """
    if len(ecrcs) == 0:
        return True
    m = shift_table(MP_DATA_BYTES)
    prev = np.empty_like(ecrcs)
    prev[0] = init
    prev[1:] = ecrcs[:-1]
    implied = np.bitwise_xor.reduce(ecrcs ^ m[prev])
    folded = np.bitwise_xor.reduce(data, axis=0)
    return int(implied) == _crc0(folded.tobytes())
