"""The switch's Admin state a peer can make grow: the forwarded-request XID table
(issue 10 item 8a) and the ULA table (CHANGE_ROUTE)."""

import random

import pytest

from daemons import constants as C
from daemons.constants import AdminCmd, AdminStatus, MpType
from daemons.link.link import Link, Received
from daemons.switch.core import Switch
from daemons.wire.admin import Admin, change_route_args, parse_ula_list
from daemons.wire.message import single_records


def switch_with_ports_up(n_ports: int = 2) -> Switch:
    """A switch whose ports are up, each cabled to a sans-IO peer link."""
    sw = Switch(1, list(range(1, n_ports + 1)), 0.0, rng=random.Random(1))
    peers = {p: Link(p, 0.0, rng=random.Random(10 + p)) for p in sw.ports}
    now = 0.0
    for _ in range(5):
        now += 0.001
        for p, peer in peers.items():
            for d in peer.datagrams(now):
                sw.ports[p].link.receive(d, now)
            sw.process(p, now)
            for d in sw.ports[p].link.datagrams(now):
                peer.receive(d, now)
            for ev in peer.events():
                if isinstance(ev, Received):
                    peer.release(ev.vc, len(ev.recs))
    assert all(p.link.up for p in sw.ports.values())
    return sw


def admin_in(sw: Switch, port: int, adm: Admin, now: float) -> None:
    vc = C.VC_ADMIN_RESPONSE if adm.is_response else C.VC_ADMIN_REQUEST
    sw._ingress(sw.ports[port], vc, single_records(vc, MpType.ADMIN, adm.encode()), now)


def request(xid: int) -> Admin:
    """A request from port 1 to be forwarded out of port 2."""
    return Admin(AdminCmd.ARE_YOU_THERE, xid=xid, hop_count=1, init_hops=2, route=(2,) + (255,) * 6)


def response(xid: int) -> Admin:
    return Admin(AdminCmd.I_AM_HERE, xid=xid, hop_count=1, init_hops=2, route=(2,) + (255,) * 6)


@pytest.fixture
def small_caps(monkeypatch):
    """The caps are read at run time: small ones keep these tests quick."""
    monkeypatch.setattr(C, "ADMIN_XID_TABLE_MAX", 64)
    monkeypatch.setattr(C, "SWITCH_TABLE_MAX", 64)


def test_caps_fit_the_wire():
    # ULA_LIST carries index and total in 16 bits; ports are 1..254 (ASSIGN_ULA adds one each)
    assert C.SWITCH_TABLE_MAX + 254 <= 0xFFFF
    assert C.ADMIN_XID_TABLE_MAX >= 64


def forwarded_back(sw: Switch, port: int) -> int:
    return sum(1 for seg in sw.admin_q[C.VC_ADMIN_RESPONSE] if seg.targets == (port,))


def test_xid_table_is_bounded_and_the_excess_counted(small_caps):
    sw = switch_with_ports_up()
    cap = C.ADMIN_XID_TABLE_MAX
    for xid in range(cap + 100):
        admin_in(sw, 1, request(xid), 0.5)
    assert len(sw.xids) == cap
    assert sw.ports[1].counters["admin_xid_table_full"] == 100
    assert len(sw.admin_q[C.VC_ADMIN_REQUEST]) == cap  # the refused ones were not forwarded
    # the remembered ones still route their responses back; the refused ones do not
    admin_in(sw, 2, response(0), 0.6)
    admin_in(sw, 2, response(cap + 50), 0.6)
    assert forwarded_back(sw, 1) == 1
    assert sw.ports[2].counters["admin_response_unrouted"] == 1


def test_xid_expiry_in_deadline_order_with_virtual_time():
    sw = switch_with_ports_up()
    mem = C.ADMIN_XID_MEMORY_S
    admin_in(sw, 1, request(1), 0.0)
    admin_in(sw, 1, request(2), 0.4)
    admin_in(sw, 1, request(1), 0.8)  # the same XID again: remembered from 0.8 on
    admin_in(sw, 1, request(3), 0.9)
    admin_in(sw, 2, response(2), 0.4 + mem)  # still remembered at its deadline
    assert forwarded_back(sw, 1) == 1
    admin_in(sw, 2, response(2), 0.4 + mem + 0.01)  # expired
    assert sw.ports[2].counters["admin_response_unrouted"] == 1
    assert list(sw.xids) == [1, 3]
    admin_in(sw, 2, response(1), 0.8 + mem)  # 1 was refreshed, so it did not expire at 1.0
    assert forwarded_back(sw, 1) == 2
    admin_in(sw, 2, response(9), 0.9 + mem + 0.01)  # any Admin traffic expires the rest
    assert not sw.xids


def test_full_xid_table_frees_up_as_entries_expire(small_caps):
    sw = switch_with_ports_up()
    cap = C.ADMIN_XID_TABLE_MAX
    for k in range(3 * cap):  # a steady flood: cap requests per ADMIN_XID_MEMORY_S / 2
        admin_in(sw, 1, request(k), k * C.ADMIN_XID_MEMORY_S / (2 * cap))
        assert len(sw.xids) <= cap
    assert sw.ports[1].counters["admin_xid_table_full"] > 0
    later = 3 * C.ADMIN_XID_MEMORY_S
    admin_in(sw, 1, request(10**6), later)
    assert list(sw.xids) == [10**6]


def test_change_route_cannot_grow_the_ula_table_without_bound(small_caps):
    """65,536 CHANGE_ROUTEs used to make LIST_ULAS raise struct.error and end gsn-switch
    (a management port's: since issue 12 no other port may send them)."""
    sw = Switch(1, [1], 0.0, management_ports=[1])
    cap = C.SWITCH_TABLE_MAX
    for k in range(1, cap + 11):
        admin_in(sw, 1, Admin(AdminCmd.CHANGE_ROUTE, xid=k, args=change_route_args(k.to_bytes(6, "big"), 1)), 0.0)
    assert len(sw.table) == cap
    assert sw.ports[1].counters["admin_route_table_full"] == 10
    statuses = [Admin.decode(seg.recs["data"][0].tobytes()).status for seg in sw.admin_q[C.VC_ADMIN_RESPONSE]]
    assert statuses.count(AdminStatus.OK) == cap and statuses.count(AdminStatus.NOT_SUPPORTED) == 10
    # an existing entry can still be changed when the table is full
    admin_in(sw, 1, Admin(AdminCmd.CHANGE_ROUTE, xid=1, args=change_route_args((1).to_bytes(6, "big"), 1)), 0.0)
    assert sw.ports[1].counters["admin_route_table_full"] == 10
    sw.admin_q[C.VC_ADMIN_RESPONSE].clear()
    admin_in(sw, 1, Admin(AdminCmd.LIST_ULAS, xid=2), 0.0)
    listing = [parse_ula_list(Admin.decode(s.recs["data"][0].tobytes()).args) for s in sw.admin_q[2]]
    assert len(listing) == cap and listing[-1][1] == cap and not listing[-1][4]
