"""gsn_ib.lua on real traffic: tcpdump on host 1's underlay while ipoibd registers with
ib-sm, joins its groups, resolves a path and pings across the ib-switches, then tshark."""

from __future__ import annotations

import functools

import pytest

from lab.netns import Fabric
from tests.netns.test_dissectors import start_capture, stop_capture
from tests.netns.test_ipoib_processes import GUIDS, IbFabric
from tests.tshark import experts, needs_tshark, read_pcap, rewrite_pcap, tshark_json, values

pytestmark = needs_tshark


@pytest.fixture(scope="module")
def captured():
    f = IbFabric(functools.partial(Fabric, prefix="wib"))
    try:
        pcap = start_capture(f.fab, 1, "tcpdump1")
        f.up()
        ping = f.ping(1, "192.0.2.2", "-c", "1", "-W", "5")
        assert ping.returncode == 0, ping.stdout + ping.stderr
        stop_capture(f.fab, "tcpdump1")
        yield pcap, tshark_json(pcap)
    finally:
        f.fab.close()


def ints(js, key: str) -> set[int]:
    return {int(v, 0) for v in values(js, key)}


def test_real_ud_packets_and_management_decoded(captured):
    _, js = captured
    ud = [p for p in js if values(p, "gsn_ib.lrh.dlid")]
    sm = [p for p in js if values(p, "gsn_ib_mgmt.kind")]
    assert ud and sm
    assert set(values(ud, "gsn_ib.icrc_ok")) == {"1"} and not experts(js)
    assert {0x0800, 0x0806} <= ints(ud, "gsn_ib.ipoib.type")  # IPv4 and ARP handed on
    assert "8" in values(ud, "icmp.type") and "0" in values(ud, "icmp.type")
    assert GUIDS[1] in ints(ud, "gsn_ib.hello.guid")  # host 1's cable hello
    kinds = ints(sm, "gsn_ib_mgmt.kind")
    assert {1, 2, 3, 4, 5, 7} <= kinds  # REGISTER, its reply, PATH_GET/REPLY, MC_JOIN, MC_REPLY
    assert ints(sm, "gsn_ib_mgmt.port_guid") >= {GUIDS[1]}
    assert ints(sm, "gsn_ib_mgmt.pr.dlid") and ints(sm, "gsn_ib_mgmt.mc.mlid")


def test_flipped_byte_in_real_capture_is_icrc_bad(captured, tmp_path):
    path, js = captured
    linktype, recs = read_pcap(path)
    frame = next(int(p["_source"]["layers"]["frame"]["frame.number"]) for p in js if "8" in values(p, "icmp.type"))
    head, pkt = recs[frame - 1]
    bad = bytearray(pkt)
    bad[-6] ^= 0x20  # in the ICMP payload, before the ICRC
    recs[frame - 1] = (head, bytes(bad))
    out = tshark_json(rewrite_pcap(path, tmp_path / "bad.pcap", recs, linktype))[frame - 1]
    assert values(out, "gsn_ib.icrc_ok") == ["0"] and any(e.startswith("ICRC 0x") for e in experts(out))
