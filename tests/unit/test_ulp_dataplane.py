"""ULP clients served by gsnd's data plane (daemons/_ulploop.h): SENDs read and queued
in C, RECVs written from C, and every other case handed to the Python server, which
answers it as when it reads the socket itself.  Two Endpoints on real descriptors
(tests/unit/dprig.py); the clients are Unix SEQPACKET socketpairs."""

from __future__ import annotations

import socket
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from daemons import constants as C
from daemons.link.clink import UlpClosed, UlpFrameIn
from daemons.gsnd.dataplane import EVENTS
from daemons.gsnd.delivery import settle
from daemons.io.ulp import UlpServer, _Client
from daemons.wire.message import max_payload
from daemons.wire.ulp import HEADER, Frame, Op
from tests.unit.dprig import ULAS, Rig

ET = 0x88B5
HIGH = 1 << 30


class Pair:
    """A client connection: ``gsnd`` is gsnd's end (SO_PASSCRED, as accepted ones have),
    ``app`` the client's."""

    def __init__(self, buf: int = 1 << 20) -> None:
        self.gsnd, self.app = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.gsnd.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        for s in (self.gsnd, self.app):
            s.setblocking(False)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buf)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buf)

    def frames(self) -> list[Frame]:
        out = []
        while True:
            try:
                out.append(Frame.decode(self.app.recv(C.ULP_MAX_PAYLOAD + HEADER.size + 1)))
            except BlockingIOError:
                return out

    def close(self) -> None:
        self.gsnd.close()
        self.app.close()


@pytest.fixture
def rig():
    r = Rig()
    r.bring_up()
    pairs: list[Pair] = []
    r.pair = lambda *a: pairs.append(Pair(*a)) or pairs[-1]
    yield r
    for p in pairs:
        p.close()
    r.close()


def steps(rig, n: int = 30) -> None:
    for _ in range(n):
        rig.step()


def run(rig, i: int, seconds: float = 0.01, high: int = HIGH):
    """dp_run on side i (real time, which the rig's clock follows); the events it queued."""
    t0 = time.monotonic()
    ran = rig.dps[i].run(rig.now, rig.now + seconds, high, -1)
    rig.now += time.monotonic() - t0
    rig.eps[i].process(rig.now)
    return ran, rig.eps[i].events()


def server(rig, i: int) -> UlpServer:
    """The Python server of side i, not serving a socket: the tests hand it clients."""
    ep = rig.eps[i]

    def send(vc, ula, ethertype, payload):
        return None if ep.send(vc, ula, ethertype, payload) else "link_down"

    async def wait_room(vc):
        raise AssertionError("frames the data plane hands up never wait for room")

    srv = UlpServer("unused", send, wait_room, lambda: Frame(Op.STATUS, 1, 0, ep.ula), lambda: None)
    srv.use_dataplane(rig.dps[i])
    return srv


def attach(srv: UlpServer, pair: Pair, *ethertypes: int) -> _Client:
    client = _Client(pair.gsnd)
    client.ethertypes.update(ethertypes)
    srv.clients.append(client)
    srv.delivery.add(client)
    srv._sync(client)
    return client


# --- RECV from C ---------------------------------------------------------------------

def test_a_message_one_client_binds_is_written_from_c_on_every_vc(rig):
    p = rig.pair()
    rig.dps[1].ulp_client(p.gsnd.fileno(), {ET, 0x1234}, False, True)
    sent = [(vc, bytes([vc]) * (100 + 3000 * vc)) for vc in range(4)]
    for vc, payload in sent:
        assert rig.eps[0].send(vc, ULAS[1], ET, payload)
    steps(rig)
    assert p.frames() == [Frame(Op.RECV, vc, ET, ULAS[0], payload) for vc, payload in sent]
    assert rig.messages[1] == []  # none went up to Python
    st_ = rig.eps[1].status()
    assert st_["per_vc"]["rx_messages"] == [1, 1, 1, 1]
    assert st_["per_vc"]["rx_bytes"] == [len(pl) for _, pl in sent]
    assert rig.dps[1].counters("ulp.delivery", {}) == {"rx_messages": 4, "rx_direct": 4}


def test_two_bound_clients_a_held_client_ip_and_notices_go_up_to_python(rig):
    a, b = rig.pair(), rig.pair()
    dp = rig.dps[1]
    dp.ulp_client(a.gsnd.fileno(), {ET, 0x88B7}, True, True)
    dp.ulp_client(b.gsnd.fileno(), {ET, 0x1111, C.ETHERTYPE_IPV4}, True, False)
    rig.eps[0].send(3, ULAS[1], ET, b"both bind it")
    rig.eps[0].send(3, ULAS[1], 0x1111, b"b is held by Python")
    rig.eps[0].send(3, ULAS[1], C.ETHERTYPE_IPV4, b"IP on VC3")
    rig.eps[0].send(0, ULAS[1], 0x88B7, C.ULP_NOTICE_PROTOCOL + b"\x01\x01\x03\x88\xb5\0\0\0\x01")
    rig.eps[0].send(0, ULAS[1], 0x88B7, b"OUI-extended, not a notice")
    steps(rig)
    assert sorted(m.payload for m in rig.messages[1]) == sorted([  # VCs are scheduled, not FIFO
        b"both bind it", b"b is held by Python", b"IP on VC3", C.ULP_NOTICE_PROTOCOL + b"\x01\x01\x03\x88\xb5\0\0\0\x01"])
    assert [f.payload for f in a.frames()] == [b"OUI-extended, not a notice"]
    assert b.frames() == []


def test_a_full_client_socket_goes_to_python_in_order_and_direct_stays_off(rig):
    p = rig.pair(8192)
    dp = rig.dps[1]
    dp.ulp_client(p.gsnd.fileno(), {ET}, False, True)
    for k in range(12):
        rig.eps[0].send(2, ULAS[1], ET, bytes([k]) * 3000)
    steps(rig)
    direct = p.frames()
    assert 0 < len(direct) < 12
    # the rest came up to Python, in order, and nothing after the first refusal was written from C
    assert [f.payload[0] for f in direct] + [m.payload[0] for m in rig.messages[1]] == list(range(12))
    counters = dp.counters("ulp.delivery", {})
    assert counters["rx_direct"] == len(direct) and counters["rx_direct_full_to_python"] == 1
    rig.eps[0].send(2, ULAS[1], ET, b"after the drain")
    steps(rig)
    assert p.frames() == [] and rig.messages[1][-1].payload == b"after the drain"


def test_a_full_client_socket_holds_the_vcs_credits_as_the_python_path_does(rig):
    srv = server(rig, 1)
    p = rig.pair(16384)
    client = attach(srv, p, ET)
    ep0, ep1 = rig.eps
    seen = 0

    def deliver():
        nonlocal seen
        for msg in rig.messages[1][seen:]:
            srv.deliver(msg, rig.now)
        seen = len(rig.messages[1])
        settle(srv.delivery, ep1, rig.now)

    for k in range(40):
        ep0.send(3, ULAS[1], ET, k.to_bytes(2, "big") * 2000)
        rig.step()
        deliver()
    steps(rig)
    deliver()
    held = srv.delivery.backlog(client)
    assert held > 0 and ep1.holding[3]  # the Delivery holds them, and the VC's credits
    assert ep0.link.credits[3] < ep1.link.ledger.buffers[3]
    got = [int.from_bytes(f.payload[:2], "big") for f in p.frames()]
    while srv.delivery.backlog(client):
        srv.delivery.pump(client, rig.now, srv._send_frame)
        got += [int.from_bytes(f.payload[:2], "big") for f in p.frames()]
    srv._sync(client)
    settle(srv.delivery, ep1, rig.now)
    steps(rig)
    assert not ep1.holding[3] and ep0.link.credits[3] == ep1.link.ledger.buffers[3]
    ep0.send(3, ULAS[1], ET, b"\xff\xff direct again")
    steps(rig)
    got += [int.from_bytes(f.payload[:2], "big") for f in p.frames()]
    assert got == list(range(40)) + [0xFFFF]
    assert seen == len(rig.messages[1])


# --- SEND from C ---------------------------------------------------------------------

def test_sends_are_read_and_queued_in_c_on_every_vc(rig):
    tx, rx = rig.pair(), rig.pair()
    srv = server(rig, 0)
    attach(srv, tx)
    rig.dps[1].ulp_client(rx.gsnd.fileno(), {ET}, False, True)
    sent = [Frame(Op.SEND, vc, ET, ULAS[1], bytes([vc]) * (10 + 5000 * vc)) for vc in range(4)]
    for f in sent:
        tx.app.send(f.encode())
    ran, events = run(rig, 0)
    assert events == []  # nothing for Python
    steps(rig)
    assert rx.frames() == [Frame(Op.RECV, f.vc, ET, ULAS[0], f.payload) for f in sent]
    assert rig.dps[0].counters("ulp", srv.counters) == {"tx_messages": 4, "tx_direct": 4}
    assert rig.eps[0].status()["per_vc"]["tx_messages"] == [1, 1, 1, 1]


def test_a_request_response_client_read_one_frame_at_a_time_loses_and_reorders_nothing(rig):
    """A client whose socket held one frame is read without the recvmsg that finds it
    empty; when it then sends a burst, or a burst and its end, every frame is read in
    the same dp_run call, in order, and its end is seen."""
    tx, rx = rig.pair(), rig.pair()
    srv = server(rig, 0)
    attach(srv, tx)
    rig.dps[1].ulp_client(rx.gsnd.fileno(), {ET}, False, True)
    for i in range(3):  # request/response: one frame, then nothing until the answer
        tx.app.send(Frame(Op.SEND, 1, ET, ULAS[1], bytes([i])).encode())
        ran, events = run(rig, 0, 0.005)
        assert events == []
        steps(rig)
        assert rx.frames() == [Frame(Op.RECV, 1, ET, ULAS[0], bytes([i]))]
    burst = [Frame(Op.SEND, i % 4, ET, ULAS[1], bytes([i]) * 100) for i in range(50)]
    for f in burst:
        tx.app.send(f.encode())
    ran, events = run(rig, 0, 0.02)
    assert events == [] and rig.dps[0].counters("ulp", srv.counters)["tx_direct"] == 53
    tx.app.send(Frame(Op.SEND, 1, ET, ULAS[1], b"a").encode())  # one frame: read alone again
    run(rig, 0, 0.005)
    for f in burst[:5]:
        tx.app.send(f.encode())
    tx.app.close()
    ran, events = run(rig, 0, 0.05)
    assert events == [UlpClosed(tx.gsnd.fileno())]
    assert rig.dps[0].counters("ulp", srv.counters)["tx_direct"] == 59
    steps(rig, 60)
    got = rx.frames()
    want = [Frame(Op.RECV, f.vc, ET, ULAS[0], f.payload) for f in [*burst, Frame(Op.SEND, 1, ET, ULAS[1], b"a"),
                                                                   *burst[:5]]]
    assert [f for f in got if f.vc == 1] == [f for f in want if f.vc == 1]
    assert sorted(got, key=lambda f: f.vc) == sorted(want, key=lambda f: f.vc)  # in order within each VC


# payload sizes about the edges of _ulpraw.h: encoded at once below 1024 micropackets
# (32,713 bytes), queued raw from the pool buffer above, spilled into the receive buffer
# past 65,618 bytes
RAW_EDGES = st.one_of(st.integers(0, 40), st.integers(32700, 32730), st.integers(65600, 65640),
                      st.sampled_from([131208, 200_000, 1 << 20]))


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.integers(0, 3), RAW_EDGES, st.integers(0, 255)), min_size=1, max_size=5))
def test_sends_of_any_size_read_raw_or_encoded_arrive_whole_and_once(sends):
    r = Rig()
    r.bring_up()
    tx, rx = Pair(4 << 20), Pair(4 << 20)
    try:
        srv = server(r, 0)
        attach(srv, tx)
        r.dps[1].ulp_client(rx.gsnd.fileno(), {ET}, False, True)
        sent = [Frame(Op.SEND, vc, ET, ULAS[1], bytes([b]) * min(size, max_payload(vc)))
                for vc, size, b in sends]
        for f in sent:
            tx.app.send(f.encode())
        got: list[Frame] = []
        for _ in range(200):
            ran, events = run(r, 0, 0.005)
            assert events == []  # every one queued in C
            steps(r, 5)
            got += rx.frames()
            if len(got) >= len(sent):
                break
        by_vc = lambda f: f.vc  # noqa: E731  (in order within a VC; the VCs interleave)
        assert sorted(got, key=by_vc) == sorted((Frame(Op.RECV, f.vc, ET, ULAS[0], f.payload) for f in sent), key=by_vc)
        assert r.dps[0].counters("ulp", srv.counters)["tx_direct"] == len(sent)
    finally:
        tx.close()
        rx.close()
        r.close()


def test_privileged_ethertypes_are_sent_only_by_privileged_clients(rig):
    srv = server(rig, 0)
    plain, root = rig.pair(), rig.pair()
    cp, cr = attach(srv, plain), attach(srv, root)
    cp.privileged, cr.privileged = False, True  # a socketpair's peer is this (root or not) process
    srv._sync(cp), srv._sync(cr)
    for p in (plain, root):
        p.app.send(Frame(Op.SEND, 1, C.ETHERTYPE_IPV4, ULAS[1], b"ip").encode())
    ran, events = run(rig, 0)
    assert ran.reason == EVENTS and [type(e) for e in events] == [UlpFrameIn]
    assert events[0].fd == plain.gsnd.fileno()
    srv.frame_in(events[0].fd, events[0].data, events[0].size)
    err = plain.frames()
    assert [f.op for f in err] == [Op.ERROR] and b"may not send EtherType 0x0800" in err[0].payload
    assert srv.counters["tx_refused_unprivileged"] == 1
    assert rig.dps[0].counters("ulp", {})["tx_direct"] == 1  # root's, queued in C
    assert root.frames() == []


def test_a_send_waits_in_the_socket_while_its_vc_is_full(rig):
    srv = server(rig, 0)
    p = rig.pair()
    attach(srv, p)
    for _ in range(3):
        p.app.send(Frame(Op.SEND, 2, ET, ULAS[1], bytes(4000)).encode())
    run(rig, 0, 0.03, high=-1)  # every VC "full": the SEND stays in the socket, unread
    c = rig.dps[0].counters("ulp", {})
    assert "tx_direct" not in c and c["tx_waited_for_room"] == 1
    run(rig, 0, 0.05)  # room again: the rest is read
    assert rig.dps[0].counters("ulp", {})["tx_direct"] == 3


def test_a_refused_send_is_answered_at_once_while_its_vc_is_full(rig):
    srv = server(rig, 0)
    p = rig.pair()
    client = attach(srv, p)
    client.privileged = False
    srv._sync(client)
    refused = [Frame(Op.SEND, 1, C.ETHERTYPE_IPV4, ULAS[1], b"ip"),  # unprivileged
               Frame(Op.SEND, 1, 0x88B7, ULAS[1], C.ULP_NOTICE_PROTOCOL + b"x")]  # gsnd's notices
    for f in refused:
        p.app.send(f.encode())
    for f in refused:  # every VC "full": still read at once, handed up and answered
        ran, events = run(rig, 0, 0.03, high=-1)
        assert [type(e) for e in events] == [UlpFrameIn] and events[0].data == f.encode()
        srv.frame_in(events[0].fd, events[0].data, events[0].size)
    assert [f.op for f in p.frames()] == [Op.ERROR, Op.ERROR]
    assert srv.counters["tx_refused_unprivileged"] == srv.counters["tx_refused_reserved_protocol"] == 1
    assert "tx_waited_for_room" not in rig.dps[0].counters("ulp", {})


def test_a_parked_clients_end_is_seen_at_once_and_its_sends_still_leave(rig):
    srv = server(rig, 0)
    p = rig.pair()
    client = attach(srv, p)
    sent = [Frame(Op.SEND, 2, ET, ULAS[1], bytes([i]) * 4000) for i in range(3)]
    for f in sent:
        p.app.send(f.encode())
    run(rig, 0, 0.03, high=-1)
    assert rig.dps[0].counters("ulp", {}) == {"tx_waited_for_room": 1}  # parked, its SENDs unread
    p.app.close()
    ran, events = run(rig, 0, 0.5, high=-1)  # the VC is still "full": the end is seen now
    assert events == [UlpClosed(p.gsnd.fileno())]
    srv.closed(events[0].fd)
    assert client.closed.is_set()
    assert rig.dps[0].counters("ulp", {})["tx_direct"] == 3  # what it sent before its end, once


def test_the_clients_end_goes_up_and_it_is_polled_no_more(rig):
    srv = server(rig, 0)
    p = rig.pair()
    client = attach(srv, p)
    p.app.send(Frame(Op.BIND, ethertype=ET).encode())
    p.app.close()
    ran, events = run(rig, 0, 0.05)  # a frame handed up is answered before the client's next
    assert [type(e) for e in events] == [UlpFrameIn]
    srv.frame_in(events[0].fd, events[0].data, events[0].size)
    ran, events = run(rig, 0, 0.05)
    assert events == [UlpClosed(p.gsnd.fileno())]
    srv.closed(events[0].fd)
    assert client.ethertypes == {ET} and client.closed.is_set()
    ran, events = run(rig, 0, 0.02)
    assert events == []  # a closed client is not polled again (its POLLHUP would say so)


FRAMES = st.one_of(
    st.binary(max_size=40),
    st.builds(lambda op, vc, et, pl: bytes([op, vc]) + et.to_bytes(2, "big") + ULAS[1] + pl,
              st.integers(0, 8), st.integers(0, 6), st.sampled_from([ET, C.ETHERTYPE_IPV4, 0x88B7, 0]),
              st.one_of(st.binary(max_size=64), st.just(C.ULP_NOTICE_PROTOCOL + b"x"),
                        st.integers(2100, 2300).map(bytes))),
)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(FRAMES, min_size=1, max_size=12))
def test_any_frames_from_a_client_are_queued_or_answered_as_python_would(frames):
    """Whatever a client sends, gsnd's data plane neither fails nor queues what Python
    would refuse: a SEND is queued in C exactly when the Python server would queue it,
    and everything else is answered by the server from what C handed up."""
    r = Rig()
    pairs = []
    try:
        r.bring_up()
        srv = server(r, 0)
        p = Pair()
        pairs.append(p)
        client = attach(srv, p)
        client.privileged = False
        srv._sync(client)
        for f in frames:
            p.app.send(f)
        up = 0
        for _ in range(len(frames) + 3):  # at most one frame handed up per run
            _, events = run(r, 0, 0.005)
            for ev in events:
                assert isinstance(ev, UlpFrameIn)
                srv.frame_in(ev.fd, ev.data, ev.size)
                up += 1
        queued = r.dps[0].counters("ulp", {}).get("tx_direct", 0)
        assert queued + up == len(frames)
        assert queued + srv.counters["tx_messages"] == sum(
            1 for f in frames if len(f) >= 10 and f[0] == Op.SEND and f[1] <= 3
            and int.from_bytes(f[2:4], "big") not in C.ULP_PRIVILEGED_ETHERTYPES
            and not (f[2:4] == b"\x88\xb7" and f[10:15] == C.ULP_NOTICE_PROTOCOL)
            and len(f) - 10 <= max_payload(f[1]))
    finally:
        for p in pairs:
            p.close()
        r.close()


def test_the_c_registry_holds_as_many_clients_as_the_server_serves():
    """_ulpreg.h's fixed table and the ULP server's cap are one number: were the cap raised
    alone, registering a client past the table would fail in the accept path."""
    from daemons import _link
    from daemons.constants import ULP_MAX_CLIENTS
    assert _link.UL_CLIENTS == ULP_MAX_CLIENTS
