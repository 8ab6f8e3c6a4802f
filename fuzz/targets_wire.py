"""Decoder targets: every codec that reads bytes from a socket or the kernel."""

from __future__ import annotations

import ipaddress
import struct

import numpy as np

from daemons import constants as C
from daemons.wire.errors import DecodeError

from .draw import Draw
from .mutate import mutate_bytes
from .registry import target

ULAS = [bytes.fromhex("020000000001"), bytes.fromhex("020000000009"), C.ULA_BROADCAST, C.ULA_NONE]


def _ula(d: Draw) -> bytes:
    return d.choice(ULAS) if d.bool() else d.take(6).ljust(6, b"\0")


@target("wire.micropacket", rejects=(DecodeError,), seeds=[b"", b"\x01" * 40, b"\x00\x05" + b"\x11" * 60])
def micropacket(data: bytes) -> None:
    """Micropacket.decode / from_records / LCRC bulk check on built-then-mutated micropackets."""
    from daemons.wire.micropacket import MP_DTYPE, Micropacket, from_records, lcrc_exact, lcrc_fold_ok

    d = Draw(data)
    mps = []
    for _ in range(1 + d.below(4)):
        mp = Micropacket(data=d.take(32).ljust(32, b"\0"), vc=d.bits(2), type=d.bits(4), tail=d.bits(1),
                         error=d.bits(1), vcr=d.bits(2), cr=d.bits(6), rseq=d.int(1), tseq=d.int(1), ecrc=d.int(2))
        mps.append(mp.encode())
    raw = b"".join(mps)
    if d.bool():
        raw = mutate_bytes(d, raw, offsets=[32, 33, 34, 38, 39])
    if len(raw) % C.MP_BYTES == 0 and raw:
        recs = np.frombuffer(raw, MP_DTYPE)
        exact = lcrc_exact(recs)
        assert bool(lcrc_fold_ok(recs)) == bool(exact.all()), "folded and exact LCRC checks disagree"
        if exact.all():
            for mp in from_records(recs):
                assert Micropacket.decode(mp.encode()) == mp
            return
    Micropacket.decode(raw[: C.MP_BYTES])


@target("wire.message", rejects=(DecodeError,), seeds=[b"", b"\x01\x00\x10hello", b"\x02" * 50])
def message(data: bytes) -> None:
    """MessageHeader.decode / decode_stream on encoded streams with M_len and fields mutated."""
    from daemons.wire.message import decode_stream, encode_stream, mps_for

    d = Draw(data)
    vc = d.below(4)
    stream = encode_stream(vc, _ula(d), _ula(d), d.int(2), d.blob(300))
    if d.bool():
        stream[12:16] = (d.int(2) % 400 if d.bool() else d.int(4)).to_bytes(4, "big")
    raw = mutate_bytes(d, bytes(stream), offsets=list(range(0, 24)))
    mps = None if d.bool() else d.below(20)
    msg = decode_stream(vc, raw, mps)
    assert len(msg.payload) <= len(raw)
    count = len(raw) // C.MP_DATA_BYTES if mps is None else mps
    assert mps_for(C.LLC_SNAP_BYTES + len(msg.payload)) <= count, "payload beyond the micropackets counted"


@target("wire.admin", rejects=(DecodeError,), seeds=[b"", bytes(range(40)), b"\x01\x80\x02"])
def admin(data: bytes) -> None:
    """Admin.decode and the argument parsers on built-then-mutated Admin data areas."""
    from daemons.wire import admin as A
    from fuzz.frames import admin_data

    d = Draw(data)
    raw = admin_data(d)
    if d.bool():
        raw = mutate_bytes(d, raw)
    adm = A.Admin.decode(raw)
    assert A.Admin.decode(adm.encode()) == adm
    for name in dir(A):
        if name.startswith("parse_") and callable(getattr(A, name)):
            try:
                getattr(A, name)(adm.args)
            except DecodeError:
                pass
    adm.invalid().encode()
    if not adm.is_response:
        adm.response(adm.command | C.ADMIN_RESPONSE_BIT).encode()


@target("wire.shim", rejects=(DecodeError,), seeds=[b"", b"\x00" * 40, b"\x01" * 80])
def shim(data: bytes) -> None:
    """decode_datagram on shims built with the codec, then mutated (with and without micropackets)."""
    from daemons.wire.shim import Shim, decode_datagram

    d = Draw(data)
    s = Shim(d.choice([0, C.SHIM_FLAG_SEQUENCED, d.int(1)]), d.int(4), d.int(4), d.int(4), d.int(8),
             d.choice([C.NO_ACK, 0, d.int(8)]))
    raw = s.encode() + bytes(C.MP_BYTES * d.below(4)) + (d.blob(40) if d.below(4) == 0 else b"")
    raw = mutate_bytes(d, raw, offsets=[0, 1, 2, 3, 4, 8, 12, 16, 24])
    shim_, n = decode_datagram(raw)
    assert C.SHIM_BYTES + n * C.MP_BYTES == len(raw)
    assert decode_datagram(shim_.encode() + raw[C.SHIM_BYTES :]) == (shim_, n)


@target("wire.ulp", rejects=(DecodeError,), seeds=[b"", b"\x01\x00\x08\x00", b"\x05" * 30])
def ulp(data: bytes) -> None:
    """ULP Frame.decode and DropNotice.decode on built-then-mutated frames and notices."""
    from daemons.wire.ulp import DropNotice, Frame, Op

    d = Draw(data)
    if d.bool():
        f = Frame(d.choice(list(Op)), d.below(4), d.int(2), _ula(d), d.blob(64))
        got = Frame.decode(mutate_bytes(d, f.encode(), offsets=[0, 1, 2, 4]))
        assert Frame.decode(got.encode()) == got
    else:
        from daemons.wire.ulp import DropReason

        n = DropNotice(d.choice(list(DropReason)), d.below(4), d.int(2), d.int(4) or 1)
        got = DropNotice.decode(mutate_bytes(d, n.encode(), offsets=[0, 5, 6, 7, 8, 10]))
        assert DropNotice.decode(got.encode()) == got


@target("wire.ether", rejects=(), seeds=[b"", bytes(14), b"\x08\x00" * 20])
def ether(data: bytes) -> None:
    """frame_to_message (TAP frames into Messages) on Ethernet frames built then mutated: str = refusal."""
    from daemons.wire.ether import frame_to_message, message_to_frame

    d = Draw(data)
    et = d.choice([0x0800, 0x86DD, 0x0806, 0x8100, 0x88B7]) if d.bool() else d.int(2)
    frame = message_to_frame(_ula(d), _ula(d), et, d.blob(200))
    out = frame_to_message(mutate_bytes(d, frame, offsets=[0, 6, 12, 13, 14]), mtu=d.choice([65280, 1500, 20, 0]))
    assert isinstance(out, (str, tuple))


@target("harpd.wire", rejects=(DecodeError,), seeds=[b"", b"\x00\x01" * 20, b"\x03" * 60])
def harp_wire(data: bytes) -> None:
    """harpd.wire.decode (HIPARP and generic ARP formats, IPv4/IPv6) + nak on built-then-mutated packets."""
    from harpd.constants import Op
    from harpd.wire import Harp, decode, nak

    d = Draw(data)
    v6 = d.bool()
    ip = (lambda: ipaddress.IPv6Address(d.take(16).ljust(16, b"\0"))) if v6 else \
        (lambda: ipaddress.IPv4Address(d.take(4).ljust(4, b"\0")))
    hrd = Harp.__dataclass_fields__["hrd"].default if d.bool() else 1
    rha = _ula(d) if hrd == 1 or d.bool() else d.blob(20)
    tha = _ula(d) if hrd == 1 or d.bool() else d.blob(20)
    raw = Harp(d.choice(list(Op)), ip(), ip(), rha, tha, hrd).encode()
    raw = mutate_bytes(d, raw, offsets=[0, 1, 2, 3, 4, 5, 6, 7, 8])
    msg = decode(raw)
    assert decode(msg.encode()) == msg
    if msg.is_request:
        decode(nak(raw))


@target("stpd.wire", rejects=(DecodeError,), seeds=[b"", b"\x16" * 50, b"\x01\x00" * 40])
def stp_wire(data: bytes) -> None:
    """stpd.wire.decode / decode_options on headers built with any op, flags, function, options; checksum re-stamped."""
    from stpd.constants import Flag, Function, Op
    from stpd.wire import Header, checksum, decode, decode_options, encode_options

    d = Draw(data)
    op = d.choice(list(Op))
    h = Header(op, Flag(d.int(1) & 0xFC), d.choice(list(Function)) if op is Op.GET else 0, d.bits(2), d.int(2),
               d.int(2), d.int(2), d.int(4), 0, d.int(2), d.int(2), d.int(4), d.int(4), d.int(4), d.int(4), d.int(4))
    opts = [(d.int(1), d.blob(12)) for _ in range(d.below(3))]
    try:
        body = h.encode() + encode_options(opts) + d.blob(64)
    except (ValueError, struct.error):
        body = h.encode() + d.blob(64)
    body = mutate_bytes(d, body, offsets=[0, 1, 2, 12, 40, 41, 42])
    if d.below(4):  # re-stamp the checksum over the mutated packet
        b = bytearray(body)
        if len(b) >= 14:
            b[12:14] = b"\0\0"
            b[12:14] = struct.pack(">H", checksum(bytes(b)))
        body = bytes(b)
    hdr, rest = decode(body)
    assert decode(hdr.encode() + body[40:]) == (hdr, rest), "header does not round-trip"
    try:
        decode_options(body[40:])
    except DecodeError:
        pass


@target("pktwayd.eep", rejects=(DecodeError,), seeds=[b"", b"\x00" * 30, b"\x04\x02" * 40])
def eep(data: bytes) -> None:
    """pktwayd.eep.decode in both dialects on built-then-mutated packets; a decoded packet re-encodes."""
    from pktwayd.eep import decode

    from .pktway import wire

    d = Draw(data)
    dialect = d.choice(["pw0", "mw5"])
    pkt = decode(wire(d, dialect=dialect), dialect)
    try:
        again = pkt.encode(dialect)
    except ValueError:
        return  # e.g. an address MessageWay cannot carry back
    assert decode(again, dialect) == pkt, "decode(encode(p)) != p"


@target("pktwayd.rrp", rejects=(DecodeError,), seeds=[b"", b"\x07" * 40, b"\x08\x01" * 30])
def rrp(data: bytes) -> None:
    """pktwayd.rrp.decode_records (plain and in routing tables) on encoded records, mutated."""
    from pktwayd.rrp import decode_records, encode

    from .pktway import record

    d = Draw(data)
    raw = b"".join(encode(record(d)) for _ in range(1 + d.below(3)))
    raw = mutate_bytes(d, raw, offsets=[0, 1, 2, 3, 8, 9, 10, 11])
    in_rt = d.bool()
    recs = decode_records(raw, in_rt=in_rt)
    assert decode_records(b"".join(encode(r) for r in recs), in_rt=in_rt) == recs, "records do not round-trip"


@target("pktwayd.messages", rejects=(DecodeError,), seeds=[b"", b"\x03" * 40])
def messages(data: bytes) -> None:
    """pktwayd.messages.records on decoded packets (RRP and ERR bodies)."""
    from pktwayd import messages as M
    from pktwayd.eep import decode

    from .pktway import wire

    d = Draw(data)
    M.records(decode(wire(d)))


@target("harpd.kernel", rejects=(DecodeError,), seeds=[b"", b"\x1e\x00" * 20, bytes(60)])
def netlink(data: bytes) -> None:
    """harpd.kernel.parse_neigh_requests on RTM_{GET,NEW}NEIGH netlink datagrams built then mutated."""
    import socket

    from harpd.kernel import NDA_DST, RTM_GETNEIGH, RTM_NEWNEIGH, parse_neigh_requests

    d = Draw(data)
    msgs = []
    for _ in range(1 + d.below(3)):
        fam = d.choice([socket.AF_INET, socket.AF_INET6, 0, 99])
        alen = {socket.AF_INET: 4, socket.AF_INET6: 16}.get(fam, d.below(20))
        attrs = b""
        for _ in range(d.below(3)):
            body = d.take(alen).ljust(alen, b"\0")
            attrs += struct.pack("=HH", 4 + len(body), d.choice([NDA_DST, 2, 0])) + body + bytes(-len(body) % 4)
        nd = struct.pack("=BxxxiHBB", fam, d.int(4) - 2**31, d.choice([0x01, 0x10, 0x02, d.int(1)]), 0, 0)
        kind = d.choice([RTM_GETNEIGH, RTM_NEWNEIGH, 3, d.int(2)])
        body = nd + attrs
        msgs.append(struct.pack("=IHHII", 16 + len(body), kind, 0, 0, 0) + body)
    raw = mutate_bytes(d, b"".join(msgs), offsets=[0, 1, 4, 16, 20, 28, 29, 30])
    for _ifindex, addr in parse_neigh_requests(raw):
        assert addr.version in (4, 6)


@target("fastpath", seeds=[bytes([op]) + bytes(range(7)) * 30 for op in range(6)])
def fastpath(data: bytes) -> None:
    """daemons._fastpath C kernels against their numpy/Python oracles (tests/fuzz/fastpath_target.py)."""
    from tests.fuzz.fastpath_target import one_input

    one_input(data)


@target("lcrc_scan", seeds=[bytes([i, 200, 1]) + b"\x5a" * 8 + bytes([4, i, 0, 7, 0x20, 1]) * 4 for i in range(3)])
def lcrc_scan(data: bytes) -> None:
    """The link's per-micropacket LCRC check (lcrc_scan) under every block CRC, against Python (tests/fuzz/lcrc_target.py)."""
    from tests.fuzz.lcrc_target import one_input

    one_input(data)


@target("txfast", seeds=[bytes([i, 9, 0, 0, 1, 3, 0x23, 0, 1, 2, 3, 4, 1, 2, 7, 3, 0]) for i in range(3)])
def txfast(data: bytes) -> None:
    """The link's send path (_txfast.h: frames encoded into datagrams, stamping) against Link (tests/fuzz/txfast_target.py)."""
    from tests.fuzz.txfast_target import one_input

    one_input(data)


_AUTH_KEY = bytes(range(32))
_AUTH_T0 = 1 << 60  # the receiver's session; the peer's sessions are drawn around it


@target("wire.cableauth", rejects=(), seeds=[b"", b"\x00\x01\x02" * 10, b"\x00\x05\x00\x01\x01\x02\x07" * 6])
def cableauth(data: bytes) -> None:
    """CableAuth.open on datagrams sealed with the cable's key (sessions and counters drawn,
    so the replay window is reached), replayed, reflected, or mutated after sealing."""
    from daemons.wire.cableauth import CableAuth

    d = Draw(data)
    rx = CableAuth(_AUTH_KEY, 1, _AUTH_T0, window=d.choice([8, 64, C.AUTH_REPLAY_WINDOW]))
    sealed: set[bytes] = set()  # what the peer (direction 0) sealed
    history: list[bytes] = []
    accepted: set[bytes] = set()
    session, counter = _AUTH_T0 - 5, 0
    for _ in range(1 + d.below(16)):
        kind = d.below(5)
        body = d.take(4).ljust(4, b"\0") + bytes(C.SHIM_BYTES - 4 + C.MP_BYTES * (1 + d.below(3)))
        if kind <= 1 or not history:  # the peer seals: the next counter, or a drawn session/counter
            if kind == 1:
                session = (session + d.int(1) - 128) % (1 << 64)
                counter = d.near(counter, 64) if d.bool() else d.int(8)
            tx = CableAuth(_AUTH_KEY, 0, session)
            tx.counter = counter
            raw = tx.seal(body)
            counter = (counter + 1) % (1 << 64)
            sealed.add(raw)
        elif kind == 2:  # a replay
            raw = d.choice(history)
        elif kind == 3:  # mutated after sealing (not re-stamped)
            raw = mutate_bytes(d, d.choice(history), offsets=[-32, -28, -24, -20, -16, -1, 0, 3, 31])
        else:  # our own direction sent back to us (a reflection)
            raw = CableAuth(_AUTH_KEY, 1, session).seal(body)
        history.append(raw)
        before = sum(rx.counters.values())
        out = rx.open(raw)
        assert sum(rx.counters.values()) == before + 1, "every datagram is accepted or counted once"
        if out is not None:
            assert raw in sealed, "a datagram the peer never sealed was accepted"
            ident = raw[-C.AUTH_TRAILER_BYTES:-C.AUTH_TAG_BYTES]
            assert ident not in accepted, "a (session, counter) was accepted twice"
            accepted.add(ident)
            assert out == raw[:-C.AUTH_TRAILER_BYTES]
