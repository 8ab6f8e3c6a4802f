"""Issue 12 item 2: the switch's Admin authority (configuration only from management
ports) and source validation (a Message's S_ULA must belong to its ingress port).

Sans-IO: a switch core and gsnd endpoint cores joined by their links, stepped on
injected time.  The endpoints acquire their ULAs over Admin exactly as gsnd does; an
attacker is an endpoint whose link is also fed hand-made micropackets (a host driving
its cable itself, past gsnd's S_ULA stamping)."""

from __future__ import annotations

import random

import pytest

from daemons import constants as C
from daemons.constants import AdminCmd, AdminStatus, ElementType, MpType
from daemons.endpoint.core import AdminResponse, Endpoint, MessageIn
from daemons.switch.core import Switch
from daemons.wire.admin import Admin, change_route_args, parse_i_am, parse_ula_list
from daemons.wire.message import encode_stream, single_records, stream_records
from daemons.wire.ula import assigned_ula

PORTS = (1, 2, 3)
OTHER_SWITCH_HOST = bytes.fromhex("024753090100")  # a host behind a neighbouring switch


class Bench:
    def __init__(self, **kw) -> None:
        self.now = 0.0
        self.sw = Switch(1, list(PORTS), self.now, rng=random.Random(1), **kw)
        self.eps = {p: Endpoint(p, self.now, rng=random.Random(10 + p)) for p in PORTS}
        self.inbox: dict[int, list] = {p: [] for p in PORTS}
        self.admin: dict[int, list] = {p: [] for p in PORTS}
        self.run(0.05)
        assert all(ep.link.up and ep.ula == assigned_ula(1, p) for p, ep in self.eps.items())

    def run(self, seconds: float = 0.02, step: float = 0.001) -> None:
        end = self.now + seconds
        while self.now < end:
            self.now += step
            now = self.now
            for p, ep in self.eps.items():
                for d in ep.handle_timer(now) + ep.link.datagrams(now):
                    self.sw.ports[p].link.receive(d, now)
                self.sw.process(p, now)
            for p, ep in self.eps.items():
                for d in self.sw.ports[p].link.handle_timer(now) + self.sw.ports[p].link.datagrams(now):
                    ep.link.receive(d, now)
                ep.process(now)
                for ev in ep.events():
                    if isinstance(ev, MessageIn):
                        self.inbox[p].append(ev.message)
                    elif isinstance(ev, AdminResponse):
                        self.admin[p].append(ev.admin)

    def ula(self, p: int) -> bytes:
        return self.eps[p].ula

    def forge(self, p: int, d_ula: bytes, s_ula: bytes, payload: bytes, vc: int = 1, split: bool = False) -> None:
        """Port p's host sends a Message with S_ULA of its choosing; ``split``: the
        HEADER goes in one cable datagram, the rest of the Message in a later one."""
        recs = stream_records(vc, encode_stream(vc, d_ula, s_ula, C.ETHERTYPE_IPV4, payload))
        link = self.eps[p].link
        if split:
            link.enqueue(vc, recs[:1])
            self.run(0.003)
            link.enqueue(vc, recs[1:])
        else:
            link.enqueue(vc, recs)

    def ask(self, p: int, command: int, args: bytes = b"", **kw) -> list[Admin]:
        self.admin[p].clear()
        req = self.eps[p].admin_request(command, args, **kw)
        self.run(0.02)
        return [a for a in self.admin[p] if a.xid == req.xid]


def payloads(msgs) -> list[bytes]:
    return [m.payload for m in msgs]


# --- source validation ---------------------------------------------------------------------
@pytest.mark.parametrize("split", [False, True])
def test_spoofed_source_is_dropped_whole_and_counted_while_the_real_host_is_heard(split):
    b = Bench()
    victim, attacker = b.ula(1), 2
    big = bytes(range(256)) * 4  # HEADER + 32 DATA micropackets: the whole Message must go
    b.forge(attacker, b.ula(3), victim, b"as host 1: " + big, split=split)
    b.forge(attacker, C.ULA_BROADCAST, victim, b"broadcast as host 1")
    b.forge(attacker, b.ula(3), C.ULA_NONE, b"from nobody")
    b.forge(attacker, b.ula(3), C.ULA_HARP_SERVER, b"as the HARP server")  # not configured anywhere
    b.eps[1].send(1, b.ula(3), C.ETHERTYPE_IPV4, b"the real host 1")
    b.forge(attacker, b.ula(3), b.ula(attacker), b"host 2 as itself")  # the VC is usable right after
    b.run(0.05)
    assert payloads(b.inbox[3]) == [b"the real host 1", b"host 2 as itself"]
    assert b.inbox[1] == [] and b.inbox[2] == []  # the broadcast went nowhere, not even back
    assert b.sw.ports[attacker].counters["drop_spoofed_source"] == 4
    assert b.sw.ports[1].counters["drop_spoofed_source"] == 0
    assert b.sw.counters["dropped_mps"] >= 33
    # nothing of the dropped Messages leaked out (no stray DATA, no ERROR-terminated stubs)
    assert all(ep.reasm.counters == {} for ep in b.eps.values())
    for ep in b.eps.values():  # the dropped micropackets' credits came back
        assert ep.link.credits == list(C.VC_BUFFER_MPS)


def test_spoofed_header_inside_an_open_message_ends_it_and_is_dropped():
    b = Bench()
    vc = 1
    good = stream_records(vc, encode_stream(vc, b.ula(3), b.ula(2), C.ETHERTYPE_IPV4, bytes(100)))
    bad = stream_records(vc, encode_stream(vc, b.ula(3), b.ula(1), C.ETHERTYPE_IPV4, bytes(100)))
    b.eps[2].link.enqueue(vc, good[:2])  # a Message left open ...
    b.eps[2].link.enqueue(vc, bad)  # ... broken off by a spoofed one
    b.run(0.05)
    c = b.sw.ports[2].counters
    assert c["header_inside_message"] == 1 and c["drop_spoofed_source"] == 1
    assert b.inbox[3] == [] and b.sw.counters["dropped_mps"] == len(bad)
    assert b.eps[3].reasm.counters == {"discard_error_bit": 1}  # the open one ended with TAIL + ERROR
    assert b.eps[2].link.credits == list(C.VC_BUFFER_MPS)


def test_addresses_the_switch_binds_to_a_port_are_that_ports_sources():
    alias = bytes.fromhex("02aabbccddee")
    b = Bench(static={C.ULA_HARP_SERVER: 1}, management_ports=(3,))
    b.forge(1, b.ula(2), C.ULA_HARP_SERVER, b"server alias, static on port 1")
    b.forge(2, b.ula(1), C.ULA_HARP_SERVER, b"server alias from port 2")
    (r,) = b.ask(3, AdminCmd.CHANGE_ROUTE, change_route_args(alias, 2))
    assert r.status == AdminStatus.OK
    b.forge(2, b.ula(1), alias, b"alias routed to port 2")
    b.run(0.05)
    assert payloads(b.inbox[2]) == [b"server alias, static on port 1"]
    assert payloads(b.inbox[1]) == [b"alias routed to port 2"]
    assert b.sw.ports[2].counters["drop_spoofed_source"] == 1


def test_trusted_uplink_carries_other_switches_sources():
    b = Bench(trust_source_ports=(3,))
    b.forge(3, b.ula(1), OTHER_SWITCH_HOST, b"from behind the uplink")
    b.forge(2, b.ula(1), OTHER_SWITCH_HOST, b"from a host port")
    b.run(0.05)
    assert payloads(b.inbox[1]) == [b"from behind the uplink"]
    assert b.sw.ports[3].counters["drop_spoofed_source"] == 0
    assert b.sw.ports[2].counters["drop_spoofed_source"] == 1


def test_a_host_without_a_ula_yet_is_not_heard_until_it_has_one():
    """Before ASSIGN_ULA the port owns no address: whatever S_ULA it uses is dropped;
    the acquisition itself (Admin, no S_ULA) works from every port."""
    b = Bench()
    b.sw.table.pop(b.ula(2))  # as after a switch restart, before gsnd asks again
    b.forge(2, b.ula(1), b.ula(2), b"stale address")
    b.run(0.02)
    (r,) = b.ask(2, AdminCmd.ASSIGN_ULA, C.ULA_NONE)
    assert r.command == AdminCmd.HERE_IS_ULA and bytes(r.args[:6]) == assigned_ula(1, 2)
    b.forge(2, b.ula(1), b.ula(2), b"fresh address")
    b.run(0.05)
    assert payloads(b.inbox[1]) == [b"fresh address"]
    assert b.sw.ports[2].counters["drop_spoofed_source"] == 1


# --- Admin authority -------------------------------------------------------------------------
def test_change_route_from_a_host_port_is_refused_and_the_route_kept():
    b = Bench()  # stock: no management port
    host1 = b.ula(1)
    (r,) = b.ask(2, AdminCmd.CHANGE_ROUTE, change_route_args(host1, 2))
    assert (r.command, r.status, r.args[0]) == (AdminCmd.INVALID_ADMIN, AdminStatus.NOT_SUPPORTED,
                                                AdminCmd.CHANGE_ROUTE)
    assert b.sw.ports[2].counters["admin_refused_not_management"] == 1
    assert b.sw.table[host1] == 1
    b.eps[3].send(1, host1, C.ETHERTYPE_IPV4, b"still to host 1")
    b.run(0.05)
    assert payloads(b.inbox[1]) == [b"still to host 1"] and b.inbox[2] == []


@pytest.mark.parametrize("command", [AdminCmd.SET_ELEMENT_ADDRESS, AdminCmd.INITIALIZE, AdminCmd.WRITE_REGISTER])
def test_other_configuration_commands_are_refused_from_host_ports(command):
    b = Bench()
    (r,) = b.ask(2, command, bytes(8))
    assert r.command == AdminCmd.INVALID_ADMIN and r.args[0] == command
    assert b.sw.ports[2].counters["admin_refused_not_management"] == 1


def test_change_route_from_the_management_port_is_obeyed():
    b = Bench(management_ports=(3,))
    host1 = b.ula(1)
    (r,) = b.ask(3, AdminCmd.CHANGE_ROUTE, change_route_args(host1, 2))
    assert (r.command, r.status) == (AdminCmd.ROUTE_STATUS, AdminStatus.OK)
    assert b.sw.table[host1] == 2 and b.sw.ports[3].counters["admin_refused_not_management"] == 0
    b.eps[3].send(1, host1, C.ETHERTYPE_IPV4, b"now on port 2")
    b.run(0.05)
    assert b.eps[2].counters["rx_drop_not_for_us"] == 1  # delivered to port 2's host


def test_queries_and_acquisition_stay_open_to_every_port():
    b = Bench(management_ports=(3,))
    for p in (1, 2):
        (r,) = b.ask(p, AdminCmd.WHAT_ARE_YOU)
        assert r.command == AdminCmd.I_AM and parse_i_am(r.args)[0] == ElementType.SWITCH
        (r,) = b.ask(p, AdminCmd.ARE_YOU_THERE)
        assert r.command == AdminCmd.I_AM_HERE
        (r,) = b.ask(p, AdminCmd.GET_PORT, b.ula(3))
        assert r.command == AdminCmd.PORT_ID and int.from_bytes(r.args[6:8], "big") == 3
        listing = b.ask(p, AdminCmd.LIST_ULAS, b"\0\0")
        assert {parse_ula_list(a.args)[2] for a in listing} == {b.ula(q) for q in PORTS}
        (r,) = b.ask(p, AdminCmd.ASSIGN_ULA, C.ULA_NONE)
        assert r.command == AdminCmd.HERE_IS_ULA and bytes(r.args[:6]) == assigned_ula(1, p)
        assert b.sw.ports[p].counters["admin_refused_not_management"] == 0


def test_forwarded_configuration_is_judged_where_it_entered_this_switch():
    """Hop-count forwarding: a configuration request from a host port is not carried on
    (the next element would see it arrive from this switch); from a management port it is."""
    b = Bench(management_ports=(3,))
    args = change_route_args(b.ula(1), 2)
    (r,) = b.ask(2, AdminCmd.CHANGE_ROUTE, args, hops=2, route=(1,))
    assert r.command == AdminCmd.INVALID_ADMIN and r.args[0] == AdminCmd.CHANGE_ROUTE
    assert b.sw.ports[2].counters["admin_refused_not_management"] == 1
    assert b.eps[1].counters["rx_admin_request"] == 0 and not b.sw.xids
    (r,) = b.ask(3, AdminCmd.CHANGE_ROUTE, args, hops=2, route=(1,))  # the endpoint answers itself
    assert r.command == AdminCmd.INVALID_ADMIN and b.eps[1].counters["rx_admin_request"] == 1
    (r,) = b.ask(2, AdminCmd.WHAT_ARE_YOU, hops=2, route=(1,))  # queries pass from anywhere
    assert r.command == AdminCmd.I_AM and parse_i_am(r.args)[2] == b.ula(1)


def test_a_forwarded_response_is_taken_only_from_the_port_the_request_went_out_of():
    """Port 2's host answers a request (whose XID it learnt or guessed) that the switch
    forwarded to port 3: the switch routes responses back only from port 3."""
    b = Bench()
    req = b.eps[1].admin_request(AdminCmd.WHAT_ARE_YOU, hops=2, route=(3,))
    forged = Admin(AdminCmd.I_AM, xid=req.xid, hop_count=1, init_hops=2, route=req.route, args=bytes(16))
    b.eps[2].link.enqueue(C.VC_ADMIN_RESPONSE, single_records(C.VC_ADMIN_RESPONSE, MpType.ADMIN, forged.encode()))
    b.run(0.05)
    got = [a for a in b.admin[1] if a.xid == req.xid]
    assert len(got) == 1 and parse_i_am(got[0].args)[2] == b.ula(3)
    assert b.sw.ports[2].counters["admin_response_wrong_port"] == 1


def test_management_and_trusted_ports_must_exist():
    with pytest.raises(ValueError, match="port 9"):
        Switch(1, [1, 2], 0.0, management_ports=(9,))
    with pytest.raises(ValueError, match="port 9"):
        Switch(1, [1, 2], 0.0, trust_source_ports=(9,))
