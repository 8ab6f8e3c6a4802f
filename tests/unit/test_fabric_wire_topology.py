"""Issue 13's Admin argument layouts (registers, element address, the switch's I_AM
fields) and the pure fabric computations (shortest paths, spanning tree)."""

import random

from hypothesis import given, strategies as st

from daemons.constants import AdminCmd, ElementType
from daemons.switch import topology as T
from daemons.wire.admin import (Admin, element_address_args, i_am_args, parse_element_address, parse_i_am,
                                parse_i_am_switch, parse_register, register_args)
from daemons.wire.errors import DecodeError


@given(st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1))
def test_register_args_roundtrip_through_an_admin(addr, data):
    adm = Admin.decode(Admin(AdminCmd.WRITE_REGISTER, args=register_args(addr, data)).encode())
    assert parse_register(adm.args) == (addr, data)


@given(st.integers(0, 2**32 - 1))
def test_element_address_roundtrip(addr):
    assert parse_element_address(Admin(AdminCmd.SET_ELEMENT_ADDRESS, args=element_address_args(addr)).args) == addr


@given(st.integers(1, 2), st.integers(0, 255), st.binary(min_size=6, max_size=6), st.integers(0, 255),
       st.integers(0, 2**48 - 1))
def test_i_am_switch_fields_roundtrip(etype, ports, ula, arrival, serial):
    args = Admin(AdminCmd.I_AM, args=i_am_args(etype, ports, ula, arrival, serial)).args
    assert parse_i_am(args) == (etype, ports, ula) and parse_i_am_switch(args) == (arrival, serial)


def test_endpoint_i_am_is_unchanged():
    assert i_am_args(ElementType.ENDPOINT, 1, b"\x02" * 6)[:8] == bytes([1, 1]) + b"\x02" * 6
    assert parse_i_am_switch(Admin(AdminCmd.I_AM, args=i_am_args(1, 1, bytes(6))).args) == (0, 0)


@given(st.binary(max_size=40))
def test_any_admin_args_parse_or_decode_error(blob):
    """Whatever a peer sends: the Admin decodes (its 16 argument bytes then parse as
    every layout) or is a DecodeError, nothing else."""
    try:
        adm = Admin.decode(blob)
    except DecodeError:
        return
    parse_register(adm.args), parse_element_address(adm.args), parse_i_am(adm.args), parse_i_am_switch(adm.args)


@st.composite
def fabrics(draw):
    n = draw(st.integers(1, 12))
    rng = random.Random(draw(st.integers(0, 10**6)))
    nxt = {s: 1 for s in range(1, n + 1)}
    links = set()
    for s in range(2, n + 1):  # connected: a random tree ...
        t = rng.randrange(1, s)
        links.add(T.link((s, nxt[s]), (t, nxt[t])))
        nxt[s] += 1
        nxt[t] += 1
    for _ in range(draw(st.integers(0, 10))):  # ... plus loops and parallel cables
        a, b = rng.randrange(1, n + 1), rng.randrange(1, n + 1)
        if a != b and nxt[a] <= 64 and nxt[b] <= 64:
            links.add(T.link((a, nxt[a]), (b, nxt[b])))
            nxt[a] += 1
            nxt[b] += 1
    fmap = T.FabricMap(1, {s: T.SwitchNode(s, s, ()) for s in range(1, n + 1)}, links)
    return fmap


@given(fabrics())
def test_next_hops_lie_on_shortest_paths(fmap):
    adj = fmap.adjacency()
    hops = T.next_hops(adj)
    for s in adj:
        dist_from = {t: T.distances(adj, t) for t in adj}
        for t, port in hops[s].items():
            nbr = next(n for n, p, _ in adj[s] if p == port)
            assert dist_from[t][nbr] == dist_from[t][s] - 1
        assert set(hops[s]) == set(adj) - {s}  # connected: every other switch has a next hop


@given(fabrics())
def test_spanning_tree_is_a_tree_over_every_switch(fmap):
    adj = fmap.adjacency()
    tree = T.spanning_tree(adj, fmap.manager)
    assert len(tree) == len(adj) - 1 and tree <= fmap.links
    sub = T.FabricMap(1, fmap.switches, tree)
    assert set(T.distances(sub.adjacency(), fmap.manager)) == set(adj)  # connected, so no cycle
    bits = T.tree_bitmaps(tree, fmap.switches)
    assert sum(bin(b).count("1") for b in bits.values()) == 2 * len(tree)


def test_endpoints_skip_routes_and_report_collisions():
    fmap = T.FabricMap(1, {1: T.SwitchNode(1, 1, (), fabric_ports=1 << 9, table={b"A" * 6: 1, b"B" * 6: 10}),
                           2: T.SwitchNode(2, 2, (10,), fabric_ports=1 << 9, table={b"A" * 6: 2, b"B" * 6: 3})},
                       {T.link((1, 10), (2, 10))})
    eps, collisions = T.endpoints(fmap)
    assert eps == {b"A" * 6: (1, 1), b"B" * 6: (2, 3)} and [c["ignored"] for c in collisions] == [[2, 2]]
    assert T.wanted_routes(fmap, eps) == {1: {b"B" * 6: 10}, 2: {b"A" * 6: 10}}
