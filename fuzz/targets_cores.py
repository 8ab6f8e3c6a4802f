"""Socket-handler targets, sans-IO: the input drives what a hostile peer sends to the
daemon's core; its documented rejection is a counted drop, so nothing may raise."""

from __future__ import annotations

import pickle
import random

from daemons import constants as C

from .draw import Draw
from .frames import CABLE, S_ULA, attack, bring_up, new_link
from .mutate import mutate_bytes
from .registry import target

_RIGS: dict[str, object] = {}


def _rig(name: str, build):
    """A brought-up set of objects, built once and copied for every input."""
    if name not in _RIGS:
        try:
            _RIGS[name] = pickle.dumps(build())
        except (TypeError, pickle.PicklingError):  # e.g. buffers lent to the core: build afresh
            _RIGS[name] = None
    blob = _RIGS[name]
    return build() if blob is None else pickle.loads(blob)


def _drain_received(link) -> None:
    from daemons.link.link import Received

    for ev in link.events():
        if isinstance(ev, Received):
            link.release(ev.vc, len(ev.recs))


# --- the link ----------------------------------------------------------------------------
def _link_pair():
    attacker, victim = new_link(CABLE, 1), new_link(CABLE, 2)

    def out(now):
        _drain_received(victim)
        return victim.handle_timer(now) + victim.datagrams(now)

    now = bring_up(attacker, victim.receive, out)
    assert attacker.up and victim.up
    return attacker, victim, now


@target("link", seeds=[b"", b"\x02\x01\x00\x10", b"\x00" * 40, b"\x05\x01" * 40])
def link(data: bytes) -> None:
    """Link.receive (daemons.link's Link) from an up peer: valid datagrams, one field mutated, LCRC re-stamped."""
    d = Draw(data)
    attacker, victim, now = _rig("link", _link_pair)
    history: list[bytes] = []
    for _ in range(1 + d.below(4)):
        for dgram in attack(d, attacker, victim, [S_ULA, C.ULA_BROADCAST], now, history):
            victim.receive(dgram, now)
        _drain_received(victim)
        for dg in victim.handle_timer(now) + victim.datagrams(now):
            attacker.receive(dg, now)
        _drain_received(attacker)
        now += d.choice([0.0, 0.001, 0.01, 0.5])
    victim.handle_timer(now + 5.0)


# --- gsnd --------------------------------------------------------------------------------
def _endpoint():
    from daemons.endpoint.core import Endpoint

    attacker = new_link(CABLE, 3)
    ep = Endpoint(CABLE, 0.0, ula=bytes.fromhex("020000000001"), rng=random.Random(4))

    def receive(dg, now):
        ep.link.receive(dg, now)
        ep.process(now)

    def out(now):
        o = ep.handle_timer(now) + ep.link.datagrams(now)
        ep.events()
        return o

    now = bring_up(attacker, receive, out)
    assert attacker.up and ep.link.up
    return attacker, ep, now


@target("gsnd.core", seeds=[b"", b"\x03\x01\x01", b"\x04\x00" * 30])
def gsnd_core(data: bytes) -> None:
    """gsnd's Endpoint (link + reassembly + Admin) fed hostile datagrams from its neighbour."""
    d = Draw(data)
    attacker, ep, now = _rig("gsnd", _endpoint)
    history: list[bytes] = []
    ulas = [ep.configured_ula, C.ULA_BROADCAST, S_ULA, C.ULA_HARP_SERVER]
    for _ in range(1 + d.below(4)):
        for dgram in attack(d, attacker, ep.link, ulas, now, history):
            ep.link.receive(dgram, now)
            ep.process(now)
        for dg in ep.handle_timer(now) + ep.link.datagrams(now):
            attacker.receive(dg, now)
        ep.events()
        _drain_received(attacker)
        now += d.choice([0.0, 0.01, 1.0])
    ep.handle_timer(now + 5.0)
    ep.events()


# --- the switch --------------------------------------------------------------------------
def _switch(forwarder=None, fabric_ports=(), seed=5, plane=False, static=None):
    """A switch (with the given ingress walk, default the compiled one, and the given
    static ULA -> port entries), a hostile neighbour on port 1 (another switch when
    ``fabric_ports`` has it) and a well-behaved one on port 2, both links up."""
    from daemons.switch.core import Switch

    sw = Switch(7, [1, 2], 0.0, rng=random.Random(seed), cable_ids={1: CABLE, 2: 2}, forwarder=forwarder,
                fabric_ports=list(fabric_ports), plane=plane, static=static)
    attacker, other = new_link(CABLE, seed + 1), new_link(2, seed + 2)

    def rx(port):
        def f(dg, now):
            sw.ports[port].link.receive(dg, now)
            sw.process(port, now)
        return f

    def out(port):
        return lambda now: sw.ports[port].link.handle_timer(now) + sw.ports[port].link.datagrams(now)

    now = bring_up(other, rx(2), out(2))
    now = bring_up(attacker, rx(1), out(1), now)
    return sw, attacker, other, now


def _switch_answers(sw, attacker, other, now) -> None:
    """What the switch sends after a hostile round: port 2 and its well-behaved neighbour
    both ways, port 1's datagrams to the attacker."""
    for dg in sw.ports[2].link.handle_timer(now) + sw.ports[2].link.datagrams(now):
        other.receive(dg, now)
    for dg in other.handle_timer(now) + other.datagrams(now):
        sw.ports[2].link.receive(dg, now)
        sw.process(2, now)
    _drain_received(other)
    for dg in sw.ports[1].link.handle_timer(now) + sw.ports[1].link.datagrams(now):
        attacker.receive(dg, now)
    _drain_received(attacker)


@target("switch.core", seeds=[b"", b"\x03\x00\x01", b"\x06\x01" * 30])
def switch_core(data: bytes) -> None:
    """The switch core: hostile datagrams on port 1, a well-behaved neighbour on port 2."""
    d = Draw(data)
    sw, attacker, other, now = _rig("switch", _switch)
    history: list[bytes] = []
    targets = [C.ULA_BROADCAST, C.ULA_NONE, sw.ula, *list(sw.table)[:4]]
    for _ in range(1 + d.below(4)):
        for dgram in attack(d, attacker, sw.ports[1].link, targets, now, history):
            sw.ports[1].link.receive(dgram, now)
            sw.process(1, now)
        _switch_answers(sw, attacker, other, now)
        now += d.choice([0.0, 0.01, 1.0])
    for p in (1, 2):
        sw.ports[p].link.handle_timer(now + 5.0)


@target("switchfwd", seeds=[b"", bytes(range(64)) * 4, b"\x01" * 200])
def switchfwd(data: bytes) -> None:
    """gsn-switch's compiled ingress walk against its Python oracle (tests/fuzz/switchfwd_target.py)."""
    from tests.fuzz.switchfwd_target import one_input

    one_input(data)


@target("switchloop", seeds=[b"", bytes(range(64)) * 4, b"\x07\x02" * 100])
def switchloop(data: bytes) -> None:
    """gsn-switch's compiled data path (SwitchPlane: ingress, wormhole, credits, C receive) against the Python Switch."""
    from tests.fuzz.switchloop_target import hostile_input, one_input

    one_input(data)
    hostile_input(data)


@target("switchloop.rx", seeds=[b"", bytes(range(64)) * 4, b"\x06\x01" * 100])
def switchloop_rx(data: bytes) -> None:
    """gsn-switch's compiled receive (SwitchPlane.rx/flush from a UDP socket) on hostile datagrams, no oracle: fast."""
    from tests.fuzz.switchrx_target import one_input

    one_input(data)


@target("switchloop.run", seeds=[b"", bytes(range(64)) * 4, b"\x05\x03" * 100])
def switchloop_run(data: bytes) -> None:
    """gsn-switch's compiled loop (SwitchPlane.run: ppoll, receive, pump, flush, reasons) against the Python Switch."""
    from tests.fuzz.switchrun_target import one_input

    one_input(data)


@target("switch.fabric", seeds=[b"", b"\x01\x00\x01", b"\x01\x01" * 30])
def switch_fabric(data: bytes) -> None:
    """The switch with a hostile neighbouring *switch* on port 1 (an inter-switch port, so
    configuration Admin is obeyed from it): its walk and manager phases fed forged
    responses to its own requests (their XIDs), notices, register writes."""
    from daemons.wire.admin import Admin
    from daemons.wire.message import single_records

    d = Draw(data)
    sw, attacker, other, now = _rig("switch.fabric", lambda: _switch(fabric_ports=[1], seed=7))
    history: list[bytes] = []
    responses = [int(c) for c in C.AdminCmd if c & C.ADMIN_RESPONSE_BIT]
    for _ in range(1 + d.below(6)):
        sw.handle_timer(now)
        if d.bool():
            xids = sorted(sw.agent.pending) + sorted(sw.agent.notice_xids)
            xid = d.choice(xids) if xids and d.bool() else d.int(4)
            adm = Admin(d.choice(responses) if d.bool() else d.int(1), xid, d.choice([1, 1, 0, 2]),
                        d.int(1) % 8, d.int(1) % 8, tuple(d.take(7).ljust(7, b"\xff")), d.int(1) % 4,
                        d.take(16).ljust(16, b"\0"))
            attacker.enqueue(2, single_records(2, C.MpType.ADMIN, adm.encode()))
            dgrams = attacker.datagrams(now)
        else:
            dgrams = attack(d, attacker, sw.ports[1].link, [C.ULA_BROADCAST, sw.ula, *list(sw.table)[:3]], now,
                            history)
        for dgram in dgrams:
            sw.ports[1].link.receive(dgram, now)
            sw.process(1, now)
        _switch_answers(sw, attacker, other, now)
        now += d.choice([0.0, 0.06, 1.1])
    sw.handle_timer(now + 5.0)
    sw.status()


# --- harpd -------------------------------------------------------------------------------
HARP_ULAS = [bytes.fromhex("020000000001"), bytes.fromhex("020000000002"), bytes.fromhex("020000000003")]


def _harp():
    from ipaddress import IPv4Address as A, IPv4Network, IPv6Address as A6, IPv6Network

    from harpd.core import HarpCore, LisConfig

    server = HarpCore([LisConfig(IPv4Network("192.0.2.0/24"), role="server"),
                       LisConfig(IPv6Network("2001:db8::/64"), role="server")], 0.0)
    server.set_port(HARP_ULAS[0], [A("192.0.2.1"), A6("2001:db8::1")], 0.0)
    client = HarpCore([LisConfig(IPv4Network("192.0.2.0/24"))], 0.0)
    client.set_port(HARP_ULAS[1], [A("192.0.2.2")], 0.0)
    server.outgoing(), client.outgoing()
    return server, client


@target("harpd.core", seeds=[b"", b"\x00\x01\x02", b"\x01" * 50])
def harp_core(data: bytes) -> None:
    """HarpCore.receive (server and client roles) on HARP/InHARP packets built then mutated, with timers."""
    from ipaddress import IPv4Address, IPv6Address

    from daemons.constants import ULA_HARP_SERVER
    from harpd.constants import Op
    from harpd.wire import Harp

    d = Draw(data)
    cores = _rig("harpd", _harp)
    now = 1.0
    for _ in range(1 + d.below(5)):
        core = d.choice(cores)
        v4 = d.bool()

        def ip(v4: bool = v4) -> IPv4Address | IPv6Address:
            if v4:
                return IPv4Address(d.choice([0xC0000201, 0xC0000202, 0xC0000203, 0xC0000263, 0x0A010101])
                                   if d.below(8) != 7 else d.int(4))  # input used up: the LIS
            return IPv6Address((0x20010DB8 << 96) | d.int(1) if d.below(8) != 7 else d.int(16))

        known = HARP_ULAS + [ULA_HARP_SERVER, C.ULA_BROADCAST]

        def ula(known: list[bytes] = known) -> bytes:
            return d.choice(known) if d.bool() else d.take(6).ljust(6, b"\0")

        hrd = Harp.__dataclass_fields__["hrd"].default
        rha = ula()  # the sender's own ULA, mostly also the source of the Message (else a spoof)
        raw = Harp(d.choice(list(Op)), ip(), ip(), rha, ula(), hrd if d.below(4) else d.choice([1, 6])).encode()
        if d.bool():
            raw = mutate_bytes(d, raw, offsets=[0, 1, 2, 3, 4, 5, 6, 7])
        core.receive(rha if d.below(4) != 3 else ula(), raw, now)
        core.outgoing(), core.events()
        if d.bool():
            now += d.choice([0.5, 30.0, 900.0, 1300.0])
            core.handle_timer(now)
            core.outgoing(), core.events()
        core.table(now), core.status()


# --- stpd --------------------------------------------------------------------------------
ST_A, ST_B = b"\x02\x00\x00\x00\x00\x0a", b"\x02\x00\x00\x00\x00\x0b"


def _st_pump(a, b, now, rounds=30):

    for _ in range(rounds):
        moved = False
        for me, core, other in ((ST_A, a, b), (ST_B, b, a)):
            for _ula, _vc, hdr, payload in core.outgoing():
                moved = True
                other.receive(me, hdr + bytes(payload), now)
            core.events()
        if not moved:
            return


def _st():
    from stpd.core import StCore

    a, b = StCore(0.0, rng=random.Random(8)), StCore(0.0, rng=random.Random(9))
    b.listen(7)
    vid = a.connect(ST_B, 7, 0.0)
    _st_pump(a, b, 0.0)
    a.request_region(vid, 64, 0.0)
    b.expose(next(iter(b.vcs)), bytearray(64))
    _st_pump(a, b, 0.0)
    return a, b


@target("stpd.core", seeds=[b"", b"\x05\x01" * 20, b"\x16\x00" * 40])
def st_core(data: bytes) -> None:
    """StCore.receive on ST operations with the live VC's ports/keys/ids, mutated, checksum re-stamped."""
    import struct

    from stpd.constants import Flag, Function, Op
    from stpd.wire import Header, checksum

    d = Draw(data)
    a, b = _rig("stpd", _st)
    now = 0.0
    for _ in range(1 + d.below(4)):
        victim = d.choice([a, b])
        vcs = list(victim.vcs.values())
        vc = d.choice(vcs) if vcs else None
        op = d.choice(list(Op))

        coherent = vc is not None and d.below(4) != 0  # the live VC's tuple, so the op reaches its handler

        def pick(live, pool, nbytes):
            if coherent or (vc is not None and d.bool()):
                return live
            return d.choice(pool) if d.bool() else d.int(nbytes)

        h = Header(op, Flag(d.int(1) & 0xFC), d.choice(list(Function)) if op is Op.GET else 0, d.bits(2),
                   d.int(2), pick(vc and vc.local_port, [0, 1, 0xFFFF], 2),
                   pick(vc and vc.peer_port, [0, 1, 0xFFFF], 2), pick(vc and vc.local_key, [0], 4), 0,
                   pick(0, [0, 1, 2], 2), d.int(2), pick(0, [0, 8, 64], 4), d.int(4), pick(0, [64, 1 << 20], 4),
                   pick(d.choice([0, 1, 2]), [0xFFFFFFFF], 4), pick(d.choice([1, 2, 3]), [0xFFFFFFFF], 4))
        body = h.encode() + (d.blob(80) if op is Op.DATA or d.below(4) == 0 else b"")
        if d.bool():
            body = mutate_bytes(d, body, offsets=[0, 1, 2, 4, 6, 8, 14, 16, 20, 24, 28, 32, 36])
        body = bytearray(body)
        if len(body) >= 14 and d.below(8):
            body[12:14] = b"\0\0"
            body[12:14] = struct.pack(">H", checksum(bytes(body)))
        src = (vc.peer if vc is not None else ST_A) if coherent or d.below(8) else d.take(6).ljust(6, b"\0")
        victim.receive(src, bytes(body), now)
        _st_pump(a, b, now, 10)
        if d.bool():
            now += d.choice([0.01, 1.0, 30.0])
            a.handle_timer(now), b.handle_timer(now)
            _st_pump(a, b, now, 10)
    a.status_table(), b.status_table()


# --- pktwayd -----------------------------------------------------------------------------
def _engines():
    from tests.sim.test_pktway_engine import engines

    return engines()


@target("pktwayd.engine", seeds=[b"", b"\x00\x01\x02" * 10, b"\x02" * 80])
def pktway_engine(data: bytes) -> None:
    """The half-router engine: from_san_bytes (both dialects, with source routes) and from_twin_bytes."""
    from tests.sim.test_rrp_appendix_b import ADDR

    from .pktway import ADDRS, ROUTES, wire

    d = Draw(data)
    es = _rig("pktwayd", _engines)
    rab, rba = es[ADDR(21)], es[ADDR(22)]
    rab.now = rba.now = 1.0
    dts = [ADDR(21), ADDR(22), *ADDRS]
    for _ in range(1 + d.below(4)):
        how = d.below(3)
        if how == 2:
            acts = rba.from_twin_bytes(wire(d, dts))
        else:
            dialect = d.choice(["pw0", "mw5"])
            acts = rab.from_san_bytes(wire(d, dts, dialect), dialect,
                                      src_route=d.choice(ROUTES + [None]))
        for where, _to, pkt in acts:
            assert where in ("san", "twin", "local", "route")
            pkt.encode()


@target("pktway-san.switch", seeds=[b"", b"\x01\x08\x00" * 10])
def san_switch(data: bytes) -> None:
    """pktway-san's SanSwitch.receive: a native route header (built or mutated) ahead of an EEP packet."""
    from pktwayd.udpsan import SanSwitch, native

    from .pktway import wire

    d = Draw(data)
    ports = {1: ("127.0.0.1", 7401), 2: ("127.0.0.1", 7402)}
    sw = SanSwitch(ports, mtu=d.choice([0, 64, 8192]))
    head = native(d.choice([0, 1, 2, 3, 255])) if d.below(4) else d.blob(8)
    datagram = mutate_bytes(d, head + wire(d), rounds=d.below(2), offsets=[0, 1, 2, 3])
    src = d.choice(list(ports.values()) + [("127.0.0.1", 9)])
    out = sw.receive(src, datagram)
    drops = sum(v for k, v in sw.counters.items() if k.startswith("drop_"))
    assert (len(out), drops) in ((1, 0), (0, 1)), (out, sw.counters)


# --- the ULP server ----------------------------------------------------------------------
class _FakeSock:
    def __init__(self, uid: int = 0) -> None:
        self.sent: list[bytes] = []
        self.uid = uid  # the peer's credentials (SO_PEERCRED): root, or a group member

    def getsockopt(self, level, option, size=0):
        import struct

        return struct.pack("3i", 4242, self.uid, self.uid)

    def fileno(self) -> int:
        return 1000 + id(self) % 1000  # a number the server finds its client by (frame_in), never opened

    def send(self, data, flags=0):
        self.sent.append(bytes(data))
        return len(data)


def _run_sync(coro) -> None:
    """Drive a coroutine that never really suspends (the fakes below never block)."""
    try:
        coro.send(None)
    except StopIteration:
        return
    coro.close()
    raise AssertionError("the ULP handler suspended with non-blocking fakes")


@target("ulp.server", seeds=[b"", b"\x01\x00\x08\x00", b"\x03" * 40])
def ulp_server(data: bytes) -> None:
    """UlpServer frame handling (decode, SEND/BIND/UNBIND/others, caps, reserved protocol), sans socket:
    every frame as the data plane hands it up (``frame_in``: the raw bytes, maybe truncated or
    oversized), which is also what the server's own reader does with a frame it read."""
    from daemons.io.ulp import UlpServer, _Client
    from daemons.wire.ulp import Frame, Op

    d = Draw(data)
    reasons = [None, None, "queue_full", "too_big"]

    async def wait_room(vc):
        return None

    srv = UlpServer("/nonexistent", send=lambda vc, ula, et, p: d.choice(reasons), wait_room=wait_room,
                    status=lambda: Frame(Op.STATUS if hasattr(Op, "STATUS") else list(Op)[0]), flush=lambda: None)
    client = _Client(_FakeSock(uid=d.choice([0, 65534])))
    srv.clients.append(client)
    srv.delivery.add(client)
    for _ in range(1 + d.below(6)):
        et = d.choice([0x0800, 0x88B7, 0x86DD, d.int(2)])
        payload = d.choice([b"\x02\x47\x53\x00\x01", b""]) + d.blob(32)
        raw = Frame(d.choice(list(Op)), d.below(4), et, d.take(6).ljust(6, b"\0"), payload).encode()
        raw = mutate_bytes(d, raw, offsets=[0, 1, 2, 3])
        srv.frame_in(client.sock.fileno(), raw, d.choice([len(raw), len(raw), 0, 1 << 20]))
    for sent in client.sock.sent:
        Frame.decode(sent)


@target("gsnd.dataplane", seeds=[bytes([op, 1, 0, 200, 2, 7, 9, 9]) * 12 for op in range(3)])
def gsnd_dataplane(data: bytes) -> None:
    """gsnd's compiled data plane: C reassembly, TAP frames, cable datagrams (tests/fuzz/dataplane_target.py)."""
    from tests.fuzz.dataplane_target import one_input

    one_input(data)
