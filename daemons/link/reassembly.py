"""Per-VC Message reassembly at the final destination (spec §3.2).

A HEADER opens a Message, DATA appends, TAIL closes.  A HEADER (or ADMIN) while a
Message is open, or DATA with none open, is a protocol error: the open Message and
the stray micropacket are discarded.  Messages with ERROR set, a failed ECRC, more
DATA than the VC allows, or a bad header are discarded and counted.  The walk is
per Message; fields are examined per batch with numpy; ECRC is checked exactly, per
micropacket, and the data de-interleaved into the Message buffer by daemons._fastpath.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field as dc_field
from typing import TypeAlias

import numpy as np

from .. import _fastpath
from ..constants import (
    CRC_INIT,
    CTRL_ECRC_SHIFT,
    CTRL_ERROR_SHIFT,
    CTRL_TAIL_SHIFT,
    CTRL_TYPE_SHIFT,
    LLC_SNAP_BYTES,
    MP_DATA_BYTES,
    NUM_VCS,
    MpType,
)
from ..wire.errors import DecodeError
from ..wire.message import Message, MessageHeader, decode_stream, max_m_len, mps_for
from ..wire.micropacket import field

_U64 = np.uint64


@dataclass(frozen=True)
class Delivered:
    message: Message
    mps: int


@dataclass(frozen=True)
class AdminIn:
    vc: int
    data: bytes


Arrival: TypeAlias = Delivered | AdminIn
"""What :meth:`Reassembler.feed` hands up."""


@dataclass
class _Open:
    parts: list[np.ndarray] = dc_field(default_factory=list)
    count: int = 0
    last_ecrc: int = CRC_INIT
    expect: int = 0  # micropackets M_len announces
    bad: str | None = None


class Reassembler:
    def __init__(self, max_payload: int | None = None) -> None:
        """``max_payload``: largest Message payload (bytes after LLC/SNAP) to deliver;
        M_len counts the LLC/SNAP header too."""
        self.max_payload = max_payload
        self.open: list[_Open | None] = [None] * NUM_VCS
        self.counters: Counter[str] = Counter()

    def reset(self) -> None:
        for vc in range(NUM_VCS):
            if self.open[vc] is not None:
                self.counters["aborted_on_reset"] += 1
                self.open[vc] = None

    def _discard(self, reason: str) -> None:
        self.counters[f"discard_{reason}"] += 1

    def feed(self, vc: int, recs: np.ndarray) -> list[Arrival]:
        out: list[Arrival] = []
        ctrl = recs["ctrl"].astype(_U64)
        types = field(ctrl, CTRL_TYPE_SHIFT, 4)
        tails = np.flatnonzero(field(ctrl, CTRL_TAIL_SHIFT, 1))
        starts = np.flatnonzero((types == _U64(MpType.HEADER)) | (types == _U64(MpType.ADMIN)))
        n = len(recs)
        pos = 0
        while pos < n:
            st = self.open[vc]
            first = pos
            if st is None:
                kind = int(types[pos])
                if kind == MpType.ADMIN:
                    self._admin(vc, recs[pos], ctrl[pos], out)
                    pos += 1
                    continue
                if kind != MpType.HEADER:
                    nxt = starts[np.searchsorted(starts, pos)] if np.searchsorted(starts, pos) < len(starts) else n
                    self.counters["stray_data_mps"] += int(nxt - pos)
                    pos = int(nxt)
                    continue
                st = self.open[vc] = self._start(vc, recs[pos]["data"].tobytes())
                first = pos + 1
            i = np.searchsorted(tails, pos)
            end = int(tails[i]) + 1 if i < len(tails) else n
            j = np.searchsorted(starts, first)
            if j < len(starts) and starts[j] < end:
                bad = int(starts[j])
                self._discard("header_in_open_message")
                self.open[vc] = None
                pos = bad + 1
                continue
            self._append(vc, st, recs[pos:end], ctrl[pos:end])
            pos = end
            if i < len(tails):
                self.open[vc] = None
                self._finish(vc, st, out)
        return out

    def _start(self, vc: int, header: bytes) -> _Open:
        st = _Open()
        try:
            hdr = MessageHeader.decode(header)
            st.expect = mps_for(hdr.m_len)
            if hdr.m_len > max_m_len(vc):  # more DATA micropackets than the VC allows
                st.bad = "vc_limit"
            elif self.max_payload is not None and hdr.m_len - LLC_SNAP_BYTES > self.max_payload:
                st.bad = "too_large"
        except DecodeError as exc:
            st.bad = f"header_{exc.field}"
        return st

    def _append(self, vc: int, st: _Open, recs: np.ndarray, ctrl: np.ndarray) -> None:
        st.count += len(recs)
        if st.bad:
            return
        if st.count > st.expect:
            st.bad = "longer_than_m_len"
            return
        if field(ctrl, CTRL_ERROR_SHIFT, 1).any():
            st.bad = "error_bit"
            return
        if _fastpath.ecrc_check(recs, st.last_ecrc) >= 0:
            st.bad = "ecrc"
            return
        st.last_ecrc = int(field(int(ctrl[-1]), CTRL_ECRC_SHIFT, 16))
        st.parts.append(recs)

    def _finish(self, vc: int, st: _Open, out: list[Arrival]) -> None:
        if st.bad is None and st.count != st.expect:
            st.bad = "shorter_than_m_len"
        if st.bad:
            self._discard(st.bad)
            return
        stream = bytearray(st.count * MP_DATA_BYTES)
        offset = 0
        for part in st.parts:
            offset += _fastpath.deinterleave(part, stream, offset)
        try:
            out.append(Delivered(decode_stream(vc, stream, st.count), st.count))
        except DecodeError as exc:  # pragma: no cover - _start checked the header
            self._discard(f"header_{exc.field}")

    def _admin(self, vc: int, rec: np.void, ctrl: int | np.uint64, out: list[Arrival]) -> None:
        defect = admin_defect(rec, ctrl)
        if defect:
            self._discard(defect)
            return
        out.append(AdminIn(vc, rec["data"].tobytes()))


def admin_defect(rec: np.void, ctrl: int | np.uint64) -> str | None:
    """Why an ADMIN micropacket (a one-micropacket Message) must be discarded by its
    final destination, or None: no TAIL, ERROR set, or a failed ECRC (spec §1.6)."""
    ctrl = int(ctrl)
    if not field(ctrl, CTRL_TAIL_SHIFT, 1):
        return "admin_without_tail"
    if field(ctrl, CTRL_ERROR_SHIFT, 1):
        return "error_bit"
    if _fastpath.crc16(rec["data"].tobytes()) != field(ctrl, CTRL_ECRC_SHIFT, 16):
        return "ecrc"
    return None
