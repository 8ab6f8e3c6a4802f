"""Authenticated cable datagrams (daemons/wire/cableauth.py): the exact construction,
tampering, truncation, replay, reordering, the window's edges, sender restarts and
reflection."""

import hashlib
import hmac
import random
import struct

import pytest
from hypothesis import assume, given, settings, strategies as st

from daemons import constants as C
from daemons.wire.cableauth import CableAuth, ReplayWindow, direction, subkey

KEY = bytes(range(32))
T0 = 1_790_000_000_000_000_000  # a CLOCK_REALTIME in ns (2026)


def body(n_mps=2, fill=0xAB):
    return bytes(C.SHIM_BYTES) + bytes([fill]) * (C.MP_BYTES * n_mps)


def ends(window=C.AUTH_REPLAY_WINDOW):
    """The lower (direction 0) and higher end of one cable, sessions 1 ns apart."""
    return CableAuth(KEY, 0, T0, window=window), CableAuth(KEY, 1, T0 + 1, window=window)


def test_the_construction_is_exactly_the_documented_one():
    """tag = HMAC-SHA256(k_dir, body||session||counter)[:16],
    k_dir = HMAC-SHA256(key, "gsn cable auth v1 " || dir): what a C implementation must match."""
    lo, _hi = ends()
    lo.counter = 7
    b = body(1)
    sealed = lo.seal(b)
    k0 = hmac.new(KEY, b"gsn cable auth v1 \x00", hashlib.sha256).digest()
    assert subkey(KEY, 0) == k0 != subkey(KEY, 1)
    signed = b + struct.pack(">QQ", T0, 7)
    assert sealed == signed + hmac.new(k0, signed, hashlib.sha256).digest()[:16]
    assert len(sealed) == len(b) + C.AUTH_TRAILER_BYTES == len(b) + 32 and lo.counter == 8
    # a known answer, so that a change of the construction cannot pass unnoticed
    assert sealed[-16:].hex() == KNOWN_TAG


# computed independently with `openssl dgst -sha256 -mac HMAC` (subkey, then tag)
KNOWN_TAG = "417d9ccc09ceedfa89b586a8e11f2009"


def test_round_trip_both_ways_and_counters():
    lo, hi = ends()
    for i in range(5):
        assert hi.open(lo.seal(body(i + 1, i))) == body(i + 1, i)
        assert lo.open(hi.seal(body(1, i))) == body(1, i)
    assert hi.counters == {"rx_auth_ok": 5} and lo.counters == {"rx_auth_ok": 5}


@settings(max_examples=300)
@given(st.integers(1, 40), st.data())
def test_any_flipped_bit_is_dropped_as_bad_mac(n_mps, data):
    lo, hi = ends()
    sealed = bytearray(lo.seal(body(n_mps)))
    pos = data.draw(st.integers(0, len(sealed) - 1))
    sealed[pos] ^= 1 << data.draw(st.integers(0, 7))
    assert hi.open(bytes(sealed)) is None
    assert hi.counters == {"rx_auth_bad_mac": 1}


@settings(max_examples=300)
@given(st.integers(1, 10), st.integers(-400, 400))
def test_any_other_length_is_dropped_with_its_reason(n_mps, delta):
    assume(delta)
    lo, hi = ends()
    sealed = lo.seal(body(n_mps))
    cut = sealed[:len(sealed) + delta] if delta < 0 else sealed + bytes(delta)
    assert hi.open(cut) is None
    (reason,) = hi.counters
    n = len(cut)
    if n % 40 == 32:
        assert reason == "rx_auth_unauthenticated"
    elif n < C.SHIM_BYTES + C.MP_BYTES + C.AUTH_TRAILER_BYTES or n % 40 != 24:
        assert reason == "rx_auth_truncated"
    else:  # the right shape, but the tag is not over these bytes
        assert reason == "rx_auth_bad_mac"


@settings(max_examples=200)
@given(st.binary(max_size=3000))
def test_arbitrary_bytes_never_open_and_never_raise(raw):
    _lo, hi = ends()
    assert hi.open(raw) is None
    assert sum(hi.counters.values()) == 1


def test_a_plain_datagram_and_a_wrong_key_are_refused():
    lo, hi = ends()
    assert hi.open(body(3)) is None
    other = CableAuth(bytes(32), 0, T0)
    assert hi.open(other.seal(body(3))) is None
    assert hi.counters == {"rx_auth_unauthenticated": 1, "rx_auth_bad_mac": 1}


def test_replay_is_dropped_and_counted():
    lo, hi = ends()
    sealed = [lo.seal(body(1, i)) for i in range(10)]
    for s in sealed:
        assert hi.open(s) is not None
    for s in sealed:
        assert hi.open(s) is None
    assert hi.counters == {"rx_auth_ok": 10, "rx_auth_replayed": 10}


@settings(max_examples=100)
@given(st.permutations(range(64)), st.integers(64, 4096))
def test_reordering_within_the_window_is_accepted_once(order, window):
    lo, hi = ends(window)
    sealed = [lo.seal(body(1, i % 256)) for i in range(64)]
    for i in order:
        assert hi.open(sealed[i]) == body(1, i % 256)
    for i in order:
        assert hi.open(sealed[i]) is None
    assert hi.counters == {"rx_auth_ok": 64, "rx_auth_replayed": 64}


def test_window_edges():
    w = ReplayWindow(8)
    assert w.check(5, 100) is None
    assert w.check(5, 93) is None  # 7 behind: the last slot
    assert w.check(5, 92) == "too_old"  # 8 behind
    assert w.check(5, 93) == "replayed"
    assert w.check(5, 107) is None  # ahead by 7: 100 stays in the window as bit 7
    assert w.check(5, 100) == "replayed"
    assert w.check(5, 99) == "too_old"
    assert w.check(5, 115) is None  # ahead by 8: the whole window is new
    assert w.check(5, 108) is None and w.check(5, 107) == "too_old"
    assert w.check(5, 2 ** 64 - 1) is None and w.check(5, 2 ** 64 - 1) == "replayed"
    assert w.check(4, 2 ** 64 - 1) == "old_session"
    assert w.check(6, 0) is None and w.check(6, 0) == "replayed"  # a new session starts afresh
    assert w.check(5, 200) == "old_session"


@settings(max_examples=300)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40)), max_size=200), st.integers(1, 16))
def test_window_against_a_model(events, size):
    """Accept iff the session is newer, or it is the current one and the counter is
    unseen and less than ``size`` behind the highest accepted."""
    w = ReplayWindow(size)
    cur, seen, top = None, set(), None
    for session, counter in events:
        if cur is None or session > cur:
            want = None
            cur, seen, top = session, {counter}, counter
        elif session < cur:
            want = "old_session"
        elif counter in seen:
            want = "replayed" if counter > top - size else "too_old"
        elif counter <= top - size:
            want = "too_old"
        else:
            want = None
            seen.add(counter)
            top = max(top, counter)
        assert w.check(session, counter) == want, (session, counter)


def test_a_restarted_sender_is_accepted_and_its_old_datagrams_are_not():
    lo, hi = ends()
    old = [lo.seal(body(1, i)) for i in range(5)]  # e.g. a RESET among them
    assert all(hi.open(d) for d in old[:3])
    lo2 = CableAuth(KEY, 0, T0 + 5_000_000_000)  # restarted 5 s later: counter from 0 again
    assert hi.open(lo2.seal(body(1, 9))) == body(1, 9)
    for d in old:  # seen or not, every datagram of the earlier session is refused now
        assert hi.open(d) is None
    assert hi.counters == {"rx_auth_ok": 4, "rx_auth_old_session": 5}


def test_reflection_is_refused_now_and_after_a_restart():
    """One end's own datagrams sent back to it never open, even from an earlier run of
    it whose session is newer than the peer's (which would lock the peer out)."""
    lo, hi = ends()
    mine = hi.seal(body(1))
    assert hi.open(mine) is None
    hi2 = CableAuth(KEY, 1, T0 + 10**9)  # hi restarted; its old datagram comes back
    assert hi2.open(mine) is None
    assert hi2.open(lo.seal(body(1, 3))) == body(1, 3)  # the peer's session still works
    assert hi.counters == {"rx_auth_reflected": 1} and hi2.counters["rx_auth_reflected"] == 1


def test_direction_orders_the_ends_the_same_way_on_both():
    cases = [(("0.0.0.0", 6400), ("198.18.1.1", 7000)), (("127.0.0.1", 7001), ("127.0.0.1", 6401)),
             (("10.0.0.2", 6400), ("10.0.0.1", 6400)), (("::1", 5), ("::2", 5))]
    for local, peer in cases:
        assert {direction(local, peer), direction(peer, local)} == {0, 1}
    with pytest.raises(ValueError, match="both ends of the keyed cable use UDP port 6400: give the local address"):
        direction(("0.0.0.0", 6400), ("10.0.0.1", 6400))
    with pytest.raises(ValueError, match="both"):
        direction(("10.0.0.1", 6400), ("10.0.0.1", 6400))


def test_bad_construction_arguments():
    with pytest.raises(ValueError, match="32 bytes"):
        CableAuth(bytes(16), 0, T0)
    with pytest.raises(ValueError):
        CableAuth(KEY, 2, T0)
    with pytest.raises(ValueError):
        CableAuth(KEY, 0, 1 << 64)


def test_many_random_sessions_interleaved_with_replays():
    """A sender restarting again and again while an attacker replays everything it
    ever saw: each datagram is accepted at most once and only while current."""
    rng = random.Random(4)
    hi = CableAuth(KEY, 1, T0 - 1)
    captured, session = [], T0
    for _ in range(20):
        session += rng.randrange(1, 10**9)
        lo = CableAuth(KEY, 0, session)
        fresh = [lo.seal(body(1, k)) for k in range(rng.randrange(1, 20))]
        for k, d in enumerate(fresh):
            assert hi.open(d) is not None
            assert hi.open(rng.choice(captured + fresh[:k + 1])) is None  # anything already seen
        captured += fresh
    assert hi.counters["rx_auth_ok"] == len(captured)


def test_a_restarted_receiver_takes_old_sessions_only_until_the_current_one_arrives():
    """The documented limit: a fresh window knows no session, so a replay of the peer's
    earlier session opens (once); the peer's current session then wins for good."""
    lo_old = CableAuth(KEY, 0, T0)
    old = lo_old.seal(body(1))
    lo_now = CableAuth(KEY, 0, T0 + 10**9)
    hi = CableAuth(KEY, 1, T0 + 2 * 10**9)  # the receiver, just restarted
    assert hi.open(old) is not None and hi.open(old) is None
    assert hi.open(lo_now.seal(body(1))) is not None
    assert hi.open(lo_old.seal(body(1))) is None
    assert hi.counters == {"rx_auth_ok": 2, "rx_auth_replayed": 1, "rx_auth_old_session": 1}
