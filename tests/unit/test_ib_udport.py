"""The PacketWay UD port (ib/udport.py) on the in-memory subnet: registration, the
DLID + QPN route, P_Key and Q_Key checks, hostile datagrams; and pktwayd's
configuration of an infiniband half."""

import pytest
from hypothesis import given, settings, strategies as st

from ib import packet
from ib.constants import QKEY_PACKETWAY, QPN_PACKETWAY
from ib.udport import HEADER, UdPortCore, parse_route, route
from pktwayd import config as pconfig
from tests.unit.ibnet import guid
from tests.unit.test_ib_fabric_core import three


def attach(net, h):
    """A UdPortCore registered as host h's port (the SM's answer fed to it)."""
    core = UdPortCore(guid(h))
    core.handle_timer(net.now)
    for where, data in core.outgoing():
        if where == "sm":
            net.sm.on_datagram(data, ("h", h), net.now)
    for dst, data in net.sm.outgoing():
        if dst == ("h", h):
            core.on_sm(data)
    return core


def test_route_codec():
    assert route(5, QPN_PACKETWAY) == bytes.fromhex("00050000a0")
    assert parse_route(route(0xBFFF, 0xFFFFFF)) == (0xBFFF, 0xFFFFFF)
    for bad in ((0, 1), (0xC000, 1), (5, 1 << 24)):
        with pytest.raises(ValueError):
            route(*bad)
    with pytest.raises(ValueError):
        parse_route(b"\x00\x05\x00")


def test_registered_port_sends_and_receives_packetway():
    net = three()
    a, b = attach(net, 1), attach(net, 2)
    assert a.own_route == route(net.sm.ports[guid(1)].lid, QPN_PACKETWAY)
    a.send(b.own_route, b"pw packet")
    (where, data), = a.outgoing()
    p = packet.decode(data)
    assert where == "cable" and p.qkey == QKEY_PACKETWAY and p.payload == HEADER + b"pw packet"
    assert p.payload[:2] == b"\x88\xb5"
    assert b.on_cable(data) == (a.own_route, b"pw packet")
    # not for b: another QPN, a wrong Q_Key, a foreign partition, not PacketWay
    for changed, counter in ((dict(dqpn=0x48), "rx_drop_not_mine"), (dict(qkey=0xB1B), "rx_drop_qkey_mismatch"),
                             (dict(pkey=0x8001), "rx_drop_pkey_mismatch"),
                             (dict(payload=b"\x08\x00\x00\x00x"), "rx_drop_not_packetway")):
        fields = dict(slid=p.slid, dlid=p.dlid, pkey=p.pkey, dqpn=p.dqpn, sqpn=p.sqpn, qkey=p.qkey, payload=p.payload)
        fields.update(changed)
        assert b.on_cable(packet.encode(packet.UdPacket(**fields))) is None
        assert b.counters[counter] == 1


def test_unregistered_port_sends_nothing():
    core = UdPortCore(guid(9))
    core.send(route(5, 0xA0), b"x")
    assert core.counters["tx_drop_unregistered"] == 1 and not [o for o in core.outgoing() if o[0] == "cable"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=6))
def test_hostile_datagrams(datagrams):
    core = UdPortCore(guid(1))
    core.on_sm(b"IM\x01\x02" + bytes(20) + bytes([0, 2, 0, 1]) + bytes(8) + b"\x00\x01\xff\xff")
    for d in datagrams:
        core.on_sm(d)
        core.on_cable(d)
        core.send(d[:5], d)


def test_pktwayd_infiniband_half_config(tmp_path):
    base = """
[router]
name = "r"
control = "{t}/r.sock"
[[half]]
addr = 0x50
san_id = 0x100
ulp = "{t}/gsn0.ulp"
[[half]]
kind = "infiniband"
addr = 0x51
san_id = 0x300
mtu = 255
guid = "{guid}"
local = "127.0.0.1:7601"
switch = "127.0.0.1:7501"
sm = "127.0.0.1:4791"
[[half.node]]
addr = 0x61
lid = {lid}
"""
    p = tmp_path / "r.toml"
    p.write_text(base.format(t=tmp_path, guid="0xa1", lid=9))
    cfg = pconfig.load(str(p))
    h = cfg.halves[1]
    assert h.kind == "infiniband" and h.guid == 0xA1 and h.pkey == 0xFFFF and h.sm == ("127.0.0.1", 4791)
    assert h.nodes[1].sr[0].route == route(9, QPN_PACKETWAY)
    for guid_text, lid, needle in (("zz", 9, "is not a hexadecimal GUID"),
                                   ("0xa1", 0xC000, r"half\[1\]\.node\[0\]\.lid: 49152 is outside")):
        p.write_text(base.format(t=tmp_path, guid=guid_text, lid=lid))
        with pytest.raises(pconfig.ConfigError, match=needle):
            pconfig.load(str(p))
