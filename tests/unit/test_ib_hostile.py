"""Every byte from a socket is hostile: garbage and mutated valid datagrams fed to the
SM, switch and port cores never raise, and each drop is counted."""

from hypothesis import HealthCheck, given, settings, strategies as st

from ib import addr, mgmt, packet, sa
from tests.unit.ibnet import Net, arp_request, guid
from tests.unit.test_ib_fabric_core import LINKS

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _net():
    net = Net({1: [1, 2, 3], 2: [1, 2, 3]}, {h: [("ib0", None)] for h in (1, 2, 3)}, LINKS)
    net.run(3.0)
    return net


NET = _net()


def _valid_samples():
    h = NET.hosts[1]
    ifc = h.ifaces[0]
    rec = sa.PathRecord(dgid=NET.hosts[2].gid, sgid=h.gid, pkey=0xFFFF)
    mc = sa.MCMemberRecord(mgid=addr.mgid_ipv4("224.0.0.5", 0xFFFF), port_gid=h.gid, qkey=0xB1B, pkey=0xFFFF,
                           join_state=1)
    ud = packet.UdPacket(slid=3, dlid=h.lid, pkey=0xFFFF, dqpn=ifc.qpn, sqpn=0x48, qkey=0xB1B,
                         payload=b"\x08\x06\x00\x00" + bytes(56)).encode()
    return [
        mgmt.Mgmt(mgmt.Kind.PATH_GET, 1, body=mgmt.masked_body(sa.PR_IPOIB_QUERY, rec.encode())).encode(),
        mgmt.Mgmt(mgmt.Kind.MC_JOIN, 2, body=mgmt.masked_body(0x1FFFF, mc.encode())).encode(),
        mgmt.Mgmt(mgmt.Kind.REGISTER, 3, body=mgmt.register_body(guid(1), guid(1))).encode(),
        mgmt.Mgmt(mgmt.Kind.SWITCH_REPORT, 4, body=mgmt.SwitchReport(0x1001, 1, 1, ((1, guid(1), 1, 1),)).encode()).encode(),
        mgmt.Mgmt(mgmt.Kind.SET_LFT, 5, body=mgmt.encode_lft(9, {2: 1, 3: 3})).encode(),
        mgmt.Mgmt(mgmt.Kind.REGISTER_REPLY, 0, body=mgmt.PortInfo(2, 1, 0xFE80 << 48, (0xFFFF,)).encode()).encode(),
        ud,
        arp_request(NET.mac(1), "10.0.0.1", "10.0.0.2"),
    ]


SAMPLES = _valid_samples()


@st.composite
def hostile(draw):
    if draw(st.booleans()):
        return draw(st.binary(max_size=300))
    b = bytearray(draw(st.sampled_from(SAMPLES)))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(b) - 1))
        b[i] = draw(st.integers(0, 255))
    cut = draw(st.integers(0, len(b)))
    return bytes(b[:cut]) if draw(st.booleans()) else bytes(b)


@SETTINGS
@given(st.lists(hostile(), min_size=1, max_size=8))
def test_cores_survive_hostile_datagrams(datagrams):
    h, sw, sm = NET.hosts[1], NET.sw[1], NET.sm
    for d in datagrams:
        sm.on_datagram(d, ("h", 1), NET.now)
        sm.outgoing()
        sw.on_cable(1, d, NET.now)
        sw.on_sm(d)
        h.on_cable(d, NET.now)
        h.on_sm(d, NET.now)
        h.on_tap("ib0", d, NET.now)
        h.outgoing()
        sw.outgoing()


def test_drops_are_counted():
    net = _net()
    net.hosts[1].on_cable(b"\x00" * 10, net.now)
    net.sm.on_datagram(b"XX" + bytes(30), ("h", 1), net.now)
    net.sw[1].on_cable(1, b"\x00", net.now)
    net.hosts[1].on_tap("ib0", b"\x00" * 12 + b"\x88\xb5" + bytes(50), net.now)  # not an IPoIB type
    assert net.hosts[1].counters["rx_drop_runt"] == 1
    assert net.sm.counters["drop_bad_magic"] == 1
    assert net.sw[1].counters["drop_runt"] == 1
    assert net.hosts[1].counters["tx_drop_ethertype"] == 1
