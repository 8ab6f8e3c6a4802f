"""Turn a fuzzer's bytes into choices.

Every target reads its input through a :class:`Draw`: small integers pick a frame
kind, a field to mutate and its new value; what is left over is raw payload.  Past
the end of the input every draw returns 0 / empty, so any byte string is a valid
input and a shorter one is a simpler one (which is what the minimiser relies on).
"""

from __future__ import annotations


class Draw:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = bytes(data), 0

    def take(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + max(0, n)]
        self.pos += len(out)
        return out

    def int(self, nbytes: int = 1) -> int:
        return int.from_bytes(self.take(nbytes).ljust(nbytes, b"\0"), "big")

    def below(self, n: int) -> int:
        """0 <= x < n (n >= 1), one or more bytes as needed."""
        nbytes = max(1, (max(n - 1, 1).bit_length() + 7) // 8)
        return self.int(nbytes) % n

    def bool(self) -> bool:
        return bool(self.int(1) & 1)

    def choice(self, seq):
        return seq[self.below(len(seq))]

    def bits(self, width: int) -> int:
        return self.int((width + 7) // 8) & ((1 << width) - 1)

    def near(self, old: int, width: int) -> int:
        """A value of a ``width``-bit field: often close to ``old``, sometimes anything."""
        how = self.below(4)
        if how == 0:
            return self.bits(width)
        delta = self.int(1) - 128 or 1
        return (old + delta) % (1 << width)

    def blob(self, max_len: int) -> bytes:
        return self.take(self.below(max_len + 1))

    def rest(self) -> bytes:
        return self.take(len(self.data) - self.pos)

    @property
    def left(self) -> int:
        return len(self.data) - self.pos
