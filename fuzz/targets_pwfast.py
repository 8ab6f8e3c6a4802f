"""Fuzz targets for pktwayd._pwfast, the compiled IP-across-PacketWay path, against its
Python oracles (the half-router pair of engine.Engine, and pw0's ipnode.IpNode)."""

from __future__ import annotations

from .draw import Draw
from .registry import target


@target("pktwayd.fastpath", seeds=[b"", b"\x04" * 60, bytes(range(160))])
def pwfast(data: bytes) -> None:
    """Built-then-mutated EEP frames and IP packets: what the C code forwards (router) or
    sends and writes (pw0) is byte for byte what the Python path does, counters alike."""
    from daemons.wire.ulp import HEADER, Op
    from pktwayd.constants import ETHERTYPE_PKTWAY
    from pktwayd.eep import Packet
    from pktwayd.fastpath import ip_peers, router_table
    from tests.unit.test_pw_ip import v4, v6
    from tests.unit.test_pwfast_differential import (H_A, H_B, H_B2, ROUTER_ULA, ULA, ip_loop, ip_node, pair,
                                                     python_forward, recv_frame, router)

    from .mutate import mutate_bytes
    from .pktway import wire

    d = Draw(data)
    a, b = pair(d.choice([256, 1024, 8192]), d.choice([256, 1024, 8192]))
    r, _socks = router(a, b)
    for _ in range(1 + d.below(4)):
        frame = recv_frame(ULA[d.choice([H_A, H_B, H_B2])], wire(d, dts=[H_B, H_B2]))
        if d.below(4) == 0:
            frame = mutate_bytes(d, frame, offsets=list(range(10)))
        fast = r.classify(frame)
        before = a.counters["l3_forwarded"]
        want = python_forward(a, b, frame)
        assert fast is None or (fast == want and a.counters["l3_forwarded"] == before + 1), "router differs"
        r.set_table(router_table(a, b), sorted(a.routers))  # as pktwayd does after every engine action
    core = ip_node(d.choice([None, 0, 600, 65535]), d.below(4) == 0)
    loop, _ipsocks = ip_loop(core)
    for _ in range(1 + d.below(4)):
        ip = (v4(d.choice(["10.77.0.1", "10.77.0.2"]), d.choice(["10.77.0.2", "224.0.0.9", "10.77.0.8"]),
                 20 + d.below(1500)) if d.bool() else
              v6(d.choice(["fd77::1", "fd77::2"]), d.choice(["fd77::2", "ff02::1"]), 40 + d.below(1500)))
        ip = mutate_bytes(d, ip, offsets=list(range(44))) if d.bool() else ip
        fast = loop.tx_one(ip)
        acts = core.from_tun(ip, 0.0)
        assert fast is None or [fast] == [HEADER.pack(Op.SEND, 1, ETHERTYPE_PKTWAY, ROUTER_ULA) + p.encode()
                                          for w, p, route in acts if w == "pw" and route is None], "pw0 tx differs"
        loop.set_peers(ip_peers(core))  # as pw0 does after every core action
        payload = Packet(dt=d.choice([0x40, 0x41]), sa=0x60, pt=d.choice([0x0800, 0x86DD, 6]), data=ip).encode()
        payload = mutate_bytes(d, payload, offsets=list(range(24))) if d.bool() else payload
        fast = loop.rx_one(recv_frame(ROUTER_ULA, payload))
        acts = core.from_pw_bytes(payload, "pw0", ROUTER_ULA, 0.0)
        assert fast is None or acts == [("tun", fast)], "pw0 rx differs"
        loop.set_peers(ip_peers(core))
