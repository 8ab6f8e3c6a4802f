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


def _drain(s, size: int) -> list[bytes]:
    out = []
    while True:
        try:
            out.append(s.recv(size))
        except BlockingIOError:
            return out


@target("pktwayd.fastburst", seeds=[b"", b"\x05" * 60, bytes(range(160))])
def pwfast_burst(data: bytes) -> None:
    """The compiled bursts over real sockets (Router.burst, Ip.tx_burst, Ip.rx_burst: frames
    received back to back into one buffer, a drawn byte cap and frame count per burst,
    sendmmsg of header, payload and padding pieces): what each burst forwards, in order, is
    what the per-frame functions (classify, tx_one, rx_one; pktwayd.fastpath checks those
    against Python) give, and everything else comes back whole, in order."""
    import socket

    from pktwayd._pwfast import Ip, Router
    from pktwayd.eep import Packet
    from pktwayd.fastpath import router_table
    from tests.unit.test_pw_ip import v4, v6
    from tests.unit.test_pwfast_differential import (ET, FRAME_MAX, H_A, H_B, H_B2, ME, ROUTER_ULA, ULA, ip_node,
                                                     pair, recv_frame)

    from pktwayd.fastpath import ip_peers

    from .mutate import mutate_bytes
    from .pktway import wire

    def run(frames, send, burst, consumed, far, one, size, flush=lambda: []):
        """Send frames (at most 8: a Unix datagram queue holds 10), burst until all are taken:
        the frames forwarded (received on `far`, then those handed back as blocked) are what
        `one` gives for each frame it takes, those left for Python the others, each in order."""
        frames = [f for f in frames if f]  # an empty message reads as EOF (gsnd never sends one)
        want = [one(f) for f in frames]
        for f in frames:
            send.send(f)
        got, slow, left = [], [], len(frames)
        while left:
            res = burst(1 + d.below(9))
            n, back, blocked, *moved = consumed(res)  # moved: it sent frames it had held
            assert n or any(moved), f"a burst took nothing while frames were waiting: {res!r:.300}"
            left -= n
            got += _drain(far, size) + blocked
            slow += back
        got += flush()
        assert got == [w for f, w in zip(frames, want) if w is not None], "a burst forwarded other frames"
        assert slow == [f for f, w in zip(frames, want) if w is None], "a burst handed back other frames"

    d = Draw(data)
    a, b = pair(d.choice([256, 1024, 8192]), d.choice([256, 1024, 8192]))
    in_a, in_c = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    out_c, out_b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ulp_g, ulp_c = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    tun_c, tun_far = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        for s in (out_b, ulp_g, tun_far, tun_c):
            s.setblocking(False)
        r = Router(in_c, out_c, ET, FRAME_MAX, 1 + d.below(20000))  # the byte cap: often fewer frames than waiting
        r.set_table(router_table(a, b), sorted(a.routers))
        frames = []
        for _ in range(d.below(9)):
            f = recv_frame(ULA[d.choice([H_A, H_B, H_B2])], wire(d, dts=[H_B, H_B2]))
            frames.append(mutate_bytes(d, f, offsets=list(range(10))) if d.below(4) == 0 else f)
        held = 0

        def taken(res):
            """Frames a burst took from in_c: sent now (frames it held before go first, and
            count in sent), handed back, or held for want of room on out_c."""
            nonlocal held
            sent, slow, errs, eof, rerr, oversized, now_held = res
            assert (errs, eof, rerr, oversized) == ([], 0, 0, 0), f"router burst: {res!r:.300}"
            n, moved, held = sent - held + now_held + len(slow), sent > 0 and held > 0, now_held
            return n, slow, [], moved

        def send_held():
            """What had no room goes out as out_b is read, still in order."""
            late = []
            while r.held():
                late += _drain(out_b, FRAME_MAX)
                assert Router.send_held(r)[1] == []
            return late + _drain(out_b, FRAME_MAX)

        run(frames, in_a, lambda n: r.burst(n, 0), taken, out_b, r.classify, FRAME_MAX, send_held)
        assert r.burst(1, 0) == (0, [], [], 0, 0, 0, 0), "nothing waiting"

        core = ip_node(d.choice([None, 0, 600, 65535]), d.below(4) == 0)
        loop = Ip(tun_c.fileno(), ulp_c, ME, ROUTER_ULA, ET, FRAME_MAX, 1 + d.below(20000), 65600)
        loop.set_peers(ip_peers(core))
        ips = []
        for _ in range(d.below(9)):
            ip = (v4(d.choice(["10.77.0.1", "10.77.0.2"]), d.choice(["10.77.0.2", "224.0.0.9", "10.77.0.8"]),
                     20 + d.below(1500)) if d.bool() else
                  v6(d.choice(["fd77::1", "fd77::2"]), d.choice(["fd77::2", "ff02::1"]), 40 + d.below(1500)))
            ips.append(mutate_bytes(d, ip, offsets=list(range(44))) if d.bool() else ip)
        run(ips, tun_far, lambda n: loop.tx_burst(n, 0), lambda res: (res[0] + res[1] + len(res[2]), res[2], res[3]),
            ulp_g, loop.tx_one, FRAME_MAX)
        back = []
        for _ in range(d.below(9)):
            ip = v4("10.77.0.2", "10.77.0.1", 20 + d.below(1500)) if d.bool() else v6("fd77::2", "fd77::1", 40 + d.below(1500))
            payload = Packet(dt=d.choice([0x40, 0x41]), sa=0x60, pt=d.choice([0x0800, 0x86DD, 6]), data=ip).encode()
            back.append(recv_frame(ROUTER_ULA, mutate_bytes(d, payload, offsets=list(range(24))) if d.bool() else payload))

        def rx(res):
            assert res[3:] == (0, 0, 0, [], 0), f"rx_burst: EOF, an error, a full TUN or an oversized frame: {res!r:.300}"
            return res[0] + res[1] + len(res[2]), res[2], []
        run(back, ulp_g, loop.rx_burst, rx, tun_far, loop.rx_one, 70000)
    finally:
        for s in (in_a, in_c, out_c, out_b, ulp_g, ulp_c, tun_c, tun_far):
            s.close()
