"""gsn_servernet.lua on real traffic: tcpdump on node a's underlay while snetd writes to
and reads from node b across snet-router processes (both fabrics), then tshark."""

from __future__ import annotations

import pytest

from lab.netns import BIN, Fabric, poll
from tests.netns.test_dissectors import start_capture, stop_capture
from tests.netns.test_servernet_processes import A, B, BUF, node_toml, snetctl, start_router
from tests.tshark import experts, needs_tshark, read_pcap, rewrite_pcap, tshark_json, values

pytestmark = needs_tshark


@pytest.fixture(scope="module")
def captured():
    with Fabric(2, prefix="wsn") as fa:
        for name in ("x", "x2", "y"):
            start_router(fa, name)
        pcap = start_capture(fa, 1, "tcpdump1")
        for i, (me, peer, name, pname) in enumerate([(A, B, "a", "b"), (B, A, "b", "a")], 1):
            (fa.tmp / f"{name}.toml").write_text(node_toml(fa, i, me, peer, name, pname))
            fa.spawn(f"snetd-{name}", i, str(BIN / "snetd"), "-c", str(fa.tmp / f"{name}.toml"))
        poll(lambda: (fa.tmp / "a.sock").exists() and (fa.tmp / "b.sock").exists(), 10, what="both nodes")
        snetctl(fa, "a", "write", "b", hex(BUF + 8), "--hex", b"ServerNet".hex())
        assert snetctl(fa, "a", "read", "b", hex(BUF + 8), "9").stdout.strip() == b"ServerNet".hex()
        stop_capture(fa, "tcpdump1")
        yield pcap, tshark_json(pcap)


def test_real_write_and_read_decoded(captured):
    _, js = captured
    assert js and not experts(js)
    assert set(values(js, "servernet.crc_ok")) == {"1"}
    ends = {int(v, 16) for v in values(js, "servernet.did") + values(js, "servernet.sid")}
    assert ends == {A, B}
    ttypes = set(zip((int(v, 16) for v in values(js, "servernet.ttype")), values(js, "servernet.rsp")))
    assert {(1, "0"), (1, "1"), (0, "0"), (0, "1")} <= ttypes  # WRITE and READ, requests and responses
    data = b"".join(bytes.fromhex(v.replace(":", "")) for v in values(js, "servernet.data"))
    assert b"ServerNet" in data
    assert BUF + 8 in {int(v, 16) for v in values(js, "servernet.address")}


def test_flipped_byte_in_real_capture_is_crc_bad(captured, tmp_path):
    path, js = captured
    linktype, recs = read_pcap(path)
    frame = next(int(p["_source"]["layers"]["frame"]["frame.number"]) for p in js if values(p, "servernet.data"))
    head, pkt = recs[frame - 1]
    bad = bytearray(pkt)
    bad[-6] ^= 0x20  # in the data, before the CRC
    recs[frame - 1] = (head, bytes(bad))
    out = tshark_json(rewrite_pcap(path, tmp_path / "bad.pcap", recs, linktype))[frame - 1]
    assert values(out, "servernet.crc_ok") == ["0"] and any(e.startswith("CRC-32 0x") for e in experts(out))
