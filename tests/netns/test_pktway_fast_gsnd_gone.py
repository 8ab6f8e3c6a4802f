"""A pktwayd forwarding in C (both halves on gsnd, PacketWay dialect) whose out-going gsnd
goes away in the middle of a flood that SAN B cannot take (its host reads nothing): pktwayd
stays up, and what it could not send is counted (the send errors, what it held, then the
packets with no client to go to).  Before the compiled path held what had no room, such
frames waited in the client's backlog, and a send error there ended pktwayd."""

import os
import subprocess
import threading
import time

import pytest

from daemons.runtime.control import request
from daemons.ulpclient import UlpClient
from daemons.wire.ula import parse_ula
from lab.netns import BIN, Fabric, gsn_router_toml, poll
from pktwayd.constants import ETHERTYPE_PKTWAY, PT
from pktwayd.eep import Packet

H_A, R_A, H_B, R_B = 0x40, 0x50, 0x60, 0x51


@pytest.fixture
def net():
    with Fabric(2, prefix="pga") as fa, Fabric(2, prefix="pgb") as fb:
        ula_a, ula_b = fa.up(v6=False), fb.up(v6=False)
        cfg, control = fa.tmp / "pktwayd.toml", fa.tmp / "pktwayd.sock"
        cfg.write_text(gsn_router_toml("gone", control, [(R_A, 0x100, 0, fa.ulp_path(2), [(H_A, ula_a[0])]),
                                                        (R_B, 0x101, 0, fb.ulp_path(2), [(H_B, ula_b[0])])]))
        proc = subprocess.Popen([str(BIN / "pktwayd"), "-c", str(cfg)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        try:
            poll(lambda: control.exists(), 10, what="pktwayd control socket")
            poll(lambda: all(h["ulp_connected"] and len(h["rts"]) == 2
                             for h in request(str(control), {"cmd": "routes"})["halves"]), 10,
                 what="both halves up")
            yield fa, fb, ula_a, str(control), proc
        finally:
            proc.kill()
            proc.wait()


def test_pktwayd_outlives_the_gsnd_it_forwards_to(net):
    fa, fb, ula_a, control, proc = net
    stop = threading.Event()
    raw = Packet(dt=H_B, sa=H_A, pt=PT.USER, data=os.urandom(65536)).encode()

    def flood():
        with UlpClient(fa.ulp_path(1)) as c:
            c.bind(ETHERTYPE_PKTWAY)
            while not stop.is_set():
                c.send(parse_ula(ula_a[1]), raw, vc=1, ethertype=ETHERTYPE_PKTWAY)

    t = threading.Thread(target=flood, daemon=True)  # a send blocked for good must not keep pytest alive
    slow_b = UlpClient(fb.ulp_path(1))  # host B binds and reads nothing: SAN B backs up to pktwayd
    slow_b.bind(ETHERTYPE_PKTWAY)
    t.start()
    try:
        def half(i):
            return request(control, {"cmd": "routes"})["halves"][i]["counters"]
        poll(lambda: half(1).get("tx_packets", 0) > 200, 20, what="forwarding under way")
        fb.kill("gsnd2")  # router half B's gsnd
        time.sleep(3)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        b = half(1)
        lost = sum(v for k, v in b.items() if k.startswith("tx_error_")) + b.get("tx_unreachable", 0) \
            + b.get("tx_dropped_reconnect", 0)
        assert lost > 0, b
    finally:
        stop.set()
        slow_b.close()
        t.join(10)
