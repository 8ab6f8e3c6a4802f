"""Structure-aware builders for GSN cable traffic, shared by the fuzz targets and by
tests/unit/test_hostile_fuzz.py.

A real, up, attacker :class:`Link` frames upper-layer records (Messages and Admin
micropackets built with the codec) into valid datagrams: shim, nonces, sequence
numbers, credits, ECRC and LCRC all correct.  One field is then mutated and the LCRC
re-stamped, so the mutation reaches the layer it targets instead of dying at the
first CRC check.
"""

from __future__ import annotations

import random
import struct

import numpy as np

from daemons import constants as C
from daemons.constants import MpType
from daemons.link import link as _link_mod
from daemons.wire.message import encode_stream, single_records, stream_records
from daemons.wire.micropacket import MP_DTYPE, Micropacket, restamp
from daemons.wire.shim import Shim

from .draw import Draw

S_ULA = bytes.fromhex("020000000009")
CABLE = 1

# Counters that record normal operation, not a drop.
NOT_DROPS = {
    "rx_mps", "tx_mps", "rtx_mps", "link_up", "link_down", "tx_reset", "rx_reset", "rx_init", "window_full",
    "duplicate_reset", "rx_messages", "tx_messages", "rx_admin", "tx_admin", "rx_admin_request", "admin_retry",
    "ulas_assigned",
}
CONTROL_TYPES = {MpType.NULL, MpType.RESET, MpType.RESET_ACK, MpType.INIT, MpType.INIT_ACK}
NOT_SEQUENCED = [t for t in range(16) if t not in {int(x) for x in C.SEQUENCED_TYPES}]
FIELDS = {"vc": (C.CTRL_VC_SHIFT, 2), "type": (C.CTRL_TYPE_SHIFT, 4), "tail": (C.CTRL_TAIL_SHIFT, 1),
          "error": (C.CTRL_ERROR_SHIFT, 1), "vcr": (C.CTRL_VCR_SHIFT, 2), "cr": (C.CTRL_CR_SHIFT, 6),
          "rseq": (C.CTRL_RSEQ_SHIFT, 8), "tseq": (C.CTRL_TSEQ_SHIFT, 8), "ecrc": (C.CTRL_ECRC_SHIFT, 16)}
MUTATIONS = ["none", "type", "vc", "tail", "error", "ecrc", "tseq", "rseq", "vcr_cr", "seq", "ack",
             "src_nonce", "dst_nonce", "cable", "flags", "magic", "version", "lcrc_flip", "truncate", "extend"]


def link_class():
    """The link class the daemons use: ``daemons.link.Link`` when the package exports one
    (a C implementation may stand in for it), else daemons.link.link.Link."""
    import daemons.link as pkg

    return getattr(pkg, "Link", None) or _link_mod.Link


def drops(*counters) -> int:
    return sum(v for c in counters for k, v in c.items() if k not in NOT_DROPS and not k.startswith("link_down_"))


def set_field(recs: np.ndarray, i: int, name: str, value: int) -> None:
    """Set one control field of micropacket ``i`` and re-stamp its LCRC."""
    shift, width = FIELDS[name]
    mask = np.uint64(((1 << width) - 1) << shift)
    ctrl = recs["ctrl"][i : i + 1].astype(np.uint64)
    ctrl = (ctrl & ~mask) | np.uint64(value << shift)
    restamp(recs[i : i + 1], ctrl)


def get_field(recs: np.ndarray, i: int, name: str) -> int:
    shift, width = FIELDS[name]
    return (int(recs["ctrl"][i]) >> shift) & ((1 << width) - 1)


def bring_up(attacker, victim_receive, victim_out, now: float = 0.0) -> float:
    """Exchange RESET/INIT until both ends are up (``victim_out(now)`` -> datagrams)."""
    from daemons.link.link import Received

    for _ in range(6):
        now += 0.001
        for d in attacker.handle_timer(now) + attacker.datagrams(now):
            victim_receive(d, now)
        for d in victim_out(now):
            attacker.receive(d, now)
        for ev in attacker.events():
            if isinstance(ev, Received):
                attacker.release(ev.vc, len(ev.recs))
    return now


def admin_data(d: Draw) -> bytes:
    """32 bytes of an Admin micropacket: any command, hop counts, route index and route."""
    cmds = [int(c) for c in C.AdminCmd]
    cmd = d.choice(cmds) if d.bool() else d.int(1)
    hop, init, idx = d.int(1) % 4 if d.bool() else d.int(1), d.int(1) % 4, d.int(1) % 9 if d.bool() else d.int(1)
    route = bytes(d.choice([1, 2, 3, 255, 0]) if d.bool() else d.int(1) for _ in range(7))
    return struct.pack("!BBBBI7sB", cmd, hop, init, idx, d.int(4), route, d.int(1)) + d.take(16).ljust(16, b"\0")


def upper_records(d: Draw, d_ulas) -> tuple[int, np.ndarray]:
    """A valid Message or Admin built with the codec, its upper fields (M_len) maybe mutated."""
    vc = d.below(3)
    if d.bool():
        payload = d.blob(150) * (1 + (d.int(1) % 64 if d.below(8) == 7 else 0))  # now and then up to ~10 KB
        stream = encode_stream(3, d.choice(d_ulas), S_ULA, d.int(2), payload)
        if d.below(4) == 0:
            stream[12:16] = (d.int(2) % 300 if d.bool() else d.int(4)).to_bytes(4, "big")
        return vc, stream_records(vc, stream)
    return vc, single_records(vc, MpType.ADMIN, admin_data(d))


def mutate(d: Draw, dgram: bytes) -> tuple[bytes, str]:
    """Apply one drawn mutation to a datagram, re-stamping the LCRC (except lcrc_flip)."""
    kind = d.choice(MUTATIONS)
    buf = bytearray(dgram)
    n = (len(buf) - C.SHIM_BYTES) // C.MP_BYTES
    if n <= 0:
        return bytes(buf), "none"
    recs = np.frombuffer(buf, MP_DTYPE, n, C.SHIM_BYTES)
    i = d.below(n)
    magic, version, flags, cable, src, dst, seq, ack = struct.unpack_from("!HBBIIIQQ", buf)
    if kind == "type":
        set_field(recs, i, "type", d.choice(NOT_SEQUENCED) if d.bool() else d.bits(4))
    elif kind in FIELDS:
        set_field(recs, i, kind, d.near(get_field(recs, i, kind), FIELDS[kind][1]))
    elif kind == "vcr_cr":
        set_field(recs, i, "vcr", d.bits(2))
        set_field(recs, i, "cr", d.bits(6))
    elif kind == "seq":
        struct.pack_into("!Q", buf, 16, d.near(seq, 64))
    elif kind == "ack":
        struct.pack_into("!Q", buf, 24, d.near(ack, 64))
    elif kind == "src_nonce":
        struct.pack_into("!I", buf, 8, d.near(src, 32))
    elif kind == "dst_nonce":
        struct.pack_into("!I", buf, 12, d.near(dst, 32))
    elif kind == "cable":
        struct.pack_into("!I", buf, 4, d.near(cable, 32))
    elif kind == "flags":
        buf[3] = d.int(1)
    elif kind == "magic":
        struct.pack_into("!H", buf, 0, d.near(magic, 16))
    elif kind == "version":
        buf[2] = d.int(1)
    elif kind == "lcrc_flip":
        bit = d.below(C.MP_BYTES * 8)
        buf[C.SHIM_BYTES + i * C.MP_BYTES + bit // 8] ^= 1 << (bit % 8)
    elif kind == "truncate":
        buf = bytearray(bytes(buf)[: d.below(len(buf))])
    elif kind == "extend":
        buf = bytearray(bytes(buf) + d.blob(80))
    return bytes(buf), kind


def control_datagram(d: Draw, victim) -> bytes:
    """An unsequenced batch: any TYPE (reserved included) and fields, LCRC correct."""
    mps = []
    for _ in range(1 + d.below(3)):
        kind = d.choice(sorted(int(t) for t in CONTROL_TYPES)) if d.bool() else d.bits(4)
        mps.append(Micropacket(data=d.take(32).ljust(32, b"\0"), vc=d.bits(2), type=kind, tail=d.bits(1),
                               rseq=d.int(1), tseq=d.int(1), ecrc=d.int(2)).encode())

    def nonce():
        return d.choice([victim.my_nonce, victim.peer_nonce, 0]) if d.bool() else d.int(4)

    shim = Shim(d.choice([0, C.SHIM_FLAG_SEQUENCED]) if d.bool() else d.int(1), victim.cable_id, nonce(), nonce(),
                d.int(8), d.choice([C.NO_ACK, 0, victim.next_seq]) if d.bool() else d.int(8))
    return shim.encode() + b"".join(mps)


def attack(d: Draw, attacker, victim_link, d_ulas, now: float, history: list | None = None) -> list[bytes]:
    """The datagram(s) the attacker sends this round; with ``history`` (the datagrams sent
    so far), also replays, reorders and re-sends old ones."""
    if history and d.below(8) == 7:
        old = d.choice(history)
        return [mutate(d, old)[0] if d.bool() else old]
    out = _attack(d, attacker, victim_link, d_ulas, now)
    if history is not None:
        history.extend(out[:8])
        del history[:-32]
    return out


def _attack(d: Draw, attacker, victim_link, d_ulas, now: float) -> list[bytes]:
    mode = d.below(8)  # (an input used up draws zeros: a valid upper-layer batch)
    if mode == 7:
        return [control_datagram(d, victim_link)]
    if mode == 6:  # raw bytes behind a correct shim, or nothing correct at all
        raw = d.blob(300)
        if d.bool():
            shim = Shim(C.SHIM_FLAG_SEQUENCED, victim_link.cable_id, victim_link.peer_nonce, victim_link.my_nonce,
                        victim_link.expected, C.NO_ACK)
            raw = shim.encode() + raw
        return [raw]
    vc, recs = upper_records(d, d_ulas)
    attacker.enqueue(vc, recs)
    dgrams = attacker.datagrams(now)
    if not dgrams:
        return []
    dgram, _ = mutate(d, dgrams[0])
    if d.below(8) == 7:  # out of order
        return [*dgrams[1:], dgram]
    return [dgram, *dgrams[1:]]


def new_link(cable: int, seed: int):
    return link_class()(cable, 0.0, rng=random.Random(seed))
