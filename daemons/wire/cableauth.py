"""Authenticated cable datagrams: seal on send, open on receive (sans-IO).

A keyed cable appends a 32-byte trailer to every datagram the link makes (PROJECT
CHOICE, issue 12):

====== ==== =====================================================================
offset size field (offsets from the end of the link's datagram, big-endian)
====== ==== =====================================================================
0      8    session: the sender's CLOCK_REALTIME in ns when its cable was opened
8      8    counter: datagrams sealed in this session before this one (0, 1, 2, ...)
16     16   tag: HMAC-SHA256 over the shim, the micropackets, session and counter
            with this direction's subkey (below), its first 16 bytes
====== ==== =====================================================================

so a sealed datagram is ``body || session || counter || tag`` where ``body`` is the
link's datagram (32-byte shim and N 40-byte micropackets) unchanged, and

    tag = HMAC-SHA256(k_dir, sealed[:-16])[:16]
    k_dir = HMAC-SHA256(key, b"gsn cable auth v1 " || dir)      (dir: one byte, 0 or 1)

(RFC 2104 with SHA-256; a C implementation computes both with libcrypto's
``HMAC(EVP_sha256(), ...)`` over the same bytes).  Both ends of a cable hold the same
32-byte key; each direction has its own subkey, as each direction of a manually
keyed IPsec SA pair has its own key, so one end's datagrams are never taken for the
other's.  ``dir`` is 0 for datagrams from the *lower* end and 1 from the higher: the
ends are ordered by UDP port, and, when both use the same port, by IP address
(big-endian bytes), which then has to be configured rather than a wildcard.

Opening checks, in this order, each failure a distinct counted reason:

1. shape: a plain datagram (32 + 40k bytes) is ``unauthenticated``; anything that is
   not 32 + 40k + 32 bytes with k >= 1 is ``truncated``;
2. the tag (constant-time comparison): ``bad_mac``, or ``reflected`` when it is
   right for our own direction (our datagram sent back to us);
3. the replay window (:class:`ReplayWindow`): an older session than the newest seen
   (``old_session``), a counter already seen (``replayed``) or too far behind the
   newest (``too_old``).

Only then is the body handed to the link.  The window is keyed to the sender's
session, which plays for the cable what the shim's reset nonces play for the link:
a sender that restarts opens a new, larger session (its clock has moved on), the
receiver resets its window to it, and every datagram of an earlier session --
a captured RESET included -- is refused from then on.

Threat model: an attacker on the underlay who can read, drop, delay, reorder and
inject datagrams, with any source address, but does not know the key.  It cannot
make either end accept a datagram the other did not seal, nor one twice (replay),
nor one of an earlier session (a restarted sender's), nor reflect one end's own
datagrams to it, now or after a restart (a reflected old session of the receiver's
own would otherwise be newer than the peer's and lock the peer out).  Not
protected: confidentiality (the data travels in clear), and denial of service by
dropping datagrams.  Two limits, as in WireGuard (whose
handshake timestamps are the same idea): a sender whose realtime clock stepped back
across its restart is refused (``old_session``) until its clock passes its last
session; and a receiver that restarted keeps no window, so until the peer's current
session reaches it (its RESETs every 10 ms, keepalives every 100 ms) datagrams of
the peer's earlier sessions can be replayed to it, each once.  The link drops
those that name the receiver's previous reset nonce; an old RESET can at worst
bring the new link up on a stale nonce, which the dead interval resets again.
"""

from __future__ import annotations

import enum
import hmac
import ipaddress
import struct
from collections import Counter
from typing import Any

from .._link import CableAuthCore
from ..constants import AUTH_KEY_BYTES, AUTH_REPLAY_WINDOW, AUTH_TAG_BYTES, AUTH_TRAILER_BYTES, MP_BYTES, SHIM_BYTES

from .buffers import Bytes

_IDS = struct.Struct("!QQ")
_DIGEST = "sha256"
_MIN_SEALED = SHIM_BYTES + MP_BYTES + AUTH_TRAILER_BYTES
SUBKEY_LABEL = b"gsn cable auth v1 "

# the distinct reasons a datagram is refused (counted as rx_auth_<reason>)
DROP_REASONS = ("unauthenticated", "truncated", "bad_mac", "reflected", "old_session", "replayed", "too_old")


def subkey(key: bytes, direction: int) -> bytes:
    """The MAC key of datagrams from the lower (0) or the higher (1) end."""
    return hmac.digest(key, SUBKEY_LABEL + bytes((direction,)), _DIGEST)


def direction(local: tuple[str, int], peer: tuple[str, int]) -> int:
    """0 if this end is the lower one (by UDP port, then IP address), else 1;
    ValueError (one line) when the two cannot be told apart."""
    if local[1] != peer[1]:
        return int(local[1] > peer[1])
    mine, theirs = ipaddress.ip_address(local[0]), ipaddress.ip_address(peer[0])
    if mine.is_unspecified:
        raise ValueError(f"both ends of the keyed cable use UDP port {local[1]}: give the local address "
                         f"(not {local[0]}) so that the two directions have their own keys")
    if mine == theirs:
        raise ValueError(f"the cable's local and peer address are both {local[0]}:{local[1]}")
    return int(mine.packed > theirs.packed)


def _subkeys(key: bytes, direction: int, session: int) -> tuple[bytes, bytes]:
    """(tx, rx) subkeys of this end, after checking the arguments (ValueError)."""
    if len(key) != AUTH_KEY_BYTES:
        raise ValueError(f"a cable key is {AUTH_KEY_BYTES} bytes, not {len(key)}")
    if direction not in (0, 1):
        raise ValueError(f"direction {direction!r} is not 0 or 1")
    if not 0 <= session < 1 << 64:
        raise ValueError(f"session {session} is not a 64-bit unsigned number")
    return subkey(key, direction), subkey(key, 1 - direction)


def tag(key: bytes, signed: Bytes) -> bytes:
    """The 16-byte tag over ``signed`` (the sealed datagram without its tag)."""
    return hmac.digest(key, signed, _DIGEST)[:AUTH_TAG_BYTES]


class AuthDrop(enum.StrEnum):
    """Why a sealed datagram is refused (counted as rx_auth_<reason>)."""

    UNAUTHENTICATED = "unauthenticated"
    TRUNCATED = "truncated"
    REFLECTED = "reflected"
    BAD_MAC = "bad_mac"
    OLD_SESSION = "old_session"
    TOO_OLD = "too_old"
    REPLAYED = "replayed"


class ReplayWindow:
    """Which (session, counter) pairs of one sender have been accepted.

    The newest session wins: a larger one resets the window to it; a smaller one is
    refused.  Within the session, the highest counter accepted (``top``) and a bitmap
    of the ``size`` counters at and below it (bit i = ``top - i`` seen) accept each
    counter once, in any order, unless it is ``size`` or more behind ``top``.
    """

    def __init__(self, size: int = AUTH_REPLAY_WINDOW) -> None:
        self.size = size
        self._mask = (1 << size) - 1
        self.session: int | None = None
        self.top = 0
        self.bits = 0

    def check(self, session: int, counter: int) -> AuthDrop | None:
        """Record (session, counter) and return None, or return why it is refused."""
        if self.session is None or session > self.session:
            self.session, self.top, self.bits = session, counter, 1
            return None
        if session < self.session:
            return AuthDrop.OLD_SESSION
        ahead = counter - self.top
        if ahead > 0:
            self.bits = ((self.bits << ahead) | 1) & self._mask if ahead < self.size else 1
            self.top = counter
            return None
        behind = -ahead
        if behind >= self.size:
            return AuthDrop.TOO_OLD
        bit = 1 << behind
        if self.bits & bit:
            return AuthDrop.REPLAYED
        self.bits |= bit
        return None


class CableAuth:
    """One end of a keyed cable: ``seal`` what it sends, ``open`` what it receives.

    ``direction`` is this end's (:func:`direction`); ``session`` its session (the
    driver passes CLOCK_REALTIME in ns when it opens the cable).  Drops are counted
    in ``counters`` as ``rx_auth_<reason>``, accepted datagrams as ``rx_auth_ok``.
    """

    def __init__(self, key: bytes, direction: int, session: int, counters: Counter[str] | None = None,
                 window: int = AUTH_REPLAY_WINDOW) -> None:
        self.tx_key, self.rx_key = _subkeys(key, direction, session)
        self.session = session
        self.counter = 0  # the next datagram's
        self.window = ReplayWindow(window)
        self.counters: Counter[str] = Counter() if counters is None else counters

    def seal(self, body: Bytes) -> bytes:
        """``body || session || counter || tag``; every call uses the next counter."""
        signed = bytes(body) + _IDS.pack(self.session, self.counter)
        self.counter += 1
        return signed + tag(self.tx_key, signed)

    def seal_many(self, bodies: list[Bytes]) -> list[bytes]:
        return [self.seal(b) for b in bodies]

    def open(self, datagram: Bytes) -> bytes | None:
        """The link's datagram inside ``datagram``, or None (the reason counted)."""
        n = len(datagram)
        if n % MP_BYTES == SHIM_BYTES % MP_BYTES:
            return self._drop(AuthDrop.UNAUTHENTICATED)
        if n < _MIN_SEALED or (n - AUTH_TRAILER_BYTES - SHIM_BYTES) % MP_BYTES:
            return self._drop(AuthDrop.TRUNCATED)
        view = memoryview(datagram)
        signed, got = view[:-AUTH_TAG_BYTES], view[-AUTH_TAG_BYTES:]
        if not hmac.compare_digest(tag(self.rx_key, signed), got):
            return self._drop(AuthDrop.REFLECTED if hmac.compare_digest(tag(self.tx_key, signed), got) else AuthDrop.BAD_MAC)
        session, counter = _IDS.unpack_from(view, n - AUTH_TRAILER_BYTES)
        why = self.window.check(session, counter)
        if why is not None:
            return self._drop(why)
        self.counters["rx_auth_ok"] += 1
        return bytes(view[:-AUTH_TRAILER_BYTES])

    def _drop(self, reason: AuthDrop) -> bytes | None:
        """Count ``reason``; None, for ``open`` to return."""
        self.counters[f"rx_auth_{reason}"] += 1
        return None


class CompiledCableAuth:
    """:class:`CableAuth` in C (daemons/_cableauth.h, libcrypto's HMAC-SHA256), what the
    daemons use; CableAuth is its oracle (tests/unit/test_cableauth_compiled.py: same
    sealed bytes, same opens and drop reasons in the same order).  ``core`` is shared
    with gsnd's data plane (``Core.dp_auth``: dp_send seals with the same counter, rx_pump
    opens against the same replay window, both counted in ``core.dp_counts()``).  This
    object counts its own opens into ``counters``."""

    def __init__(self, key: bytes, direction: int, session: int, counters: Counter[str] | None = None,
                 window: int = AUTH_REPLAY_WINDOW) -> None:
        tx_key, rx_key = _subkeys(key, direction, session)
        self.core: Any = CableAuthCore(tx_key, rx_key, session, window)
        self.counters: Counter[str] = Counter() if counters is None else counters

    @property
    def session(self) -> int:
        return int(self.core.session)

    @property
    def counter(self) -> int:
        """The next datagram's counter."""
        return int(self.core.counter)

    def seal(self, body: Bytes) -> bytes:
        return bytes(self.core.seal(body))

    def seal_many(self, bodies: list[Bytes]) -> list[bytes]:
        return list(self.core.seal_many(bodies))

    def open(self, datagram: Bytes) -> bytes | None:
        out: str | bytes = self.core.open(datagram)
        if isinstance(out, str):
            self.counters[f"rx_auth_{out}"] += 1
            return None
        self.counters["rx_auth_ok"] += 1
        return out
