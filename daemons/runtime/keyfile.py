"""Cable key files: 32 random bytes as one line of base64 (as ``gsnctl genkey`` writes
them, like ``wg genkey``) or of hex, readable by nobody but their owner (mode 0600)."""

from __future__ import annotations

import base64
import binascii
import os
import stat

from ..constants import AUTH_KEY_BYTES, AUTH_TRAILER_BYTES
from ..wire.cableauth import direction

MAX_KEY_FILE_BYTES = 4096  # a key file is one short line; anything longer is not one


def new_key() -> bytes:
    return os.urandom(AUTH_KEY_BYTES)


def encode_key(key: bytes) -> str:
    return base64.b64encode(key).decode("ascii")


def parse_key(text: str) -> bytes:
    """One line of base64 (44 characters) or hex (64 digits); ValueError otherwise."""
    line = text.strip()
    if "\n" in line:
        raise ValueError("holds more than one line (expected one line: the key in base64 or hex)")
    if len(line) == 2 * AUTH_KEY_BYTES:
        try:
            return bytes.fromhex(line)
        except ValueError:
            pass
    try:
        key = base64.b64decode(line, validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != AUTH_KEY_BYTES:
        raise ValueError(f"is not a {AUTH_KEY_BYTES}-byte key in base64 or hex (make one with `gsnctl genkey`)")
    return key


def read_key(path: str) -> bytes:
    """The key in ``path``; ValueError (one line naming the file) if it cannot be
    read, is readable or writable by group or others (as ssh refuses such a private
    key), or is not a key."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a symlink is judged by its target
    except OSError as exc:
        raise ValueError(f"key file {path}: cannot open: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"key file {path}: not a regular file")
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077:
            raise ValueError(f"key file {path}: mode {mode:04o} lets group or others at the key; "
                             f"`chmod 600 {path}` (a key others can read is refused)")
        try:
            raw = os.read(fd, MAX_KEY_FILE_BYTES + 1)
        except OSError as exc:
            raise ValueError(f"key file {path}: cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(raw) > MAX_KEY_FILE_BYTES:
        raise ValueError(f"key file {path}: longer than {MAX_KEY_FILE_BYTES} bytes (expected one line)")
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError(f"key file {path}: is not text (expected the key in base64 or hex)") from None
    try:
        return parse_key(text)
    except ValueError as exc:
        raise ValueError(f"key file {path}: {exc}") from None


def write_key(path: str, key: bytes, *, force: bool = False) -> None:
    """Write ``key`` to a new file of mode 0600 (OSError if it exists and not ``force``)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_TRUNC if force else os.O_EXCL)
    fd = os.open(path, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an existing file (force) keeps its mode otherwise
        os.write(fd, (encode_key(key) + "\n").encode("ascii"))
    finally:
        os.close(fd)


def cable_key(path: str, local: tuple[str, int], peer: tuple[str, int]) -> bytes:
    """The key of the cable ``local`` -> ``peer`` (config check: ValueError, one line,
    also when the cable's two directions cannot be told apart)."""
    key = read_key(path)
    direction(local, peer)
    return key


def overhead(key: bytes | None) -> int:
    """Bytes a keyed cable adds to each datagram (0 unkeyed)."""
    return AUTH_TRAILER_BYTES if key is not None else 0
