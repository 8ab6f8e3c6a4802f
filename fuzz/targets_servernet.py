"""ServerNet targets: the packet codec, the router core and an end node's receive path
on built-then-mutated datagrams."""

from __future__ import annotations

from daemons.wire.errors import DecodeError

from .draw import Draw
from .mutate import mutate_bytes
from .registry import target

A, B = 0x04001, 0x08001


def _datagram(d: Draw) -> bytes:
    from servernet.codec import Packet, envelope
    from servernet.constants import TType

    ttype = d.choice(list(TType))
    rsp = d.bool() and ttype != TType.DIAG
    ii = d.bool() and d.bool()
    n = d.below(65) if not ii else 8 * d.below(65)
    carries = (rsp and ttype == TType.READ) or (not rsp and ttype in (TType.WRITE, TType.DIAG))
    data = d.take(n).ljust(n, b"\0") if carries else b""
    pkt = Packet(d.choice([A, B, d.bits(20)]), d.choice([A, B, d.bits(20)]), ttype, rsp, d.bits(4), d.bits(1),
                 rsp and d.bool(), None if rsp else d.choice([0x100000, 0x300000, 0x400000, d.int(4)]), data,
                 n if (ttype == TType.READ and not rsp) else 0, ii)
    raw = envelope(pkt.encode(), pkt.path, tpb=d.bool() and d.bool(), ii=ii)
    if d.bool():
        raw = mutate_bytes(d, raw, offsets=[3, 4, 6, 7, 9, 10, 11, len(raw) - 1])
    return raw


@target("servernet.codec", rejects=(DecodeError,), seeds=[b"", b"\x01" * 40, bytes(range(90))])
def codec(data: bytes) -> None:
    """servernet.codec.open_envelope + decode on built-then-mutated datagrams; a decoded packet re-encodes."""
    from servernet.codec import decode, open_envelope

    d = Draw(data)
    env = open_envelope(_datagram(d))
    pkt = decode(env.packet, env.ii)
    assert decode(pkt.encode(), pkt.ii) == pkt, "decode(encode(p)) != p"


@target("servernet.router", seeds=[b"", b"\x02" * 40, bytes(range(60))])
def router(data: bytes) -> None:
    """RouterCore.receive on built-then-mutated datagrams from cabled and unknown senders."""
    from servernet.router import RouterCore, parse_route

    d = Draw(data)
    ports = {0: ("10.0.0.1", 1), 1: ("10.0.0.2", 2)}
    core = RouterCore(d.bits(1), ports, [parse_route(f"{A:#x}=0"), parse_route("0x08000/6=1")])
    for _ in range(1 + d.below(4)):
        out = core.receive(d.choice([ports[0], ports[1], ("9.9.9.9", 9)]), _datagram(d))
        assert out is None or out[0] in ports.values()


@target("servernet.node", seeds=[b"", b"\x03" * 50, bytes(range(100))])
def node(data: bytes) -> None:
    """An end node (AVT, BTE, PacketWay ring) receiving built-then-mutated datagrams, then its timers."""
    from servernet.avt import Avt, Window
    from servernet.endpoint import Endpoint
    from servernet.ring import RingLink

    d = Draw(data)
    avt = Avt([Window("buf", 0x100, 2, "rw"), Window("bell", 0x300, 1, "w", interrupt=True),
               Window("pktway-ring", 0x400, 16, "w", per_source=True), Window("pktway-bell", 0x410, 1, "w", interrupt=True)],
              frozenset({A}), queue_limit=2)
    ep = Endpoint(B, [A], avt)
    RingLink(ep, lambda *a: None)
    if d.bool():
        ep.bte.write(A, 0x100000, b"x" * d.below(65), 0.0)
    now = 0.0
    for _ in range(1 + d.below(6)):
        ep.receive(d.bits(1), _datagram(d), now)
        now += d.below(100) / 1000
        ep.tick(now)
    assert ep.bte.in_use == sum(s is not None for s in ep.bte.slots) and len(avt.queue) <= 2


@target("servernet.crouter", seeds=[b"", b"\x04" * 60, bytes(range(120))])
def crouter(data: bytes) -> None:
    """snet-router's compiled loop (servernet._snetfwd.Router.receive) against RouterCore, its oracle:
    the same output and counters for built-then-mutated datagrams, with a drawn deadlock mask."""
    from servernet._snetfwd import Router
    from servernet.router import RouterCore, parse_route, route_table

    d = Draw(data)
    ports = {0: ("10.0.0.1", 1), 3: ("10.0.0.2", 2), 11: ("::1", 3)}
    routes = [parse_route(f"{A:#x}=0"), parse_route("0x08000/6=3"), parse_route(f"0/{d.below(3)}=11")]
    enables = {3: frozenset({0, 11})} if d.bool() else {}
    fabric = d.bits(1)
    py, c = RouterCore(fabric, ports, routes, enables), Router(-1, fabric, ports, route_table(routes), enables)
    for _ in range(1 + d.below(4)):
        src = d.choice([ports[0], ports[3], ports[11], ("9.9.9.9", 9)])
        raw = _datagram(d) if d.bool() else d.take(d.below(600))
        assert c.receive(src, raw) == py.receive(src, raw), "compiled router differs from RouterCore"
    assert c.counters() == {k: v for k, v in py.counters.items() if v}, "counters differ"


@target("servernet.cnode", seeds=[b"", b"\x05" * 60, bytes(range(140))])
def cnode(data: bytes) -> None:
    """snetd's compiled path (servernet._snetnode through servernet.fastnode) against the Python
    node on built-then-mutated datagrams, with a block maybe in flight: the same datagrams
    answered and sent, the same counters, the same block outcome."""

    from servernet.avt import Avt, Window
    from servernet.codec import encode_datagram
    from servernet.constants import TType
    from servernet.endpoint import Endpoint
    from servernet.fastnode import FastNode

    d = Draw(data)

    def make() -> Endpoint:
        avt = Avt([Window("buf", 0x100, 2, "rw"), Window("ro", 0x102, 1, "r", paths=frozenset({0})),
                   Window("them", 0x103, 1, "rw", sources=frozenset({0x0c001})),
                   Window("bell", 0x300, 1, "w", interrupt=True), Window("mine", 0x400, 1, "w", per_source=True)],
                  frozenset({A}), queue_limit=2)
        return Endpoint(B, [A], avt)

    py, core = make(), make()
    fast = FastNode(core)
    block = d.take(d.below(300)) if d.bool() else b""
    at = 0x100000 + d.below(64)
    ops = [ep.bte.block(A, at, block, 0x300000, 0.0) for ep in (py, core)] if block else []
    now = 0.0
    for _ in range(1 + d.below(6)):
        fabric, raw = d.bits(1), _datagram(d)
        if block and d.bool():  # a response to one of the block's WRITEs (or another TID), ACK or NAK
            raw = encode_datagram(B, A, d.choice([TType.WRITE, TType.WRITE, TType.READ]), True, d.bits(4), fabric,
                                  d.below(8) > 0, None, b"", 0, False)
        py.receive(fabric, raw, now)
        fast.engine.receive(fabric, raw, now)
        fast.poll(now)
        now += d.below(100) / 1000
        py.tick(now)
        fast.engine.tick(now)
        fast.poll(now)
        core.tick(now)
        fast.sync_paths()  # as the driver's flush() after every tick: a path gone HARD_DOWN is the engine's news too
        got = sorted(core.out + fast.engine.take_out())
        want = sorted(py.out)
        py.out.clear()
        core.out.clear()
        assert got == want, "the compiled node sent other datagrams"
    c = fast.counters()
    assert c["node"] == +py.counters and c["avt"] == +py.avt.counters and c["bte"] == +py.bte.counters, "counters"
    assert [(o.done, o.error) for o in ops[1:]] == [(o.done, o.error) for o in ops[:1]], "block outcome"
    assert core.bte.in_use == sum(s is not None for s in core.bte.slots) and not (core.bte.lent & ~0xFFFF)


@target("servernet.cengine", seeds=[b"", b"\x06" * 80, bytes(range(160))])
def cengine(data: bytes) -> None:
    """servernet._snetnode.Engine alone (no oracle: cheap, for long runs and the sanitizers) on
    drawn calls: datagrams built-then-mutated or raw, responses to its TIDs, path states,
    lent TIDs, blocks (with a doorbell or not), single READs, timers; everything it sends is a
    whole packet with a good CRC."""
    import zlib

    from servernet._snetnode import Engine
    from servernet.codec import encode_datagram

    d = Draw(data)
    ii = d.bool() and d.bool()
    e = Engine(B, [A, 0x0c001], ii, 0.05)
    mem = bytearray(3 << 12)
    own = [bytearray(2 << 12), bytearray(2 << 12)]  # a per-source window: each peer's own memory
    e.set_windows([(0x100, 2, 3, 3, False, None, mem), (0x102, 1, 1, 1, False, [0x0c001], mem[8192:]),
                   (0x300, 1, 2, 3, True, None, None), (0x400, 2, 3, 3, False, None, own)])
    now = 0.0
    for _ in range(1 + d.below(10)):
        c = d.below(9)
        if c == 0:
            e.lend([d.bits(4) for _ in range(d.below(17))], now)
        elif c == 1:
            n = 8 * (1 + d.below(40)) if ii else 1 + d.below(300)
            bell = (0x300000, bytes(8 * d.below(3) if ii else d.below(20))) if d.bool() else ()
            e.start_block(d.bits(16), d.choice([A, 0x0c001]), 0x100000 + (8 * d.below(8) if ii else d.below(64)),
                          bytes(n), d.below(3) - 1, d.bits(1), now, *bell)
        elif c == 8:
            n = 8 * (1 + d.below(8)) if ii else 1 + d.below(64)
            e.start_read(d.bits(16), d.choice([A, 0x0c001]), 0x100000 + (8 * d.below(8) if ii else d.below(64)), n,
                         d.below(3) - 1, d.bits(1), now)
        elif c == 2:
            e.set_path(d.choice([A, 0x0c001]), d.bits(1), d.below(4))
        elif c == 3:
            now += d.below(100) / 1000
            e.tick(now)
        elif c == 4:
            e.take(now)
        elif c == 5:
            f = d.bits(1)
            e.receive(f, encode_datagram(B, d.choice([A, 0x0c001]), d.below(3), True, d.bits(4), f, d.bool(), None,
                                         b"" if d.bool() else bytes(8), 0, ii), now)
        elif c == 6:
            e.receive(d.bits(1), d.take(d.below(600)), now)
        else:  # a request or response from a drawn peer, maybe with one byte changed
            f, rsp, tt = d.bits(1), d.bool(), d.choice([0, 1, 2, 0xE])
            n = 8 * d.below(65) if ii else d.below(65)
            carries = (rsp and tt == 0) or (not rsp and tt in (1, 0xE))
            raw = bytearray(encode_datagram(d.choice([B, A]), d.choice([A, 0x0c001, d.bits(20)]), tt, rsp, d.bits(4),
                                            f, rsp and d.bool(), None if rsp else d.choice([0x100000, 0x102000,
                                            0x300000, 0x101ff0, 0x400000, 0x401fc0, d.bits(32)]), bytes(n if carries else 0),
                                            n if (tt == 0 and not rsp) else 0, ii))
            if d.bool():
                raw[d.below(len(raw))] ^= 1 + d.below(255)
            e.receive(f, bytes(raw), now)
        for fabric, raw in e.take_out():
            body = raw[4:-4]
            assert fabric in (0, 1) and len(raw) <= 532 and zlib.crc32(body) == int.from_bytes(raw[-4:], "big")
    e.take(now)
    assert sum(e.counters()["node"].values()) >= 0 and e.status()["tids_in_use"] <= 16


_ROUTER_RIG: dict[str, object] = {}
_TABLES: dict[int, bytes] = {}  # the routing table per drawn default route (3 of them; 2 ms each to build)


def _router_rig():
    """The router's UDP socket, one socket per cabled port and an uncabled sender, on loopback
    (made once: sockets are slow to make)."""
    import socket

    if not _ROUTER_RIG:
        def udp() -> socket.socket:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("127.0.0.1", 0))
            s.setblocking(False)
            return s

        _ROUTER_RIG.update(router=udp(), ports={n: udp() for n in (0, 3, 11)}, stranger=udp())
    return _ROUTER_RIG


def _recv_all(s) -> list[bytes]:
    out = []
    while True:
        try:
            out.append(s.recv(4096))
        except BlockingIOError:
            return out


@target("servernet.crouter.sock", seeds=[b"", b"\x07" * 60, bytes(range(120))])
def crouter_sock(data: bytes) -> None:
    """snet-router's socket loop (servernet._snetfwd.Router.forward, and serve in a thread, one input
    in eight): datagrams built-then-mutated or raw (up to 600 bytes: longer than the receive
    buffer) sent from cabled ports and an uncabled sender over loopback; each port receives
    what RouterCore.receive decides, in order, and the counters are RouterCore's."""
    import threading

    from servernet._snetfwd import Router
    from servernet.router import RouterCore, parse_route, route_table

    rig = _router_rig()
    rsock, socks, stranger = rig["router"], rig["ports"], rig["stranger"]
    for s in (rsock, stranger, *socks.values()):  # leftovers of an input that failed
        _recv_all(s)
    d = Draw(data)
    ports = {n: s.getsockname() for n, s in socks.items()}
    routes = [parse_route(f"{A:#x}=0"), parse_route("0x08000/6=3"), parse_route(f"0/{d.below(3)}=11")]
    enables = {3: frozenset({0, 11})} if d.bool() else {}
    fabric = d.bits(1)
    py = RouterCore(fabric, ports, routes, enables)
    if routes[-1].bits not in _TABLES:
        _TABLES[routes[-1].bits] = route_table(routes)
    c = Router(rsock.fileno(), fabric, ports, _TABLES[routes[-1].bits], enables)
    want: dict[int, list[bytes]] = {n: [] for n in ports}
    sent = 0
    for _ in range(1 + d.below(8)):
        src = d.choice([*socks.values(), stranger])
        raw = _datagram(d) if d.bool() else d.take(d.below(600))
        src.sendto(raw, rsock.getsockname())  # loopback: queued on the router's socket when sendto returns
        sent += 1
        out = py.receive(src.getsockname(), raw)
        if out is not None:
            want[next(n for n, a in ports.items() if a == out[0])].append(out[1])
    if d.below(8) == 7:  # (short inputs read zeros: forward)
        loop = threading.Thread(target=c.serve, args=(1,))
        loop.start()
        while sum(v for k, v in c.counters().items() if not k.endswith("_tx") and k != "tagged_bad_crc") < sent:
            loop.join(0.001)
        c.stop()
        loop.join()
        rsock.setblocking(False)  # serve() made it blocking
    else:
        assert c.forward(0) == sent, "forward() did not take every datagram"
    for n, s in socks.items():
        assert _recv_all(s) == want[n], f"port {n} received other datagrams than RouterCore sends it"
    assert c.counters() == {k: v for k, v in py.counters.items() if v}, "counters differ"


_NODE_RIG: dict[str, object] = {}


def _node_rig():
    """A node's X and Y sockets, the routers they talk to and a stranger, on loopback, and the
    eventfd the engine wakes Python by (made once)."""
    import os
    import socket

    if not _NODE_RIG:
        def udp() -> socket.socket:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("127.0.0.1", 0))
            s.setblocking(False)
            return s

        _NODE_RIG.update(node=[udp(), udp()], routers=[udp(), udp()], stranger=udp(),
                         efd=os.eventfd(0, os.EFD_NONBLOCK))
    return _NODE_RIG


def _engine(ii: bool):
    from servernet._snetnode import Engine

    e = Engine(B, [A, 0x0c001], ii, 0.05)
    mem = bytearray(3 << 12)
    own = [bytearray(2 << 12), bytearray(2 << 12)]
    e.set_windows([(0x100, 2, 3, 3, False, None, mem), (0x102, 1, 1, 1, False, [0x0c001], mem[8192:]),
                   (0x300, 1, 2, 3, True, None, None), (0x400, 2, 3, 3, False, None, own)])
    return e


@target("servernet.cengine.sock", seeds=[b"", b"\x08" * 80, bytes(range(160))])
def cengine_sock(data: bytes) -> None:
    """snetd's compiled receive loop (servernet._snetnode.Engine.serve in a thread: recvmmsg on
    both fabrics, the sender check, truncation, sendmmsg) on requests, responses and raw
    datagrams (up to 600 bytes: longer than its buffer) from each fabric's router and from
    strangers, against a twin Engine fed the same datagrams by receive() (X's, then Y's: the
    order serve() drains the two sockets in): the same datagrams sent on each fabric, the same
    left for Python, the same counters (strangers apart)."""
    import os
    import threading

    from servernet.codec import encode_datagram

    rig = _node_rig()
    node, routers, stranger, efd = rig["node"], rig["routers"], rig["stranger"], rig["efd"]
    for s in (*node, *routers, stranger):  # leftovers of an input that failed
        _recv_all(s)
    d = Draw(data)
    ii = d.bool() and d.bool()
    served, twin = _engine(ii), _engine(ii)
    served.attach(node[0].fileno(), routers[0].getsockname(), node[1].fileno(), routers[1].getsockname(), efd)
    sent = strangers = 0
    feed: tuple[list[bytes], list[bytes]] = ([], [])  # what the twin receives, per fabric
    for _ in range(1 + d.below(12)):
        f, k = d.bits(1), d.below(4)
        if k == 0:
            raw = d.take(d.below(600))
        elif k == 1:
            raw = _datagram(d)
        else:  # a request (or a response) to this node from a peer, on the path it came by, maybe one byte changed
            rsp, tt = d.below(4) == 0, d.choice([0, 1, 2])
            n = 8 * d.below(65) if ii else d.below(65)
            carries = (rsp and tt == 0) or (not rsp and tt == 1)
            raw = bytearray(encode_datagram(B, d.choice([A, 0x0c001]), tt, rsp, d.bits(4), f, rsp and d.bool(),
                                            None if rsp else d.choice([0x100000, 0x102000, 0x300000, 0x101ff0, 0x400000,
                                                                       0x401fc0, d.bits(32)]),
                                            bytes(n if carries else 0), n if (tt == 0 and not rsp) else 0, ii))
            if d.below(4) == 0:
                raw[d.below(len(raw))] ^= 1 + d.below(255)
            raw = bytes(raw)
        src = d.choice([routers[f], routers[f], routers[f], routers[1 - f], stranger])
        src.sendto(raw, node[f].getsockname())  # loopback: queued on the node's socket when sendto returns
        sent += 1
        if src is routers[f]:
            feed[f].append(raw[:533])  # the engine's receive buffer: MAX_DATAGRAM_II + 1
        else:
            strangers += 1
    # X and Y are two sockets with no order between them: serve()'s first poll finds both
    # ready and drains X, then Y (a WRITE on X read back on Y depends on it)
    for f in (0, 1):
        for raw in feed[f]:
            twin.receive(f, raw, 0.0)
    taken: list = []
    loop = threading.Thread(target=served.serve, args=(1,))
    loop.start()
    while True:
        c = served.counters()["node"]
        taken += [e for e in served.take(0.0) if e[0] == "rx"]
        if sum(c.get(k, 0) for k in ("rx_X", "rx_Y", "drop_foreign_sender", "drop_slow_path_full")) + len(taken) >= sent:
            break
        loop.join(0.001)
    served.stop()
    loop.join()
    try:
        os.eventfd_read(efd)
    except BlockingIOError:
        pass
    taken += [e for e in served.take(0.0) if e[0] == "rx"]
    want_out, want_slow = twin.take_out(), [e for e in twin.take(0.0) if e[0] == "rx"]
    for f in (0, 1):
        assert _recv_all(routers[f]) == [b for g, b in want_out if g == f], f"fabric {f}: other datagrams sent"
        assert [e for e in taken if e[1] == f] == [e for e in want_slow if e[1] == f], \
            f"fabric {f}: other datagrams left for Python"
    c, want = served.counters(), twin.counters()
    assert c["node"].pop("drop_foreign_sender", 0) == strangers, "strangers"
    assert c == want, "counters differ"
