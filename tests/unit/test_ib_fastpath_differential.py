"""ib/_ibfast.c against its oracle, the Python cores: the same subnet (tests/unit/ibnet.py)
run twice, once with every port core alone and once with each behind the compiled path
(ib.fastpath.PortFast, C first and the core for the rest), fed the same Hypothesis-drawn
sequence of TAP frames (resolved, unknown and multicast destinations, ARP, probes, IPv6,
junk), cable datagrams (valid, corrupted, re-keyed) and time (reaping, SM restart).
After every step: the same bytes on every cable, the same frames on every TAP, the same
counters, the same shadow-ARP tables and REMAC LRU order."""

from __future__ import annotations

import struct
from collections import Counter

from hypothesis import HealthCheck, given, settings, strategies as st

from ib import _ibfast, addr, packet
from ib.constants import QPN_BASE
from ib.fastpath import PortFast
from tests.unit.ibnet import Net, arp_request, ip_frame
from tests.unit.test_ib_fabric_core import LINKS, resolve


class Recorded:
    """A port core (or its fast wrapper) whose cable datagrams are recorded."""

    def __init__(self, core, fast: bool) -> None:
        self.core = core
        self.fast = PortFast(core, _ibfast.Port(-1, "127.0.0.1", 9)) if fast else None
        self.sent: list[bytes] = []
        if self.fast:
            self.fast.sync()

    def __getattr__(self, name):
        return getattr(self.core, name)

    def _call(self, fn, *args) -> None:
        if self.fast:
            self.fast.settle()
        fn(*args)
        if self.fast:
            self.fast.sync()

    def on_tap(self, name, frame, now):
        if self.fast:
            self.fast.on_tap(name, frame, now)
        else:
            self.core.on_tap(name, frame, now)

    def on_cable(self, data, now):
        if self.fast:
            self.fast.on_cable(data, now)
        else:
            self.core.on_cable(data, now)

    def on_sm(self, data, now):
        self._call(self.core.on_sm, data, now)

    def handle_timer(self, now):
        self._call(self.core.handle_timer, now)

    def set_kernel_groups(self, name, mgids, now):
        self._call(self.core.set_kernel_groups, name, mgids, now)

    def outgoing(self):
        out = self.core.outgoing()
        self.sent += [item[1] for item in out if item[0] == "cable"]
        return out

    def counters_all(self) -> Counter:
        c = Counter(self.core.counters)
        if self.fast:
            c.update(self.fast.counters()[0])
        return +c

    def state(self) -> list:
        if self.fast:
            self.fast.settle()
        return [(list(i.tr.remacs.by_mac.items()) if i.tr else None,
                 [(k, n.state, n.used, list(n.queue), n.path) for k, n in i.shadow.neighs.items()])
                for i in self.core.ifaces]


def build(fast: bool) -> Net:
    net = Net({1: [1, 2, 3], 2: [1, 2, 3]}, {h: [("ib0", None)] for h in (1, 2, 3)}, LINKS)
    net.hosts = {h: Recorded(c, fast) for h, c in net.hosts.items()}
    net.run(3.0)
    resolve(net, 1, 2)
    resolve(net, 3, 1)
    return net


def snapshot(net: Net) -> tuple:
    return ({h: (r.sent, +r.counters_all(), r.state()) for h, r in net.hosts.items()},
            {k: list(v) for k, v in net.tap.items()})


def clear(net: Net) -> None:
    for r in net.hosts.values():
        r.sent = []
    for k in net.tap:
        net.tap[k] = []


def ipv6_frame(src_mac: bytes, dst_mac: bytes, nh: int, data: bytes) -> bytes:
    hdr = struct.pack("!IHBB16s16s", 6 << 28, len(data), nh, 64, b"\xfd" + bytes(15), b"\xfd" + bytes(14) + b"\x02")
    return dst_mac + src_mac + b"\x86\xdd" + hdr + data


def rekeyed(net: Net, src: int, dst: int, payload: bytes, **over) -> bytes:
    """A UD packet from host src's ib0 to host dst's, fields overridden, ICRC recomputed."""
    s, d = net.hosts[src].core, net.hosts[dst].core
    f = dict(slid=s.lid, dlid=d.lid, pkey=d.ifaces[0].pkey, dqpn=QPN_BASE, sqpn=QPN_BASE, qkey=d.ifaces[0].qkey,
             payload=payload)
    f.update(over)
    return packet.encode(packet.UdPacket(**f))


HOSTS = st.sampled_from([1, 2, 3])
BODY = st.binary(max_size=80)
OPS = st.one_of(
    st.tuples(st.just("ip"), HOSTS, HOSTS, BODY),
    st.tuples(st.just("ip_big"), HOSTS, HOSTS, st.integers(1900, 2100)),
    st.tuples(st.sampled_from(["ip6", "ip6_v4hdr"]), HOSTS, HOSTS, st.sampled_from([17, 58, 6]),
              st.one_of(BODY, st.builds(lambda t, b: bytes([t]) + b, st.integers(128, 140), BODY))),
    st.tuples(st.just("arp"), HOSTS, HOSTS),
    st.tuples(st.just("probe"), HOSTS, HOSTS),
    st.tuples(st.just("junk_tap"), HOSTS, st.binary(max_size=60)),
    st.tuples(st.just("unknown_mac"), HOSTS, st.binary(min_size=6, max_size=6), BODY),
    st.tuples(st.just("bcast_ip"), HOSTS, BODY),
    st.tuples(st.just("cable"), HOSTS, HOSTS, BODY, st.sampled_from(["ok", "flip", "cut", "grow", "pkey", "limited",
                                                                      "qkey", "dqpn", "dlid", "lnh", "etype"]),
              st.integers(0, 200)),
    st.tuples(st.just("junk_cable"), HOSTS, st.binary(max_size=120)),
    st.tuples(st.just("time"), st.sampled_from([0.1, 1.0, 30.0, 61.0])),
    st.tuples(st.just("sm_restart"), st.integers(2, 9)),
)


def apply(net: Net, op: tuple) -> None:
    kind = op[0]
    if kind in ("ip", "ip_big", "ip6", "ip6_v4hdr", "probe"):
        a, b = op[1], op[2]
        dst = addr.remac(QPN_BASE, net.hosts[b].core.lid)
        if kind == "ip":
            frame = ip_frame(net.mac(a), dst, f"10.0.0.{a}", f"10.0.0.{b}", op[3])
        elif kind == "ip_big":
            frame = ip_frame(net.mac(a), dst, f"10.0.0.{a}", f"10.0.0.{b}", bytes(op[3] - 20))
        elif kind == "ip6":
            frame = ipv6_frame(net.mac(a), dst, op[3], op[4])
        elif kind == "ip6_v4hdr":  # an IPv6 Type whose header is not version 6
            frame = ipv6_frame(net.mac(a), dst, op[3], op[4])
            frame = frame[:14] + b"\x40" + frame[15:]
        else:
            frame = arp_request(net.mac(a), f"10.0.0.{a}", f"10.0.0.{b}")
            frame = dst + frame[6:]
        net.send(a, "ib0", frame)
    elif kind == "arp":
        net.send(op[1], "ib0", arp_request(net.mac(op[1]), f"10.0.0.{op[1]}", f"10.0.0.{op[2]}"))
    elif kind == "junk_tap":
        net.send(op[1], "ib0", op[2])
    elif kind == "unknown_mac":
        net.send(op[1], "ib0", ip_frame(net.mac(op[1]), op[2], "10.0.0.1", "10.0.0.9", op[3]))
    elif kind == "bcast_ip":
        net.send(op[1], "ib0", ip_frame(net.mac(op[1]), b"\xff" * 6, "10.0.0.1", "10.0.0.255", op[2]))
    elif kind in ("cable", "junk_cable"):
        b = op[1]
        if kind == "junk_cable":
            data = op[2]
        else:
            a, body, how, k = op[2], op[3], op[4], op[5]
            payload = b"\x08\x00\x00\x00" + body
            over = {"pkey": {"pkey": 0x7FFF}, "limited": {"pkey": 0x0001}, "qkey": {"qkey": 0x1234},
                    "dqpn": {"dqpn": QPN_BASE + 1}, "dlid": {"dlid": 0x77},
                    }.get(how, {})
            if how == "etype":
                payload = b"\x88\xb5\x00\x00" + body
            data = bytearray(rekeyed(net, a, b, payload, **over))
            if how == "flip":
                data[k % len(data)] ^= 1 << (k % 8)
            elif how == "cut":
                del data[k % len(data):]
            elif how == "grow":
                data += bytes(4)
            elif how == "lnh":
                data[1] ^= 1
            data = bytes(data)
        net.hosts[b].on_cable(data, net.now)
        net._drain_host(b)
        net.settle()
    elif kind == "time":
        net.run(op[1])
    elif kind == "sm_restart":
        net.kill_sm()
        net.start_sm(op[1])
        net.run(3.0)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(OPS, min_size=1, max_size=12))
def test_same_bytes_counters_and_state_as_the_python_cores(ops):
    pure, fast = build(False), build(True)
    assert snapshot(pure) == snapshot(fast)
    for op in ops:
        clear(pure)
        clear(fast)
        apply(pure, op)
        apply(fast, op)
        assert snapshot(pure) == snapshot(fast), op


def test_the_fast_path_carries_the_steady_state():
    """Resolved unicast IPv4 goes through C both ways, nothing else does."""
    net = build(True)
    before = Counter(net.hosts[1].core.counters)
    dst = addr.remac(QPN_BASE, net.hosts[2].core.lid)
    for k in range(5):
        net.send(1, "ib0", ip_frame(net.mac(1), dst, "10.0.0.1", "10.0.0.2", b"x%d" % k))
    assert [f[-2:] for f in net.frames(2) if f[12:14] == b"\x08\x00"] == [b"x%d" % k for k in range(5)]
    c1 = net.hosts[1].fast.counters()[0]
    c2 = net.hosts[2].fast.counters()[0]
    assert c1["ib0_tx_frames"] == 5 and c2["ib0_rx_frames"] == 5
    assert net.hosts[1].core.counters == before  # the Python core saw none of them


def test_c_icrc_is_the_python_icrc():
    @settings(max_examples=300, deadline=None)
    @given(st.binary(min_size=20, max_size=300))
    def check(body):
        assert _ibfast.icrc(body) == packet.icrc(body, False)

    check()


CASES = [("cable", 2, 1, b"abcdefgh", how, 13) for how in
         ("ok", "flip", "cut", "grow", "pkey", "limited", "qkey", "dqpn", "dlid", "lnh", "etype")] + [
    ("ip", 1, 2, b"hello"), ("ip_big", 1, 2, 2030), ("ip_big", 1, 2, 2060), ("ip6", 1, 2, 17, b"u"),
    ("ip6", 1, 2, 58, b"\x80\x00\x00\x00"), ("ip6", 1, 2, 58, b"\x87" + bytes(23)), ("ip6", 1, 2, 58, b"\x87"),
    ("ip6_v4hdr", 1, 2, 58, b"\x87" + bytes(23)), ("probe", 1, 2), ("junk_tap", 1, b"\x00" * 13),
    ("unknown_mac", 1, b"\x02\x00\x00\x48\x00\x09", b"z"), ("bcast_ip", 1, b"b"), ("junk_cable", 1, b"\x00" * 40)]


def test_each_kind_of_frame_and_datagram_alone():
    """Every case once, deterministically (the drawn sequences above mix them)."""
    pure, fast = build(False), build(True)
    for op in CASES:
        clear(pure)
        clear(fast)
        apply(pure, op)
        apply(fast, op)
        assert snapshot(pure) == snapshot(fast), op
        apply(pure, ("ip", 1, 2, b"after"))  # and the steady state still agrees after each
        apply(fast, ("ip", 1, 2, b"after"))
        assert snapshot(pure) == snapshot(fast), op


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.dictionaries(st.integers(0, 8) | st.integers(0, 0xFFFF), st.integers(0, 5), max_size=12),
       st.lists(st.tuples(st.integers(1, 3), st.integers(0, 8) | st.integers(0xBFFE, 0xFFFF), st.binary(max_size=40)),
                max_size=20),
       st.lists(st.tuples(st.integers(1, 3), st.binary(max_size=12)), max_size=5))
def test_switch_forwarding_is_the_switch_core_s(lft, packets, junk):
    """ib-switch: C first for unicast by DLID, the core for the rest, against the core alone:
    the same (out port, bytes) for every datagram and the same counters."""
    from ib.fastpath import SwitchFast
    from ib.switchcore import SwitchCore

    pure, core = SwitchCore(0x1001, [1, 2, 3]), SwitchCore(0x1001, [1, 2, 3])
    for c in (pure, core):
        c.lft = {lid: p for lid, p in lft.items() if p in c.ports}
    fast = SwitchFast(core, _ibfast.Switch([(n, -1, "127.0.0.1", 9) for n in (1, 2, 3)]))
    fast.sync()
    datagrams = [(port, packet.UdPacket(slid=1, dlid=dlid, pkey=0xFFFF, dqpn=QPN_BASE, sqpn=QPN_BASE, qkey=1,
                                        payload=body).encode()) for port, dlid, body in packets] + junk
    for port, d in datagrams:
        assert fast.on_cable(port, d, 0.0) == pure.on_cable(port, d, 0.0), (port, d)
    assert +(core.counters + fast.counters()[0]) == +pure.counters
