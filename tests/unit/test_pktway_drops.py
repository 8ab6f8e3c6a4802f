"""pktwayd counts an undecodable packet by its field (pktwayd/drops.py), from its SAN and
from its twin alike."""

from pktwayd.drops import BadPacket
from pktwayd.engine import Engine
from pktwayd.routing import HalfRouter


def test_engine_counts_by_member():
    e = Engine(HalfRouter(0x50, 1, 1024, 0x60, ()), now=0.0)
    assert e.from_san_bytes(b"\x00" * 7) == [] and e.from_twin_bytes(b"\x00" * 7) == []
    assert e.counters == {BadPacket.PACKET: 1, "twin_rx_bad_packet": 1}
