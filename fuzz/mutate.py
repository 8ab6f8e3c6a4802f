"""Byte-level mutations of a structure-built frame, with a hook to re-stamp checksums."""

from __future__ import annotations

from .draw import Draw

INTERESTING = [0x00, 0x01, 0x02, 0x03, 0x04, 0x06, 0x07, 0x08, 0x0A, 0x10, 0x20, 0x3F, 0x40, 0x7F, 0x80,
               0xC0, 0xE0, 0xFE, 0xFF]


def mutate_bytes(d: Draw, raw: bytes, rounds: int | None = None, offsets=None) -> bytes:
    """Up to a few edits; ``offsets`` are the field positions worth hitting."""
    buf = bytearray(raw)
    for _ in range(d.below(4) if rounds is None else rounds):
        op = d.below(8)
        if op == 7 or not buf:  # extend
            buf += d.blob(24)
            continue
        if offsets and d.bool():
            i = d.choice(offsets) % len(buf)
        else:
            i = d.below(len(buf))
        if op == 0:
            buf[i] = d.choice(INTERESTING)
        elif op == 1:
            buf[i] ^= 1 << d.below(8)
        elif op == 2:
            buf[i] = d.int(1)
        elif op == 3:  # a 16-bit field
            v = d.choice([0, 1, 0x7FFF, 0x8000, 0xFFFF, len(buf), len(buf) + 1]) if d.bool() else d.int(2)
            buf[i : i + 2] = (v & 0xFFFF).to_bytes(2, "big")
        elif op == 4:  # a 32-bit field
            buf[i : i + 4] = d.int(4).to_bytes(4, "big")
        elif op == 5:  # truncate
            del buf[d.below(len(buf) + 1) :]
        else:  # insert / delete a few bytes
            if d.bool():
                buf[i:i] = d.blob(8)
            else:
                del buf[i : i + 1 + d.below(8)]
    return bytes(buf)
