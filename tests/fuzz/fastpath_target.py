"""One fuzz target for every daemons._fastpath entry, differential where the input is
valid: the kernel must agree with its numpy/Python oracle; where it is not, it must
raise ValueError (or BufferError/TypeError for unusable buffers) and write nothing.

``one_input(data)`` is driven by atheris (fuzz_fastpath.py) and by Hypothesis
(test_fuzz_fastpath.py); it needs neither.
"""

from __future__ import annotations

import binascii

import numpy as np

from daemons import _fastpath as F
from daemons import constants as C
from daemons.wire.message import stream_records_numpy
from daemons.wire.micropacket import MP_DTYPE, lcrc_exact
from tests.unit.fastpath_oracle import oracle_ecrc_first_bad, oracle_stamp


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + n]
        self.pos += len(out)
        return out

    def int(self, nbytes: int) -> int:
        return int.from_bytes(self.take(nbytes).ljust(nbytes, b"\0"), "big")

    def rest(self) -> bytes:
        return self.take(len(self.data))


def _mps(r: Reader) -> bytearray:
    """Micropackets: raw bytes (maybe truncated), or a valid Message with a few bit flips."""
    mode = r.int(1)
    if mode & 1:
        vc, flips = r.int(1) % 4, r.int(1) % 4
        spots = [r.int(2) for _ in range(flips)]
        body = r.rest() or b"\0"
        raw = bytearray(stream_records_numpy(vc, body + bytes(-len(body) % 32)).tobytes())
        for s in spots:
            raw[(s >> 3) % len(raw)] ^= 1 << (s & 7)
        return raw
    blob = r.rest()
    if mode & 2:
        blob = blob[: len(blob) - len(blob) % C.MP_BYTES]
    return bytearray(blob)


def _rejects(call, before: bytes | None = None, buf=None) -> None:
    try:
        call()
    except (ValueError, BufferError, TypeError):
        if buf is not None:
            assert bytes(buf) == before, "kernel wrote into a buffer it rejected"
        return
    raise AssertionError("invalid input accepted")


def one_input(data: bytes) -> None:
    r = Reader(data)
    op = r.int(1) % 6
    if op == 0:  # lcrc_check
        ok_len = r.int(2) % 64
        use_ok = r.int(1) & 1
        raw = _mps(r)
        n, whole = len(raw) // C.MP_BYTES, len(raw) % C.MP_BYTES == 0
        ok = bytearray(ok_len) if use_ok else None
        if whole and (ok is None or ok_len >= n):
            want = lcrc_exact(np.frombuffer(bytes(raw), MP_DTYPE))
            assert F.lcrc_check(raw, ok) == int((~want).sum())
            if ok is not None:
                assert list(ok[:n]) == [int(x) for x in want]
        else:
            _rejects(lambda: F.lcrc_check(raw, ok))
    elif op == 1:  # ecrc_check
        init = r.int(2)
        raw = _mps(r)
        if len(raw) % C.MP_BYTES == 0:
            assert F.ecrc_check(raw, init) == oracle_ecrc_first_bad(np.frombuffer(bytes(raw), MP_DTYPE), init)
        else:
            _rejects(lambda: F.ecrc_check(raw, init))
    elif op == 2:  # stamp
        rseq, tseq = r.int(2) % 260, r.int(2) % 262 - 2
        grants = r.take(r.int(1) % 8)
        raw = _mps(r)
        n = len(raw) // C.MP_BYTES
        valid = (len(raw) % C.MP_BYTES == 0 and rseq < 256 and -1 <= tseq < 256 and len(grants) % 2 == 0
                 and (tseq >= 0 or not grants) and len(grants) // 2 <= n
                 and all(v < 4 for v in grants[0::2]) and all(c < 64 for c in grants[1::2]))
        if valid:
            want = np.frombuffer(bytes(raw), MP_DTYPE).copy()
            oracle_stamp(want, rseq, tseq, list(grants))
            F.stamp(raw, rseq, tseq, grants)
            assert bytes(raw) == want.tobytes()
        else:
            before = bytes(raw)
            _rejects(lambda: F.stamp(raw, rseq, tseq, grants), before, raw)
    elif op == 3:  # deinterleave
        offset, size = r.int(1) % 80 - 8, r.int(2) % 600
        raw = _mps(r)
        out = bytearray(size)
        n = len(raw) // C.MP_BYTES
        if len(raw) % C.MP_BYTES == 0 and 0 <= offset and offset + 32 * n <= size:
            assert F.deinterleave(raw, out, offset) == 32 * n
            assert bytes(out[offset : offset + 32 * n]) == np.frombuffer(bytes(raw), MP_DTYPE)["data"].tobytes()
        else:
            _rejects(lambda: F.deinterleave(raw, out, offset), bytes(size), out)
    elif op == 4:  # encode
        vc, first_type = r.int(1) % 6 - 1, r.int(1) % 18 - 1
        cut, slack = r.int(2), r.int(1) % 90 - 45
        body = r.rest()
        head, payload = body[: cut % (len(body) + 1)], body[cut % (len(body) + 1) :]
        n = -(-len(body) // 32)
        out = bytearray(max(0, n * C.MP_BYTES + slack))
        if n and 0 <= vc < 4 and 0 <= first_type < 16 and slack >= 0:
            assert F.encode(head, payload, out, vc, first_type) == n
            want = stream_records_numpy(vc, body + bytes(-len(body) % 32), first_type)
            assert bytes(out[: n * C.MP_BYTES]) == want.tobytes()
        else:
            _rejects(lambda: F.encode(head, payload, out, vc, first_type), bytes(len(out)), out)
    else:  # crc16
        init = r.int(3) % 0x10100
        blob = r.rest()
        if init <= 0xFFFF:
            assert F.crc16(blob, init) == binascii.crc_hqx(blob, init)
        else:
            _rejects(lambda: F.crc16(blob, init))
