"""snet-router in process: the compiled loop in its thread forwards between two node
sockets on loopback, the control socket reports its counters, and stopping the daemon
joins the thread before the socket closes."""

import socket

import trio

from daemons.runtime.control import handle
from servernet.codec import Packet, envelope
from servernet.constants import TType
from servernet.routerd import CONTROL_SCHEMA, Routerd, parse

A, B = 0x04001, 0x08001


def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.setblocking(False)
    return s


async def test_router_daemon_forwards_and_reports(tmp_path):
    a, b, probe = udp(), udp(), udp()
    probe_port = probe.getsockname()[1]
    probe.close()  # a free port for the router
    cfg = parse("x", f"127.0.0.1:{probe_port}", [f"0=127.0.0.1:{a.getsockname()[1]}",
                                                  f"1=127.0.0.1:{b.getsockname()[1]}"],
                [f"{A:#x}=0", f"{B:#x}=1"], [], str(tmp_path / "x.sock"), "warning")
    r = Routerd(cfg)
    write = envelope(Packet(B, A, TType.WRITE, False, 3, 0, address=0x100000, data=b"servernet").encode(), 0)
    async with trio.open_nursery() as nursery:
        await nursery.start(r.run)
        a.sendto(write, cfg.listen)
        a.sendto(b"junk", cfg.listen)
        with trio.fail_after(5):
            await trio.lowlevel.wait_readable(b)
        assert b.recvfrom(2048) == (write, cfg.listen)
        with trio.fail_after(5):
            while True:
                st = await handle({"cmd": "status"}, r._control, CONTROL_SCHEMA, r.control_counters)
                if st["counters"].get("drop_runt"):
                    break
                await trio.sleep(0.01)
        assert st["counters"] == {"port0_rx": 1, "port1_tx": 1, "drop_runt": 1} and st["fabric"] == "X"
        assert st["routes"] == ["0x04001/20=0", "0x08001/20=1"]
        nursery.cancel_scope.cancel()
    assert not r.thread.is_alive() and r.sock.fileno() == -1  # the thread was stopped and joined, then the socket closed
    a.close()
    b.close()
