"""InfiniBand-style fabric targets (ib/): the UD packet and management codecs, and the
SM, switch and IPoIB port cores fed built-then-mutated datagrams and TAP frames."""

from __future__ import annotations

from .draw import Draw
from .mutate import mutate_bytes
from .registry import target

GUID = 0x0002C90300000001


def _ud(d: Draw) -> bytes:
    from ib import packet

    grh = packet.Grh(d.take(16).ljust(16, b"\xff"), d.take(16).ljust(16, b"\xff")) if d.bool() else None
    return packet.UdPacket(slid=d.int(2), dlid=d.int(2), pkey=d.int(2), dqpn=d.int(3), sqpn=d.int(3), qkey=d.int(4),
                           payload=d.take(d.below(120)), grh=grh).encode()


@target("ib.packet", rejects=(ValueError,), seeds=[b"", b"\x00" * 40, b"\x01" * 90])
def ib_packet(data: bytes) -> None:
    """UD packet decode (LRH/GRH/BTH/DETH/ICRC) of built-then-mutated packets; round trip when intact."""
    from ib import packet

    d = Draw(data)
    raw = _ud(d)
    if d.bool():
        raw = mutate_bytes(d, raw, offsets=[0, 1, 4, 5, 8, 9])
    try:
        p = packet.decode(raw)
    except packet.PacketError:
        return
    assert packet.decode(p.encode()) == p


def _mgmt(d: Draw) -> bytes:
    from ib import addr, mgmt, sa

    gid = addr.gid(0xFE80 << 48, GUID + d.below(3))
    kind = d.choice(list(mgmt.Kind))
    if kind in (mgmt.Kind.MC_JOIN, mgmt.Kind.MC_LEAVE, mgmt.Kind.MC_REPLY):
        body = mgmt.masked_body(d.int(4), sa.MCMemberRecord(mgid=addr.mgid_ipv4("224.0.0.1", d.int(2)), port_gid=gid,
                                                             qkey=d.int(4), pkey=d.int(2), join_state=d.bits(4)).encode())
    elif kind in (mgmt.Kind.PATH_GET, mgmt.Kind.PATH_REPLY):
        body = mgmt.masked_body(d.int(4), sa.PathRecord(dgid=addr.gid(0xFE80 << 48, GUID + d.below(3)), sgid=gid,
                                                         pkey=d.int(2)).encode())
    elif kind == mgmt.Kind.REGISTER:
        body = mgmt.register_body(GUID + d.below(3), d.int(8))
    elif kind == mgmt.Kind.SWITCH_REPORT:
        body = mgmt.SwitchReport(d.int(8), d.int(4), d.int(4), ((1 + d.below(62), GUID, 1, d.below(3)),)).encode()
    else:
        body = d.take(d.below(60))
    raw = mgmt.Mgmt(kind, d.int(8), d.int(8), d.choice(list(mgmt.Status)), body).encode()
    return mutate_bytes(d, raw, offsets=[3, 4, 5]) if d.bool() else raw


@target("ib.sm", seeds=[b"", b"\x03" * 60, b"\x05" * 120])
def ib_sm(data: bytes) -> None:
    """SmCore.on_datagram and its timers on management datagrams (registrations, SA queries, joins, reports)."""
    from ib.partitions import Partition
    from ib.smcore import SmCore

    d = Draw(data)
    sm = SmCore(1, [Partition("default", 0x7FFF, all="full"), Partition("red", 1, all="limited")])
    now = 0.0
    for _ in range(1 + d.below(8)):
        sm.on_datagram(_mgmt(d), ("h", d.below(3)), now)
        now += d.below(10)
        sm.handle_timer(now)
        sm.outgoing()
        sm.status()


@target("ib.port", seeds=[b"", b"\x02" * 80, b"\x07" * 200])
def ib_port(data: bytes) -> None:
    """PortCore fed SM replies, cable datagrams and TAP frames (ARP/IPv6/other), with timers."""
    from ib import mgmt
    from ib.portcore import PortCore

    d = Draw(data)
    core = PortCore(GUID, GUID, [("ib0", None), ("ib0.8001", 0x8001)])
    info = mgmt.PortInfo(2 + d.below(3), 1, 0xFE80 << 48, (0xFFFF, 0x8001), d.bool()).encode()
    core.on_sm(mgmt.Mgmt(mgmt.Kind.REGISTER_REPLY, 0, 1, body=info).encode(), 0.0)
    now = 0.0
    for _ in range(1 + d.below(8)):
        which = d.below(3)
        if which == 0:
            core.on_sm(_mgmt(d), now)
        elif which == 1:
            core.on_cable(_ud(d), now)
        else:
            etype = d.choice([b"\x08\x06", b"\x86\xdd", b"\x08\x00", d.take(2).ljust(2, b"\0")])
            core.on_tap(d.choice(["ib0", "ib0.8001"]), d.take(12).ljust(12, b"\0") + etype + d.take(d.below(100)), now)
        now += d.below(5) * 0.5
        core.handle_timer(now)
        core.outgoing()
    core.status(), core.neighbours(), core.groups()


@target("ib.switch", seeds=[b"", b"\x01" * 50])
def ib_switch(data: bytes) -> None:
    """SwitchCore forwarding and table updates on built-then-mutated datagrams."""
    from ib.switchcore import SwitchCore

    d = Draw(data)
    sw = SwitchCore(0x1001, [1, 2, 3])
    for _ in range(1 + d.below(8)):
        if d.bool():
            sw.on_sm(_mgmt(d))
        else:
            for port, _out in sw.on_cable(1 + d.below(3), _ud(d), 0.0):
                assert port in (1, 2, 3)
    sw.status()


@target("ib.fastpath", seeds=[b"", b"\x04" * 80, b"\x00\x01" * 120])
def ib_fastpath(data: bytes) -> None:
    """ib/_ibfast.c's per-packet functions on built-then-mutated UD packets and TAP frames:
    whatever it carries must be what the Python codec and the port core's rules give."""
    from ib import _ibfast, addr, packet
    from ib.partitions import may_talk

    d = Draw(data)
    lid, mac, qpn, pkey, qkey, mtu = 2 + d.below(3), d.take(6).ljust(6, b"\x02"), 0x48, d.choice([0xFFFF, 0x7FFF]), \
        0xB1B, d.choice([2044, 100])
    port = _ibfast.Port(-1, "127.0.0.1", 9)
    port.configure(lid, d.bool(), mac, [(-1, d.bool(), qpn, pkey, qkey, mtu)])
    dst = addr.remac(qpn, 3)
    port.set_neighbours([(0, dst, 3, qpn, d.below(16))])
    for _ in range(1 + d.below(6)):
        if d.bool():
            p = packet.UdPacket(slid=d.int(2), dlid=d.choice([lid, d.int(2)]), pkey=d.choice([pkey, d.int(2)]),
                                dqpn=d.choice([qpn, d.int(3)]), sqpn=d.int(3), qkey=d.choice([qkey, d.int(4)]),
                                payload=d.choice([b"\x08\x00\x00\x00", b"\x86\xdd\x00\x00", d.take(4)])
                                + d.take(d.below(120)))
            raw = p.encode()
            if d.bool():
                raw = mutate_bytes(d, raw, offsets=[0, 1, 2, 4, 5, 9, 10, 20])
            r = port.rx(raw)
            if r is not None:  # carried: a packet the core would deliver, rewritten as eIPoIB does
                q = packet.decode(raw)
                assert q.grh is None and q.dlid == lid and q.dqpn == qpn and may_talk(q.pkey, pkey)
                assert q.qkey == qkey and 4 <= len(q.payload) <= mtu + 4
                assert r == (0, mac + addr.remac(q.sqpn, q.slid) + q.payload[:2] + q.payload[4:])
        else:
            to = d.choice([dst, d.take(6).ljust(6, b"\0")])
            frame = to + mac + d.choice([b"\x08\x00", b"\x86\xdd", d.take(2)]) + d.take(d.below(140))
            if d.bool():
                frame = mutate_bytes(d, frame, offsets=[0, 12, 13, 14, 20])
            pkt = port.tx(0, frame, 1.0)
            if pkt is not None:  # carried: the UD packet the port core would send
                q = packet.decode(pkt)
                assert frame[:6] == dst and q.dlid == 3 and q.slid == lid and q.dqpn == qpn and q.sqpn == qpn
                assert q.pkey == pkey and q.qkey == qkey and q.payload == frame[12:14] + b"\0\0" + frame[14:]
    port.counters()
    port.take_used()


@target("ib.cswitch", seeds=[b"", b"\x05" * 60, bytes(range(100))])
def ib_cswitch(data: bytes) -> None:
    """ib/_ibfast.c's Switch.route (the compiled unicast forwarding decision, through SwitchFast)
    against SwitchCore alone, on built, mutated and raw datagrams with a drawn LFT: the same
    outputs and the same switch counters."""
    from collections import Counter

    from ib import _ibfast
    from ib.fastpath import SwitchFast
    from ib.switchcore import SwitchCore

    d = Draw(data)
    ports = [1, 2, 3]
    py, core = SwitchCore(0x1001, ports), SwitchCore(0x1001, ports)
    fast = SwitchFast(core, _ibfast.Switch([(n, -1, "127.0.0.1", 9) for n in ports]))
    lids = [d.int(2) for _ in range(1 + d.below(4))] + [0xBFFF, 0xC000, 0xFFFF]
    py.lft = core.lft = {lid: d.choice([*ports, 7]) for lid in lids}  # 7: not one of this switch's ports
    fast.sync()
    for _ in range(1 + d.below(8)):
        k = d.below(4)
        if k == 0:
            raw = d.take(d.below(40))
        else:
            raw = _ud(d)
            if k == 1:
                raw = raw[:2] + d.choice(lids).to_bytes(2, "big") + raw[4:]
            elif k == 2:
                raw = mutate_bytes(d, raw, offsets=[0, 1, 2, 3])
        port = d.choice(ports)
        assert fast.on_cable(port, raw, 0.0) == py.on_cable(port, raw, 0.0), "compiled switch decided otherwise"
    c, _socks = fast.counters()
    assert +(c + core.counters) == +Counter(py.counters), "switch counters differ"


# --- the compiled switch's pump thread (Switch.start: recvmmsg with GRO, the cut into segments,
# the peer check, sw_route, sendmmsg; take_slow / resume) through real sockets -------------------
IB_PUMP_PORTS = (1, 2, 3)
IB_PUMP_RIG_INPUTS = 200  # inputs per rig before a fresh switch and thread (the rest meet earlier state)
IB_PUMP_WAIT_S = 10.0  # every datagram sent must be accounted for within this (loopback: far less; nice 19 under load)
UDP_SEGMENT = 103  # linux/udp.h
SOL_UDP = 17


class _IbPumpRig:
    def __init__(self) -> None:
        import socket

        from ib import _ibfast
        from ib.fastpath import SwitchFast
        from ib.switchcore import SwitchCore

        def sock() -> socket.socket:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("127.0.0.1", 0))
            s.setblocking(False)
            return s

        self.mine = {n: sock() for n in IB_PUMP_PORTS}  # the switch's cable sockets
        self.peer = {n: sock() for n in IB_PUMP_PORTS}  # the neighbour on each cable
        self.stranger = sock()
        self.core = SwitchCore(0x1001, list(IB_PUMP_PORTS))
        self.py = SwitchCore(0x1001, list(IB_PUMP_PORTS))  # the oracle: every datagram, no C
        self.sw = _ibfast.Switch([(n, self.mine[n].fileno(), "127.0.0.1", self.peer[n].getsockname()[1])
                                  for n in IB_PUMP_PORTS])
        self.fast = SwitchFast(self.core, self.sw)
        self.note = self.sw.start()
        self.inputs = 0
        self.strangers: dict[int, int] = {n: 0 for n in IB_PUMP_PORTS}
        self.lids: list[int] = []  # the LFT's LIDs (drawn by the first input, maybe redrawn by later ones)
        self.failed = False  # an input raised: the next one starts on a fresh rig

    def close(self) -> None:
        self.sw.stop()
        for s in [*self.mine.values(), *self.peer.values(), self.stranger]:
            s.close()


_IB_PUMP: list[_IbPumpRig] = []


def _ib_pump_rig() -> _IbPumpRig:
    if _IB_PUMP and (_IB_PUMP[0].inputs >= IB_PUMP_RIG_INPUTS or _IB_PUMP[0].failed):
        _IB_PUMP.pop().close()
    if not _IB_PUMP:
        _IB_PUMP.append(_IbPumpRig())
    return _IB_PUMP[0]


@target("ib.pump", seeds=[b"", b"\x05" * 60, bytes(range(100)), b"\x03\x01" * 120])
def ib_pump(data: bytes) -> None:
    """ib/_ibfast.c's switch pump thread (Switch.start: recvmmsg with UDP GRO, the cut into
    segments, the peer check, the LFT lookup, sendmmsg; take_slow / resume) fed hostile
    datagrams through real loopback sockets (built, mutated, raw, GSO bursts, strangers),
    against SwitchCore alone: what the thread forwards plus what the core makes of what it
    hands back is what the oracle sends, and the counters agree."""
    import errno
    import select
    import struct
    import time
    from collections import Counter

    rig = _ib_pump_rig()
    rig.inputs += 1
    rig.failed = True  # until this input passes
    d = Draw(data)
    ports = list(IB_PUMP_PORTS)
    if d.bool() or rig.inputs == 1:  # a new LFT / MFT (the SM's), into C while the thread runs
        lids = [d.int(2) for _ in range(1 + d.below(4))] + [0xBFFF, 0xC000, 0xFFFF]
        rig.py.lft = rig.core.lft = {lid: d.choice([*ports, 7]) for lid in lids}  # 7: not a port
        rig.py.mft = rig.core.mft = {0xC001: d.int(1)}
        rig.fast.sync()
        rig.lids = lids
    lids = rig.lids
    sent: dict[int, list[bytes]] = {n: [] for n in ports}
    strangers: Counter[int] = Counter()
    for _ in range(1 + d.below(10)):
        k = d.below(6)
        if k == 0:
            raw = d.take(d.below(40))
        else:
            raw = _ud(d)
            if k in (1, 4, 5):
                raw = raw[:2] + d.choice(lids).to_bytes(2, "big") + raw[4:]
            elif k == 2:
                raw = mutate_bytes(d, raw, offsets=[0, 1, 2, 3])
        port = d.choice(ports)
        if k == 5 and len(raw) >= 8:  # a GSO burst of equal segments (the last may be shorter)
            n = 2 + d.below(4)
            burst = [raw[:2] + d.choice(lids).to_bytes(2, "big") + raw[4:] for _ in range(n)]
            if d.bool():
                burst[-1] = burst[-1][: 4 + d.below(len(raw) - 4)]
            try:
                rig.peer[port].sendmsg([b"".join(burst)], [(SOL_UDP, UDP_SEGMENT, struct.pack("H", len(raw)))], 0,
                                       rig.mine[port].getsockname())
            except OSError as exc:  # no GSO here: one at a time
                assert exc.errno in (errno.EINVAL, errno.EIO, errno.ENOPROTOOPT), exc
                for b in burst:
                    rig.peer[port].sendto(b, rig.mine[port].getsockname())
            sent[port].extend(burst)
        elif d.below(6) == 5:  # not from the cable's peer: dropped and counted
            rig.stranger.sendto(raw, rig.mine[port].getsockname())
            strangers[port] += 1
        else:
            rig.peer[port].sendto(raw, rig.mine[port].getsockname())
            sent[port].append(raw)
    # what the thread forwards arrives at the out port's peer; what it hands back goes
    # through the core (as ib/switchd.py does), then the port is read again
    total = sum(map(len, sent.values()))
    forwarded: list[tuple[int, bytes]] = []
    slow: dict[int, list[bytes]] = {n: [] for n in ports}
    out: list[tuple[int, bytes]] = []
    until = time.monotonic() + IB_PUMP_WAIT_S
    poller = [rig.note, *(s.fileno() for s in rig.peer.values())]
    by_fd = {s.fileno(): n for n, s in rig.peer.items()}

    def foreign() -> Counter:
        c: Counter[int] = Counter()
        for (where, what), v in rig.sw.counters().items():
            if where.startswith("port") and what == "drop_foreign_source":
                c[int(where[4:])] = v
        return c

    want_foreign = Counter(rig.strangers) + strangers
    while len(forwarded) + sum(map(len, slow.values())) < total or +foreign() != +want_foreign:
        left = until - time.monotonic()
        assert left > 0, (f"the pump thread lost datagrams: {total} sent, {len(forwarded)} forwarded, "
                          f"{sum(map(len, slow.values()))} handed back, foreign {foreign()} != {want_foreign}")
        r, _, _ = select.select(poller, [], [], min(left, 0.05))
        for fd in r:
            if fd == rig.note:
                for number, dgram in rig.sw.take_slow():
                    slow[number].append(dgram)
                    out.extend(rig.core.on_cable(number, dgram, 0.0))
                    rig.sw.resume(number)
            else:
                while True:
                    try:
                        forwarded.append((by_fd[fd], rig.peer[by_fd[fd]].recv(70000)))
                    except BlockingIOError:
                        break
    rig.strangers = dict(want_foreign)
    assert len(forwarded) + sum(map(len, slow.values())) == total, "more out than in"
    want: list[tuple[int, bytes]] = []
    for port in ports:
        it = iter(sent[port])  # each port's hand-backs in its arrival order
        assert all(any(s == x for x in it) for s in slow[port]), f"port {port}'s hand-backs out of order"
        for raw in sent[port]:
            want.extend(rig.py.on_cable(port, raw, 0.0))
    assert not Counter(forwarded) - Counter(want), "the pump thread forwarded what the oracle does not send"
    assert Counter(forwarded + out) == Counter(want), "the pump thread and the core sent otherwise than the oracle"
    c, socks = rig.fast.counters()
    assert +(c + rig.core.counters) == +Counter(rig.py.counters), "switch counters differ"
    for n, cnt in socks.items():
        assert set(cnt) <= {"drop_foreign_source"}, f"port {n}: socket errors {cnt}"
    rig.failed = False


# --- the compiled port's pump thread (Port.start: TAP reads, recvmmsg with GRO, the peer check,
# tx/rx per packet, sendmmsg and TAP writes; take_slow / resume) through real descriptors ------------
IB_PORT_MAC = b"\x00\x02\xc9\x00\x00\x01"
IB_PORT_IFACES = ((0x48, 0xFFFF, 0xB1B, 2044), (0x49, 0x8001, 0xB1B, 1500))  # (qpn, pkey, qkey, mtu) per TAP
IB_PORT_LID = 2


class _IbPortRig:
    def __init__(self) -> None:
        import socket

        from ib import _ibfast, addr

        def udp() -> socket.socket:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("127.0.0.1", 0))
            s.setblocking(False)
            return s

        self.cable, self.peer, self.stranger = udp(), udp(), udp()
        self.taps, self.kernels = [], []  # a datagram socket pair stands for each TAP (a frame per read)
        for _ in IB_PORT_IFACES:
            tap, kernel = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            tap.setblocking(False)
            kernel.setblocking(False)
            self.taps.append(tap)
            self.kernels.append(kernel)
        self.port = _ibfast.Port(self.cable.fileno(), *self.peer.getsockname())
        self.twin = _ibfast.Port(-1, "127.0.0.1", 9)  # the oracle: the per-packet functions, no I/O
        self.neigh = [addr.remac(q, 3 + i) for i, (q, *_r) in enumerate(IB_PORT_IFACES)]
        for p, fds in ((self.port, [t.fileno() for t in self.taps]), (self.twin, [-1] * len(self.taps))):
            p.configure(IB_PORT_LID, True, IB_PORT_MAC, [(fd, True, *i) for fd, i in zip(fds, IB_PORT_IFACES)])
            p.set_neighbours([(k, self.neigh[k], 3 + k, IB_PORT_IFACES[k][0], k) for k in range(len(self.taps))])
        self.note = self.port.start(0.0, 1 + IB_PUMP_RIG_INPUTS % 7)  # a small budget: sources take turns
        self.inputs = self.strangers = 0
        self.failed = False  # an input raised: the next one starts on a fresh rig

    def close(self) -> None:
        self.port.stop()
        for s in [self.cable, self.peer, self.stranger, *self.taps, *self.kernels]:
            s.close()


_IB_PORT: list[_IbPortRig] = []


def _ib_port_rig() -> _IbPortRig:
    if _IB_PORT and (_IB_PORT[0].inputs >= IB_PUMP_RIG_INPUTS or _IB_PORT[0].failed):
        _IB_PORT.pop().close()
    if not _IB_PORT:
        _IB_PORT.append(_IbPortRig())
    return _IB_PORT[0]


@target("ib.port.pump", seeds=[b"", b"\x04" * 80, bytes(range(120)), b"\x01\x00" * 150])
def ib_port_pump(data: bytes) -> None:
    """ib/_ibfast.c's port pump thread (Port.start: TAP reads, recvmmsg with UDP GRO, the peer
    check, the per-packet tx/rx, sendmmsg and TAP writes; take_slow / resume) fed hostile TAP
    frames and UD datagrams through real descriptors (two TAPs, GSO bursts, strangers), against
    a twin Port's per-packet functions (which ib.fastpath checks against Python): the same
    packets to the cable and frames to each TAP, in order, the rest handed back in order."""
    import errno
    import select
    import struct
    import time
    from collections import Counter

    from ib import packet

    rig = _ib_port_rig()
    rig.inputs += 1
    rig.failed = True  # until this input passes
    d = Draw(data)
    lid, mac = IB_PORT_LID, IB_PORT_MAC
    want_cable: list[list[bytes]] = [[] for _ in IB_PORT_IFACES]  # per TAP (the thread takes them in turns)
    want_tap: list[list[bytes]] = [[] for _ in IB_PORT_IFACES]
    want_slow: dict[int, list[bytes]] = {}
    sent = strangers = 0
    to = rig.cable.getsockname()

    def ud() -> bytes:
        k = d.below(len(IB_PORT_IFACES))
        qpn, pkey, qkey, _mtu = IB_PORT_IFACES[k]
        p = packet.UdPacket(slid=d.choice([3, 4, d.int(2)]), dlid=d.choice([lid, lid, d.int(2)]),
                            pkey=d.choice([pkey, pkey, d.int(2)]), dqpn=d.choice([qpn, qpn, d.int(3)]),
                            sqpn=d.choice([qpn, d.int(3)]), qkey=d.choice([qkey, qkey, d.int(4)]),
                            payload=d.choice([b"\x08\x00\x00\x00", b"\x86\xdd\x00\x00", d.take(4)])
                            + d.take(d.below(200)))
        raw = p.encode()
        return mutate_bytes(d, raw, offsets=[0, 1, 2, 4, 5, 9, 10, 20]) if d.below(4) == 0 else raw

    def expect_rx(dgram: bytes) -> None:
        r = rig.twin.rx(dgram)
        if r is None:
            want_slow.setdefault(-1, []).append(dgram)
        else:
            want_tap[r[0]].append(r[1])

    for _ in range(1 + d.below(10)):
        what = d.below(8)
        if what < 3:  # a TAP frame
            k = d.below(len(IB_PORT_IFACES))
            frame = (d.choice([rig.neigh[k], rig.neigh[k], rig.neigh[1 - k], d.take(6).ljust(6, b"\0")]) + mac
                     + d.choice([b"\x08\x00", b"\x86\xdd", b"\x08\x06", d.take(2)]) + d.take(d.below(200)))
            if d.below(4) == 0:
                frame = mutate_bytes(d, frame, offsets=[0, 12, 13, 14, 20])
            if not frame:
                continue
            rig.kernels[k].send(frame)
            pkt = rig.twin.tx(k, frame, 0.0)
            if pkt is None:
                want_slow.setdefault(k, []).append(frame)
            else:
                want_cable[k].append(pkt)
            sent += 1
        elif what == 3 and d.bool():  # a GSO burst of equal segments
            raw = ud()
            if len(raw) < 8:
                continue
            burst = [raw] * (2 + d.below(3))
            try:
                rig.peer.sendmsg([b"".join(burst)], [(SOL_UDP, UDP_SEGMENT, struct.pack("H", len(raw)))], 0, to)
            except OSError as exc:
                assert exc.errno in (errno.EINVAL, errno.EIO, errno.ENOPROTOOPT), exc
                for b in burst:
                    rig.peer.sendto(b, to)
            for b in burst:
                expect_rx(b)
            sent += len(burst)
        elif what == 3:  # a stranger's: counted, not carried
            rig.stranger.sendto(ud(), to)
            strangers += 1
        else:
            raw = ud() if what < 7 else d.take(d.below(60))
            rig.peer.sendto(raw, to)
            expect_rx(raw)
            sent += 1
    got_cable: list[bytes] = []  # in the order sent: each TAP's packets in order, TAPs interleaved
    got_tap: list[list[bytes]] = [[] for _ in IB_PORT_IFACES]
    got_slow: dict[int, list[bytes]] = {}
    until = time.monotonic() + IB_PUMP_WAIT_S
    fds = {rig.note: None, rig.peer.fileno(): "cable", **{k.fileno(): i for i, k in enumerate(rig.kernels)}}

    def foreign() -> int:
        return rig.port.counters().get(("cable", "drop_foreign_source"), 0)

    def done() -> int:
        return len(got_cable) + sum(map(len, got_tap)) + sum(map(len, got_slow.values()))

    while done() < sent or foreign() < rig.strangers + strangers:
        left = until - time.monotonic()
        assert left > 0, (f"the port thread lost packets: {sent} sent, {len(got_cable)} to the cable, "
                          f"{[len(t) for t in got_tap]} to the TAPs, {got_slow} handed back; foreign {foreign()}")
        r, _, _ = select.select(list(fds), [], [], min(left, 0.05))
        for fd in r:
            where = fds[fd]
            if where is None:
                for src, x in rig.port.take_slow():
                    got_slow.setdefault(src, []).append(x)
                    rig.port.resume(src)
                continue
            s = rig.peer if where == "cable" else rig.kernels[where]
            while True:
                try:
                    x = s.recv(70000)
                except BlockingIOError:
                    break
                if isinstance(where, int):
                    got_tap[where].append(x)
                else:
                    got_cable.append(x)
    rig.strangers += strangers
    assert done() == sent and foreign() == rig.strangers, "more out than in"
    assert not Counter(got_cable) - Counter(sum(want_cable, [])), "the thread sent a packet the twin would not"
    by_tap: list[list[bytes]] = [[] for _ in IB_PORT_IFACES]
    qpns = [i[0] for i in IB_PORT_IFACES]
    for pkt in got_cable:
        by_tap[qpns.index(packet.decode(pkt).sqpn)].append(pkt)
    assert by_tap == want_cable, "the thread's packets to the cable differ from the twin's, or their order"
    assert got_tap == want_tap, "the thread's frames to the TAPs differ from the twin's, or their order"
    assert got_slow == want_slow, "the thread handed back otherwise than the twin, or out of order"
    mine, twin = rig.port.counters(), rig.twin.counters()
    assert {k: v for k, v in mine.items() if k[0].startswith("iface")} == \
        {k: v for k, v in twin.items() if k[0].startswith("iface")}, "per-interface counts differ from the twin's"
    errs = {k: v for k, v in mine.items() if k[0] in ("send", "recv") or k[0].startswith("tap_")}
    assert not errs, f"descriptor errors {errs}"
    rig.failed = False
