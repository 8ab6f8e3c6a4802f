"""Micropacket codec: 32 data bytes followed by the 64-bit control word.

Two views of the same format:

* :class:`Micropacket` — one micropacket as a frozen dataclass, for control
  paths, tests and tools;
* the bulk view — a numpy structured array of :data:`MP_DTYPE` (40 bytes a
  record, exactly the wire layout), used on the hot path so that fields are
  read, written and checked for a whole batch with a few numpy operations.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import overload

import numpy as np

from ..constants import (
    CRC_INIT,
    CTRL_CR_SHIFT,
    CTRL_ECRC_SHIFT,
    CTRL_ERROR_SHIFT,
    CTRL_RSEQ_SHIFT,
    CTRL_TAIL_SHIFT,
    CTRL_TSEQ_SHIFT,
    CTRL_TYPE_SHIFT,
    CTRL_VC_SHIFT,
    CTRL_VCR_SHIFT,
    CR_MAX,
    MP_BYTES,
    MP_DATA_BYTES,
    MpType,
)
from .crc import block_crc0, crc16, position_tables, shift_table
from .errors import DecodeError

MP_DTYPE = np.dtype([("data", "u1", (MP_DATA_BYTES,)), ("ctrl", ">u8")])
assert MP_DTYPE.itemsize == MP_BYTES

# (name, shift, width) of every control field, in wire order.
CTRL_FIELDS = (
    ("vc", CTRL_VC_SHIFT, 2),
    ("type", CTRL_TYPE_SHIFT, 4),
    ("tail", CTRL_TAIL_SHIFT, 1),
    ("error", CTRL_ERROR_SHIFT, 1),
    ("vcr", CTRL_VCR_SHIFT, 2),
    ("cr", CTRL_CR_SHIFT, 6),
    ("rseq", CTRL_RSEQ_SHIFT, 8),
    ("tseq", CTRL_TSEQ_SHIFT, 8),
    ("ecrc", CTRL_ECRC_SHIFT, 16),
)
_U64 = np.uint64


def pack_ctrl(*, vc: int = 0, type: int = 0, tail: int = 0, error: int = 0, vcr: int = 0, cr: int = 0, rseq: int = 0,
              tseq: int = 0, ecrc: int = 0) -> int:
    """Control word without LCRC (the low 16 bits are zero)."""
    values = dict(vc=vc, type=type, tail=tail, error=error, vcr=vcr, cr=cr, rseq=rseq, tseq=tseq, ecrc=ecrc)
    word = 0
    for name, shift, width in CTRL_FIELDS:
        v = int(values[name])
        if not 0 <= v < (1 << width):
            raise ValueError(f"{name}={v} does not fit in {width} bits")
        word |= v << shift
    return word


@overload
def field(ctrl: int, shift: int, width: int) -> int: ...
@overload
def field(ctrl: np.ndarray, shift: int, width: int) -> np.ndarray: ...
def field(ctrl: int | np.ndarray, shift: int, width: int) -> int | np.ndarray:
    """Extract a control field from a scalar or a uint64 array."""
    if isinstance(ctrl, np.ndarray):
        return (ctrl >> _U64(shift)) & _U64((1 << width) - 1)
    return (ctrl >> shift) & ((1 << width) - 1)


def lcrc_scalar(data: bytes, ctrl: int) -> int:
    """LCRC over the 32 data bytes and the first 48 control bits."""
    return crc16(data + ctrl.to_bytes(8, "big")[:6])


@cache
def _c6_tables() -> np.ndarray:
    """Zero-init CRC contribution of each big-endian 16-bit word of the 6 control bytes."""
    t8 = position_tables(6)
    v = np.arange(65536)
    return np.stack([t8[2 * p][v >> 8] ^ t8[2 * p + 1][v & 0xFF] for p in range(3)])


def ctrl_crc0(ctrl: np.ndarray) -> np.ndarray:
    """Zero-init CRC of the first 6 bytes of each (native uint64) control word."""
    t = _c6_tables()
    c = ctrl >> _U64(16)
    return np.asarray(t[0][(c >> _U64(32)).astype(np.intp) & 0xFFFF] ^ t[1][(c >> _U64(16)).astype(np.intp) & 0xFFFF]
                      ^ t[2][c.astype(np.intp) & 0xFFFF])


def lcrc_from_blocks(data_crc0: np.ndarray, ctrl: np.ndarray) -> np.ndarray:
    """LCRC for each micropacket from its data's zero-init CRC and its control word."""
    after_data = data_crc0 ^ np.uint16(shift_table(MP_DATA_BYTES)[CRC_INIT])
    return np.asarray(shift_table(6)[after_data] ^ ctrl_crc0(ctrl))


def restamp(recs: np.ndarray, new_ctrl: np.ndarray) -> None:
    """Write new control words (LCRC bits ignored) and fix LCRC by linearity.

    The data is unchanged, so ``LCRC' = LCRC ^ crc0(ctrl6 ^ ctrl6')``.
    """
    old = recs["ctrl"].astype(np.uint64)
    delta = (old ^ new_ctrl) & ~_U64(0xFFFF)
    lcrc = (old & _U64(0xFFFF)).astype(np.uint16) ^ ctrl_crc0(delta)
    recs["ctrl"] = (new_ctrl & ~_U64(0xFFFF)) | lcrc.astype(np.uint64)


@cache
def _k38() -> int:
    return int(shift_table(38)[CRC_INIT])


def lcrc_fold_ok(recs: np.ndarray) -> bool:
    """Check every LCRC of a batch with one fold (exact for any single bad micropacket).

    NOT a verification: errors in two micropackets can cancel (the same bit flipped
    in both passes).  Kept for tests; the link uses :func:`daemons._fastpath.lcrc_check`,
    which checks each micropacket on its own.
    """
    n = len(recs)
    if n == 0:
        return True
    words = recs.view(np.uint8).reshape(n, MP_BYTES).view("<u2")
    folded = np.bitwise_xor.reduce(words, axis=0).tobytes()
    expected = crc16(folded[:38], 0) ^ (_k38() if n & 1 else 0)
    return expected == int.from_bytes(folded[38:40], "big")


def lcrc_exact(recs: np.ndarray) -> np.ndarray:
    """Boolean array: which micropackets have a correct LCRC (slow path)."""
    n = len(recs)
    raw = recs.view(np.uint8).reshape(n, MP_BYTES)
    computed = block_crc0(raw[:, :38]) ^ np.uint16(_k38())
    return np.asarray(computed == (recs["ctrl"].astype(np.uint64) & _U64(0xFFFF)).astype(np.uint16))


@dataclass(frozen=True)
class Micropacket:
    """One micropacket.  ``lcrc`` is computed on encode and checked on decode."""

    data: bytes = bytes(MP_DATA_BYTES)
    vc: int = 0
    type: int = MpType.NULL
    tail: int = 0
    error: int = 0
    vcr: int = 0
    cr: int = 0
    rseq: int = 0
    tseq: int = 0
    ecrc: int = 0

    def ctrl(self) -> int:
        word = pack_ctrl(
            vc=self.vc, type=self.type, tail=self.tail, error=self.error, vcr=self.vcr,
            cr=self.cr, rseq=self.rseq, tseq=self.tseq, ecrc=self.ecrc,
        )
        return word | lcrc_scalar(self.data, word)

    def encode(self) -> bytes:
        if len(self.data) != MP_DATA_BYTES:
            raise ValueError(f"micropacket data must be {MP_DATA_BYTES} bytes, not {len(self.data)}")
        return bytes(self.data) + self.ctrl().to_bytes(8, "big")

    @classmethod
    def decode(cls, buf: bytes) -> Micropacket:
        if len(buf) != MP_BYTES:
            raise DecodeError("micropacket", min(len(buf), MP_BYTES), f"length {len(buf)}, expected {MP_BYTES}")
        data, ctrl = bytes(buf[:MP_DATA_BYTES]), int.from_bytes(buf[MP_DATA_BYTES:], "big")
        if lcrc_scalar(data, ctrl) != ctrl & 0xFFFF:
            raise DecodeError("LCRC", 38, "link CRC mismatch")
        values = {name: field(ctrl, shift, width) for name, shift, width in CTRL_FIELDS}
        try:
            values["type"] = MpType(values["type"])
        except ValueError:
            raise DecodeError("TYPE", 32, f"reserved micropacket type {values['type']:#x}") from None
        return cls(data=data, **values)


def to_records(mps: list[Micropacket]) -> np.ndarray:
    """Bulk form of a list of micropackets (tests and control paths)."""
    return np.frombuffer(b"".join(mp.encode() for mp in mps), MP_DTYPE).copy()


def from_records(recs: np.ndarray) -> list[Micropacket]:
    raw = recs.tobytes()
    return [Micropacket.decode(raw[i : i + MP_BYTES]) for i in range(0, len(raw), MP_BYTES)]


def credit_split(pending: int) -> list[int]:
    """Split a credit grant into CR values of at most CR_MAX."""
    full, rest = divmod(pending, CR_MAX)
    return [CR_MAX] * full + ([rest] if rest else [])
