"""Buffers backed by a file descriptor (a file, a memfd, shared memory) that stpd
reads and writes with pread/pwrite instead of mapping them.

A mapping of a file that someone truncates kills the process with SIGBUS on the
next access; pread/pwrite through the descriptor cannot: a short file is a short
read, which ``FileBuffer`` turns into ``BufferGone`` for the one transfer or region
that uses it.  Writes check the size first, so stpd never grows a file that its
owner shrank.  The page cache is shared with every mapping of the same file, so a
program that maps its memfd sees what stpd writes, as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import os

if TYPE_CHECKING:
    from typing_extensions import Buffer


class BufferGone(Exception):
    """The file behind a buffer shrank, or the buffer was released."""


class FdHandle:
    """Owns one descriptor; ``close()`` is idempotent and every later access fails
    (never touching a descriptor number that may have been reused)."""

    __slots__ = ("fd", "key", "__weakref__")

    def __init__(self, fd: int, key: object = None) -> None:
        self.fd = fd
        self.key = key

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def size(self) -> int:
        if self.fd < 0:
            raise BufferGone("buffer released")
        try:
            return os.fstat(self.fd).st_size
        except OSError as exc:
            raise BufferGone(f"file unusable: {exc.strerror}") from None


class FileBuffer:
    """The first ``length`` bytes of the file behind ``handle``, sliceable like a
    memoryview of bytes: ``buf[a:b]`` reads (bytes), ``buf[a:b] = data`` writes."""

    __slots__ = ("handle", "length")

    def __init__(self, handle: FdHandle, length: int) -> None:
        self.handle = handle
        self.length = length

    @property
    def obj(self) -> FdHandle:
        """The memory object (same role as memoryview.obj: FETCHOP word identity)."""
        return self.handle

    def __len__(self) -> int:
        return self.length

    def _range(self, s: slice) -> tuple[int, int]:
        if not isinstance(s, slice) or s.step not in (None, 1):
            raise TypeError("FileBuffer supports contiguous slices only")
        start, stop, _ = s.indices(self.length)
        return start, max(start, stop)

    def __getitem__(self, s: slice) -> bytes:
        start, stop = self._range(s)
        fd = self.handle.fd
        if fd < 0:
            raise BufferGone("buffer released")
        try:
            data = os.pread(fd, stop - start, start)
        except OSError as exc:
            raise BufferGone(f"file unreadable: {exc.strerror}") from None
        if len(data) < stop - start:
            raise BufferGone(f"file truncated (needed bytes {start}..{stop}, it has {start + len(data)})")
        return data

    def read_into(self, start: int, out: memoryview) -> None:
        """Fill ``out`` with the bytes from ``start`` (a read into the caller's buffer:
        no allocation, one copy); errors as ``buf[a:b]``."""
        stop = start + len(out)
        if not 0 <= start <= stop <= self.length:
            raise ValueError(f"bytes {start}..{stop} are outside the buffer's {self.length}")
        fd = self.handle.fd
        if fd < 0:
            raise BufferGone("buffer released")
        got = 0
        try:
            while got < len(out):
                n = os.preadv(fd, [out[got:]], start + got)
                if n == 0:
                    break
                got += n
        except OSError as exc:
            raise BufferGone(f"file unreadable: {exc.strerror}") from None
        if got < len(out):
            raise BufferGone(f"file truncated (needed bytes {start}..{stop}, it has {start + got})")

    def __setitem__(self, s: slice, data: Buffer) -> None:
        start, stop = self._range(s)
        data = memoryview(data).cast("B")
        if len(data) != stop - start:
            raise ValueError("FileBuffer slices cannot change size")
        size = self.handle.size()
        if size < stop:
            raise BufferGone(f"file truncated (needed bytes {start}..{stop}, it has {size})")
        fd = self.handle.fd
        try:
            while len(data):
                n = os.pwrite(fd, data, start)
                data, start = data[n:], start + n
        except OSError as exc:
            raise BufferGone(f"file unwritable: {exc.strerror}") from None

    def reserve(self, start: int, stop: int) -> None:
        """Allocate the file's blocks for bytes ``start..stop`` before they are
        written (an ST receiver puts memory in place before each CTS): a write into
        a hole costs the filesystem's allocation on the data path (ext4 delayed
        allocation).  Only inside the file's current size, so a file its owner
        shrank is never grown; a filesystem without fallocate is left to allocate
        on write, as before."""
        fd = self.handle.fd
        if fd < 0:
            raise BufferGone("buffer released")
        stop = min(stop, self.length, self.handle.size())
        if stop <= start:
            return
        try:
            os.posix_fallocate(fd, start, stop - start)
        except OSError:
            pass  # EOPNOTSUPP, ENOSPC...: the write itself will say what is wrong



class FileSlice:
    """Bytes ``start..stop`` of a FileBuffer, not read yet: what a sender hands on so
    that the bytes are read when they can leave, into a buffer it reuses
    (``FileBuffer.read_into``).  ``bytes(slice)`` reads them now.  ``owner`` is whatever
    the failure of the read must be reported to (the transfer)."""

    __slots__ = ("buf", "start", "stop", "owner")

    def __init__(self, buf: FileBuffer, start: int, stop: int, owner: object = None) -> None:
        self.buf = buf
        self.start = start
        self.stop = stop
        self.owner = owner

    def __len__(self) -> int:
        return self.stop - self.start

    def __bytes__(self) -> bytes:
        return self.buf[self.start : self.stop]
