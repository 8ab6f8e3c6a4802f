"""The SM, switch and port cores together on virtual time (tests/unit/ibnet.py): port
discovery and LIDs, carrier after the broadcast join, ARP type 32 end to end, the
shadow-ARP machine (queue of 3 flushed in order, failed PathRecord drops it, 60 s
reaping), partitions, SM restart (re-register, paths invalid), multicast tables."""

from ib import addr, mgmt, sa
from ib.constants import IPOIB_UD_MTU_2048, NEIGH_QUEUE_MAX
from ib.partitions import Partition
from ib.shadow import State

from tests.unit.ibnet import Net, arp_reply, arp_request, guid, ip_frame

# host 1 on switch 1, hosts 2 and 3 on switch 2; switches joined port 3 <-> port 3
LINKS = [(("sw", 1), 1, ("ca", 1), 1), (("sw", 2), 1, ("ca", 2), 1), (("sw", 2), 2, ("ca", 3), 1),
         (("sw", 1), 3, ("sw", 2), 3)]


def three(partitions=None, ifs=None):
    ifs = ifs or {h: [("ib0", None)] for h in (1, 2, 3)}
    net = Net({1: [1, 2, 3], 2: [1, 2, 3]}, ifs, LINKS, partitions)
    net.run(3.0)
    return net


def resolve(net, a, b, ifname="ib0", ip="10.0.0.{}"):
    """Host a's kernel ARPs for host b and gets the reply; returns the REMAC a learnt."""
    net.send(a, ifname, arp_request(net.mac(a), ip.format(a), ip.format(b)))
    req = [f for f in net.frames(b, ifname) if f[12:14] == b"\x08\x06"]
    assert req, "the ARP request did not arrive"
    remac_a = req[-1][6:12]
    net.send(b, ifname, arp_reply(net.mac(b), ip.format(b), remac_a, ip.format(a)))
    net.run(0.1)
    rep = [f for f in net.frames(a, ifname) if f[12:14] == b"\x08\x06"]
    assert rep, "the ARP reply did not arrive"
    return rep[-1][6:12]


def test_discovery_lids_and_carrier():
    net = three()
    lids = {h: net.hosts[h].lid for h in (1, 2, 3)}
    assert sorted(lids.values()) == [2, 3, 4]
    assert net.sm.lids == {guid(h): lids[h] for h in (1, 2, 3)}
    for h in (1, 2, 3):  # carrier up with the broadcast group's MTU
        assert net.carrier[(h, "ib0")] == (True, IPOIB_UD_MTU_2048)
        assert net.hosts[h].ifaces[0].qkey == 0x0B1B
    # both switches route every LID, switch 1 toward host 2 through its port 3
    assert net.sw[1].lft[lids[2]] == 3 and net.sw[1].lft[lids[1]] == 1
    assert net.sw[2].lft[lids[3]] == 2
    bmlid = net.sm.groups[addr.broadcast_mgid(0x7FFF)].mlid
    assert net.sw[2].mft[bmlid] == (1 << 1) | (1 << 2) | (1 << 3)


def test_no_carrier_before_the_broadcast_join():
    net = Net({1: [1, 2, 3], 2: [1, 2, 3]}, {h: [("ib0", None)] for h in (1, 2, 3)}, LINKS)
    net.kill_sm()
    net.run(5.0)
    assert (1, "ib0") not in net.carrier
    net.send(1, "ib0", arp_request(net.mac(1), "10.0.0.1", "10.0.0.2"))
    assert net.hosts[1].counters["tx_drop_no_carrier"] == 1


def test_arp_is_type_32_on_the_fabric_and_ping_goes_through():
    net = three()
    sent = []
    orig = net._to_cable

    def spy(node, port, data):
        if node == ("ca", 1):
            sent.append(data)
        orig(node, port, data)

    net._to_cable = spy
    remac2 = resolve(net, 1, 2)
    assert remac2 == addr.remac(0x48, net.hosts[2].lid)
    from ib import packet

    arps = [packet.decode(d).payload for d in sent if packet.decode(d).payload[:2] == b"\x08\x06"]
    assert len(arps[0]) == 4 + 56 and arps[0][4:6] == b"\x00\x20"
    net.send(1, "ib0", ip_frame(net.mac(1), remac2, "10.0.0.1", "10.0.0.2", b"ping"))
    got = [f for f in net.frames(2) if f[12:14] == b"\x08\x00"]
    assert got and got[0][-4:] == b"ping" and got[0][:6] == net.mac(2)
    assert not [f for f in net.frames(3) if f[12:14] == b"\x08\x00"]  # unicast went to host 2 only


def test_pending_queue_holds_three_and_flushes_in_order():
    net = three()
    net.hold_kinds = {mgmt.Kind.PATH_REPLY}
    remac_unknown = None
    # host 2 ARPs host 1; host 1 learns host 2 (PENDING, query held back by the SA)
    net.send(2, "ib0", arp_request(net.mac(2), "10.0.0.2", "10.0.0.1"))
    req = [f for f in net.frames(1) if f[12:14] == b"\x08\x06"][-1]
    remac_unknown = req[6:12]
    shadow = net.hosts[1].ifaces[0].shadow
    assert [n.state for n in shadow.neighs.values()] == [State.PENDING]
    for k in range(5):
        net.send(1, "ib0", ip_frame(net.mac(1), remac_unknown, "10.0.0.1", "10.0.0.2", b"seq%d" % k))
    assert net.hosts[1].counters["drop_neigh_queue_full"] == 5 - NEIGH_QUEUE_MAX
    assert not [f for f in net.frames(2) if f[12:14] == b"\x08\x00"]
    net.run(0.5)
    net.release_held()
    got = [f[-4:] for f in net.frames(2) if f[12:14] == b"\x08\x00"]
    assert got == [b"seq0", b"seq1", b"seq2"]
    assert [n.state for n in shadow.neighs.values()] == [State.RESOLVED]


def test_failed_path_record_drops_the_queue_and_the_entry():
    net = three()
    net.send(2, "ib0", arp_request(net.mac(2), "10.0.0.2", "10.0.0.1"))
    remac2 = [f for f in net.frames(1) if f[12:14] == b"\x08\x06"][-1][6:12]
    shadow = net.hosts[1].ifaces[0].shadow
    shadow.neighs.clear()  # start from ABSENT, then lose the SM
    net.kill_sm()
    for _k in range(2):
        net.send(1, "ib0", ip_frame(net.mac(1), remac2, "10.0.0.1", "10.0.0.2", b"lost"))
    net.run(2.5)
    assert shadow.neighs  # still PENDING: retries at 1000 ms
    assert net.hosts[1].counters["sa_retries"] >= 2
    net.run(1.0)
    assert not shadow.neighs
    assert net.hosts[1].counters["drop_path_failed"] == 2
    assert not [f for f in net.frames(2) if f[12:14] == b"\x08\x00"]


def test_idle_neighbours_are_reaped_after_60_s():
    net = three()
    remac2 = resolve(net, 1, 2)
    net.send(1, "ib0", ip_frame(net.mac(1), remac2, "10.0.0.1", "10.0.0.2", b"x"))
    shadow = net.hosts[1].ifaces[0].shadow
    assert shadow.neighs
    net.run(50.0)
    assert shadow.neighs
    net.run(11.0)
    assert not shadow.neighs and net.hosts[1].counters["neigh_reaped"] >= 1


def test_own_multicast_echo_is_dropped():
    net = three()
    net.send(1, "ib0", arp_request(net.mac(1), "10.0.0.1", "10.0.0.9"))
    # a loop back to the sender: deliver host 1's broadcast to itself
    from ib import packet

    ifc = net.hosts[1].ifaces[0]
    g = ifc.groups[ifc.bcast]
    pkt = packet.UdPacket(slid=net.hosts[1].lid, dlid=g.mlid, pkey=ifc.pkey, dqpn=0xFFFFFF, sqpn=ifc.qpn,
                          qkey=ifc.qkey, payload=b"\x08\x06\x00\x00" + bytes(56),
                          grh=packet.Grh(net.hosts[1].gid, g.mgid)).encode()
    net.hosts[1].on_cable(pkt, net.now)
    assert net.hosts[1].counters["rx_drop_own_mcast_echo"] == 1


PARTS = [Partition("default", 0x7FFF, all="full"),
         Partition("red", 0x0001, full={guid(1), guid(2)}),
         Partition("blue", 0x0002, full={guid(3)}, limited={guid(1)})]


def test_partitions_isolate():
    ifs = {1: [("ib0", None), ("ib0.8001", 0x8001), ("ib0.8002", 0x8002)], 2: [("ib0", None), ("ib0.8001", 0x8001)],
           3: [("ib0", None), ("ib0.8001", 0x8001), ("ib0.8002", 0x8002)]}
    net = three(PARTS, ifs)
    assert net.carrier[(1, "ib0.8001")][0] and net.carrier[(2, "ib0.8001")][0]
    assert net.carrier.get((3, "ib0.8001"), (False,))[0] is False  # host 3 is not in red
    assert net.hosts[3].counters["ib0.8001_pkey_absent"] >= 1
    assert net.hosts[1].ifaces[2].pkey == 0x0002  # limited member of blue
    resolve(net, 1, 2, "ib0.8001", "10.1.0.{}")
    # host 3's broadcasts in blue never reach red interfaces
    net.send(3, "ib0.8002", arp_request(net.mac(3), "10.1.0.3", "10.1.0.1"))
    assert not net.frames(1, "ib0.8001") and not net.frames(2, "ib0.8001")
    assert net.frames(1, "ib0.8002")  # host 1 is a (limited) member of blue
    # the SA gives no red path between 1 and 3, and a blue one between them (3 is full)
    sm = net.sm
    p1, p3 = sm.ports[guid(1)], sm.ports[guid(3)]
    assert sm._shared_pkey(p1, p3, 0x8001) is None
    assert sm._shared_pkey(p1, p3, 0x8002) == 0x0002


def test_sm_restart_reregisters_and_invalidates_paths():
    net = three()
    remac2 = resolve(net, 1, 2)
    net.send(1, "ib0", ip_frame(net.mac(1), remac2, "10.0.0.1", "10.0.0.2", b"one"))
    assert [f[-3:] for f in net.frames(2) if f[12:14] == b"\x08\x00"] == [b"one"]
    lids = {h: net.hosts[h].lid for h in (1, 2, 3)}
    net.kill_sm()
    net.run(1.0)
    # the fabric keeps forwarding without its SM
    net.send(1, "ib0", ip_frame(net.mac(1), remac2, "10.0.0.1", "10.0.0.2", b"two"))
    assert [f[-3:] for f in net.frames(2) if f[12:14] == b"\x08\x00"] == [b"two"]
    net.start_sm(epoch=2)
    net.run(5.0)
    for h in (1, 2, 3):
        assert net.hosts[h].counters["sm_reregister"] == 1
        assert net.hosts[h].lid == lids[h]  # LIDs kept (the state the driver persists)
        assert net.carrier[(h, "ib0")][0]
    shadow = net.hosts[1].ifaces[0].shadow
    assert all(n.state is State.STALE for n in shadow.neighs.values())
    net.send(1, "ib0", ip_frame(net.mac(1), remac2, "10.0.0.1", "10.0.0.2", b"three"))
    net.run(0.1)
    assert [f[-5:] for f in net.frames(2) if f[12:14] == b"\x08\x00"] == [b"three"]
    assert all(n.state is State.RESOLVED for n in shadow.neighs.values())


def test_ipv4_multicast_group_join_and_forwarding():
    net = three()
    mg = addr.mgid_ipv4("224.0.0.251", 0x7FFF)
    for h in (2, 3):
        net.hosts[h].set_kernel_groups("ib0", {mg}, net.now)
    net.run(0.5)
    g = net.sm.groups[mg]
    assert len(g.members) == 2 and g.qkey == 0x0B1B
    frame = ip_frame(net.mac(1), bytes.fromhex("01005e0000fb"), "10.0.0.1", "224.0.0.251", b"mdns")
    net.send(1, "ib0", frame)  # a send-only join first, then the frame
    net.run(0.5)
    for h in (2, 3):
        got = [f for f in net.frames(h) if f[12:14] == b"\x08\x00"]
        assert got and got[0][:6] == bytes.fromhex("01005e0000fb")
    assert net.sm.groups[mg].members[net.hosts[1].gid] == sa.JOIN_SENDONLY_FULL
    # host 3 leaves: only host 2 gets the next one
    net.hosts[3].set_kernel_groups("ib0", set(), net.now)
    net.run(0.5)
    net.send(1, "ib0", frame)
    assert [f for f in net.frames(2) if f[12:14] == b"\x08\x00"]
    assert not [f for f in net.frames(3) if f[12:14] == b"\x08\x00"]


def test_path_record_refused_for_unregistered_or_spoofed_source():
    net = three()
    rec = sa.PathRecord(dgid=net.hosts[2].gid, sgid=net.hosts[3].gid, pkey=0xFFFF)
    m = mgmt.Mgmt(mgmt.Kind.PATH_GET, 7, body=mgmt.masked_body(sa.PR_IPOIB_QUERY, rec.encode()))
    net.sm.on_datagram(m.encode(), ("h", 1), net.now)  # host 1 claiming host 3's GID
    (dst, data), = net.sm.outgoing()
    assert mgmt.decode(data).status == mgmt.Status.NOT_REGISTERED


def test_a_port_the_sm_forgot_is_told_to_reregister():
    net = three()
    bmgid = addr.broadcast_mgid(0x7FFF)
    for h in (1, 2, 3):  # the SM is stopped long enough to expire every port, then resumes
        net.sm.ports[guid(h)].seen -= 100
    net.sm.handle_timer(net.now)
    assert not net.sm.ports and not net.sm.groups[bmgid].members
    net.run(3.0)
    assert len(net.sm.groups[bmgid].members) == 3  # ClientReregister made them join again
    assert all(net.hosts[h].counters["sm_reregister"] == 1 for h in (1, 2, 3))
    resolve(net, 1, 3)


def test_a_kernel_probe_re_queries_the_path_and_still_goes_out():
    net = three()
    remac2 = resolve(net, 1, 2)
    net.send(1, "ib0", ip_frame(net.mac(1), remac2, "10.0.0.1", "10.0.0.2", b"data"))
    queries = net.sm.counters["path_queries"]
    probe = arp_request(net.mac(1), "10.0.0.1", "10.0.0.2")
    probe = remac2 + probe[6:]  # unicast to the neighbour, as the kernel revalidates it
    net.send(1, "ib0", probe)
    net.run(0.1)
    assert net.hosts[1].counters["neigh_refreshed"] == 1
    assert net.sm.counters["path_queries"] == queries + 1
    got = [f for f in net.frames(2) if f[12:14] == b"\x08\x06"]
    assert got and got[-1][:6] == net.mac(2)  # the probe itself, after the fresh PathRecord
    shadow = net.hosts[1].ifaces[0].shadow
    assert all(n.state is State.RESOLVED for n in shadow.neighs.values())


def test_sm_caps_registrations_per_source_and_joins_per_port():
    from ib.constants import SM_MAX_JOINS_PER_PORT, SM_MAX_PORTS_PER_ADDR

    net = three()
    sm = net.sm
    for k in range(SM_MAX_PORTS_PER_ADDR + 3):
        sm.on_datagram(mgmt.Mgmt(mgmt.Kind.REGISTER, body=mgmt.register_body(0x7000 + k, 1)).encode(), ("evil", 1), 0)
    statuses = [m.status for _, d in sm.outgoing() if (m := mgmt.decode(d)).kind == mgmt.Kind.REGISTER_REPLY]
    assert statuses.count(mgmt.Status.OK) == SM_MAX_PORTS_PER_ADDR
    assert sm.counters["register_refused_too_many"] == 3
    assert len(sm.lids) == 3 + SM_MAX_PORTS_PER_ADDR  # no LID spent on the refused ones
    gid = net.hosts[1].gid
    for k in range(SM_MAX_JOINS_PER_PORT + 5):
        rec = sa.MCMemberRecord(mgid=addr.mgid_ipv4(f"239.1.{k // 250}.{k % 250}", 0x7FFF), port_gid=gid, qkey=0xB1B,
                                pkey=0xFFFF, join_state=1)
        m = mgmt.Mgmt(mgmt.Kind.MC_JOIN, k, body=mgmt.masked_body(0x1FFFF, rec.encode()))
        sm.on_datagram(m.encode(), ("h", 1), 0)
    sm.outgoing()
    assert sum(gid in g.members for g in sm.groups.values()) == SM_MAX_JOINS_PER_PORT
    assert sm.counters["mc_join_refused_too_many"] >= 5


def test_lid_state_file(tmp_path):
    from ib.smd import load_lids, save_lids

    f = tmp_path / "sm" / "lids.json"
    assert load_lids(f) == {}
    save_lids(f, {guid(1): 2, guid(2): 7})
    assert load_lids(f) == {guid(1): 2, guid(2): 7}
    f.write_text("{not json")
    assert load_lids(f) == {}  # damaged: logged, LIDs assigned afresh
    f.write_text('{"lids": {"0x5": 49152, "0x6": 3}}')
    assert load_lids(f) == {6: 3}  # a multicast LID is not a port's


def test_idle_send_only_groups_are_left_after_60_s():
    net = three()
    mg = addr.mgid_ipv4("239.9.9.9", 0x7FFF)
    frame = ip_frame(net.mac(1), bytes.fromhex("01005e090909"), "10.0.0.1", "239.9.9.9", b"once")
    net.send(1, "ib0", frame)
    net.run(0.5)
    assert net.sm.groups[mg].members == {net.hosts[1].gid: sa.JOIN_SENDONLY_FULL}
    net.run(30.0)
    net.send(1, "ib0", frame)  # used again: kept
    net.run(45.0)
    assert mg in net.hosts[1].ifaces[0].groups
    net.run(20.0)
    assert mg not in net.hosts[1].ifaces[0].groups and mg not in net.sm.groups  # left; the SM dropped the empty group
    assert net.hosts[1].counters["mc_sendonly_reaped"] == 1


def test_a_port_cannot_create_a_group_with_a_controlled_qkey():
    net = three()
    rec = sa.MCMemberRecord(mgid=addr.mgid_ipv4("239.1.1.1", 0x7FFF), port_gid=net.hosts[1].gid, qkey=0x80010000,
                            pkey=0xFFFF, join_state=1)
    net.sm.on_datagram(mgmt.Mgmt(mgmt.Kind.MC_JOIN, 1, body=mgmt.masked_body(0x1FFFF, rec.encode())).encode(),
                       ("h", 1), net.now)
    (_, data), = [o for o in net.sm.outgoing() if mgmt.decode(o[1]).kind == mgmt.Kind.MC_REPLY]
    assert mgmt.decode(data).status == mgmt.Status.REQ_INVALID
    assert net.sm.counters["mc_privileged_qkey_refused"] == 1
