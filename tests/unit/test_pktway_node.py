"""The PacketWay node library against a scripted port (no sockets): hostile frames are
dropped and counted, malformed answers raise PktwayError, optional header fields (§1.8)."""

from dataclasses import replace

import pytest

from daemons.wire.ulp import Frame, Op
from pktwayd import messages as M
from pktwayd.constants import ADDR_HEY_YOU, ETHERTYPE_PKTWAY, PT, ErrTE, RrpTE
from pktwayd.eep import OptField, Packet, decode
from pktwayd.node import Node, PktwayError
from pktwayd.rrp import Addr

ME, ROUTER, FAR = 0x40, 0x59, 0x60
MY_ULA, ROUTER_ULA = bytes([1, 3, 0]), bytes([9, 3, 0])


class ScriptedPort:
    """What Node needs of a port: bind, send, recv (frames from a list), close."""

    def __init__(self, frames=()) -> None:
        self.frames = list(frames)
        self.sent: list[tuple[bytes, Packet]] = []

    def bind(self, ethertype):
        return Frame(Op.STATUS, 1, ethertype, MY_ULA)

    def send(self, route, payload, *, vc=1, ethertype=ETHERTYPE_PKTWAY):
        self.sent.append((bytes(route), decode(payload)))

    def recv(self, timeout=None):
        if not self.frames:
            raise TimeoutError
        return self.frames.pop(0)

    def close(self):
        pass


def frame(payload: bytes, ula: bytes = ROUTER_ULA) -> Frame:
    return Frame(Op.RECV, 1, ETHERTYPE_PKTWAY, ula, payload)


def node(*payloads) -> Node:
    return Node(ScriptedPort([frame(p) if isinstance(p, bytes) else p for p in payloads]), ME, ROUTER_ULA)


def test_hostile_frames_are_counted_not_raised():
    n = node(b"\x01" * 5, bytes(24), Packet(dt=FAR, sa=ROUTER, pt=PT.USER).encode(),
             Frame(Op.RECV, 1, 0x0800, ROUTER_ULA, b"ip"),
             M.rrp(RrpTE.RDRC, ME, ROUTER, [Addr(FAR)]).encode(),
             Packet(dt=ME, sa=ROUTER, pt=PT.RRP, te=RrpTE.INFO, data=bytes.fromhex("0101000200000040")).encode())
    n.poll()
    assert n.counters == {"rx_bad_packet": 1, "rx_not_for_me": 2, "rx_not_pktway": 1, "rrp_malformed": 1}
    assert not n.redirects  # the one-record RDRC is kept (it decodes) but not obeyed


def test_malformed_answers_raise_pktway_error():
    bad_rdrc = M.rrp(RrpTE.RDRC, ME, ROUTER, [Addr(FAR)]).encode()  # D, but no HR to use
    with pytest.raises(PktwayError):
        node(bad_rdrc).route(FAR)
    garbage = Packet(dt=ME, sa=ROUTER, pt=PT.RRP, te=RrpTE.L2SR, data=bytes.fromhex("0101000200000040")).encode()
    with pytest.raises(PktwayError):
        node(garbage).find(name=b"x")
    n = node(garbage)  # an answer to GVL2 that is not records is not the answer
    with pytest.raises(TimeoutError):
        n.ask(RrpTE.GVL2, [Addr(FAR)], timeout=0.05, match=lambda p: False)


def test_unknown_mandatory_field_is_not_processed_and_answered_with_err_general():
    wru = M.rrp(RrpTE.WRU, ME, ROUTER)
    n = node(replace(wru, options=(OptField(3, b"?", mandatory=True),)).encode())
    n.poll()
    ((to, p),) = n.ulp.sent
    assert to == ROUTER_ULA and p.pt == PT.ERR and p.te == ErrTE.GENERAL and p.dt == ROUTER and p.sa == ME
    assert n.counters["drop_oh_unknown_mandatory"] == 1
    n = node(replace(wru, options=(OptField(3, b"?"),)).encode())  # optional: ignored, the WRU answered
    n.poll()
    ((to, p),) = n.ulp.sent
    assert p.te == RrpTE.INFO and n.counters["oh_unknown_optional_ignored"] == 1


def test_a_route_holding_a_symbol_is_printable():
    """An L2SR's SR may hold symbols (§2.5); `pktway route` printed .route of each hop."""
    from pktwayd.cli import hops_text
    from pktwayd.eep import L2RH, Symbol

    assert hops_text([L2RH(bytes([3, 0, 3, 0])), Symbol(1, b"x")]) == "03000300 symbol:00001"


def test_a_hey_you_message_the_node_does_not_answer_is_counted():  # found by tests/sim/test_pktway_fuzz.py
    n = node(M.gvl2(0x7FFFFE, ROUTER, FAR).encode())
    n.poll()
    assert not n._pending and n.counters == {"rx_hey_you_consumed": 1}


@pytest.mark.parametrize("reply,routes", [
    ({"ok": True, "ulas": [{"ula": "02:47:53:00:01:00"}, {"ula": "ff:ff:ff:ff:ff:ff"}]},
     {bytes.fromhex("024753000100")}),
    ({"ok": True}, None),
    ({"ok": True, "ulas": None}, None),
    ({"ok": True, "ulas": [{"ula": "nonsense"}]}, None),
    ({"ok": True, "ulas": ["02:47:53:00:01:00"]}, None),
    ({"ok": True, "ulas": [{"ula": 5}]}, None),
])
def test_a_malformed_switch_map_is_refused_not_raised(reply, routes):
    """pktwayd's mapper task read gsnd's ULA list unguarded: a bad answer ended the daemon."""
    from pktwayd.daemon import map_routes

    assert map_routes(reply) == routes



def test_wru_from_a_prefix_coded_source_is_counted_not_answered():
    """Found by the fuzz: a WRU whose SA has the prefix bit (no node address) made the
    node build an INFO to an address that does not encode."""
    n = node(Packet(dt=ADDR_HEY_YOU, sa=0x800001, pt=PT.RRP, te=RrpTE.WRU).encode())
    n.poll()
    assert n.ulp.sent == [] and n.counters["wru_bad_source"] == 1


def test_level_c_node_answers_tell_about_itself():
    from pktwayd.rrp import Capa, Name

    tells = [M.rrp(RrpTE.TELL, ME, FAR, recs).encode() for recs in
             ([Addr(ME)], [Name(b"Super")], [Capa(7, bytes([8]))], [Capa(9)], [Addr(ME), Name(b"x")])]
    n = Node(ScriptedPort([frame(t) for t in tells]), ME, ROUTER_ULA, name=b"Super", caps=[(7, bytes([4, 8])), (42, b"")])
    n.poll()
    answers = [p for _, p in n.ulp.sent]
    assert all(p.dt == FAR and p.sa == ME for p in answers) and len(answers) == 4
    assert [p.te for p in answers[:3]] == [RrpTE.INFO] * 3
    assert M.records(answers[0]) == [Addr(ME), Name(b"Super"), Capa(7, bytes([4, 8])), Capa(42, b"")]
    assert answers[3].pt == PT.ERR and answers[3].te == ErrTE.UNK  # no printer here
    assert n.counters["tell_malformed"] == 1


def test_which_router_hrto():
    n = node(M.rdrc(ME, ROUTER, FAR, 0x5A).encode())
    assert n.which_router(FAR) == 0x5A
    sent = n.ulp.sent[0][1]
    assert sent.te == RrpTE.HRTO and M.records(sent) == [Addr(FAR)]
    with pytest.raises(PktwayError):
        node(M.unk(ME, ROUTER, FAR).encode()).which_router(FAR)


def test_memory_board_write_read_and_refusals():
    from pktwayd.special import read_body, write_body

    frames = [Packet(dt=ME, sa=FAR, pt=PT.MEMORY_WRITE, data=write_body(16, b"hello")).encode(),
              Packet(dt=ME, sa=FAR, pt=PT.MEMORY_READ, data=read_body(14, 9)).encode(),
              Packet(dt=ME, sa=FAR, pt=PT.MEMORY_WRITE, data=write_body(60, b"too far")).encode(),
              Packet(dt=ME, sa=FAR, pt=PT.MEMORY_READ, data=read_body(0, 1 << 20)).encode(),
              Packet(dt=ME, sa=FAR, pt=PT.MEMORY_READ, data=b"short").encode()]
    n = Node(ScriptedPort([frame(f) for f in frames]), ME, ROUTER_ULA, memory=64)
    n.poll()
    assert bytes(n.memory.mem[16:21]) == b"hello"
    ((_, answer),) = n.ulp.sent
    assert answer.pt == PT.MEMORY_WRITE and answer.dt == FAR and answer.data == (14).to_bytes(8, "big") + b"\0\0hello\0\0"
    assert n.memory.counters == {"writes": 1, "reads": 1, "write_out_of_range": 1, "read_out_of_range": 1,
                                 "malformed_READ": 1}


def test_read_memory_waits_for_the_answering_write():
    from pktwayd.special import write_body

    n = node(Packet(dt=ME, sa=FAR, pt=PT.MEMORY_WRITE, data=write_body(8, b"abc")).encode())
    assert n.read_memory(FAR, 8, 3) == b"abc"
    assert n.ulp.sent[0][1].pt == PT.MEMORY_READ and n.memory is None


def test_embedded_packet_is_sent_on_along_its_l2rh():
    from pktwayd.eep import L2RH
    from pktwayd.special import embed

    inner = Packet(dt=FAR, sa=ME, pt=PT.USER, data=b"onward", prefix=(L2RH(bytes([7, 3, 0])), L2RH(bytes([2, 3, 0]))))
    n = node(embed(inner, ME, FAR).encode(), Packet(dt=ME, sa=FAR, pt=PT.EMBEDDED, data=bytes(16)).encode())
    n.poll()
    ((route, sent),) = n.ulp.sent
    assert route == bytes([7, 3, 0]) and sent.prefix == (L2RH(bytes([2, 3, 0])),) and sent.data == b"onward"
    assert n.counters["embedded_unwrapped"] == 1 and sum(v for k, v in n.counters.items() if "embedded_bad" in k) == 1


def test_only_my_routers_redirect_is_obeyed():
    n = node(frame(M.rdrc(ME, ROUTER, FAR, 0x5A).encode(), ula=bytes([7, 7, 7])), M.rdrc(ME, ROUTER, FAR, 0x5B).encode())
    n.poll()
    assert n.counters["rdrc_not_from_my_router"] == 1 and n.redirects[FAR][0] == 0x5B
    n.neighbours[0x5B] = bytes([5, 3, 0])
    n.send(FAR, b"x")
    assert n.ulp.sent[-1][0] == bytes([5, 3, 0]) and n.ulp.sent[-1][1].dt == FAR  # L3 to the redirected-to node
