"""numpy/Python oracles of the daemons._fastpath kernels that have no public twin."""

from __future__ import annotations

import numpy as np

from daemons import constants as C
from daemons.wire.crc import block_crc0, running_crc
from daemons.wire.micropacket import restamp

_U64 = np.uint64


def oracle_stamp(recs: np.ndarray, rseq: int, tseq: int, grants) -> None:
    """link._stamp (tseq >= 0) / _stamp_rseq (tseq == -1) as they were in numpy."""
    n = len(recs)
    ctrl = recs["ctrl"].astype(_U64)
    if tseq < 0:
        ctrl &= ~(_U64(0xFF) << _U64(C.CTRL_RSEQ_SHIFT))
        ctrl |= _U64(rseq) << _U64(C.CTRL_RSEQ_SHIFT)
    else:
        ctrl &= ~_U64(((1 << 24) - 1) << C.CTRL_TSEQ_SHIFT)
        ctrl |= _U64(rseq) << _U64(C.CTRL_RSEQ_SHIFT)
        ctrl |= ((np.arange(n, dtype=_U64) + _U64(tseq)) & _U64(0xFF)) << _U64(C.CTRL_TSEQ_SHIFT)
        if len(grants):
            g = np.array(grants, dtype=_U64).reshape(-1, 2)
            ctrl[: len(g)] |= (g[:, 0] << _U64(C.CTRL_VCR_SHIFT)) | (g[:, 1] << _U64(C.CTRL_CR_SHIFT))
    restamp(recs, ctrl)


def oracle_ecrc_first_bad(recs: np.ndarray, init: int = C.CRC_INIT) -> int:
    """Exact per-micropacket ECRC check with the numpy prefix scan: first bad index or -1."""
    if len(recs) == 0:
        return -1
    data = np.ascontiguousarray(recs["data"])
    want = running_crc(block_crc0(data), init)
    got = ((recs["ctrl"].astype(_U64) >> _U64(16)) & _U64(0xFFFF)).astype(np.uint16)
    bad = np.flatnonzero(want != got)
    return int(bad[0]) if len(bad) else -1
