"""snetd's control requests, in process: two nodes cabled back to back over loopback
UDP (each node's "router" is the other node's socket), requests checked against the
schema at the edge."""

import random
import socket
from collections import Counter

import trio

from daemons.runtime.control import handle
from servernet.avt import Window
from servernet.config import NodeConfig, Peer
from servernet.constants import Fabric
from servernet.noded import CONTROL_SCHEMA, Snetd, pattern

A, B = 0x04001, 0x08001


def free_ports(n):
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def configs(tmp_path):
    ax, ay, bx, by = (("127.0.0.1", p) for p in free_ports(4))

    def cfg(me, peer, name, x, y, px, py):
        return NodeConfig(me, name, str(tmp_path / f"{name}.sock"), {Fabric.X: (x, px), Fabric.Y: (y, py)},
                          [Peer(peer, "peer", 0x300000)],
                          [Window("buf", 0x100, 256, "rw"), Window("bell", 0x300, 1, "w", interrupt=True)],
                          timeout=0.2)

    return cfg(A, B, "a", ax, ay, bx, by), cfg(B, A, "b", bx, by, ax, ay)


async def ask(d, **req):
    return await handle(req, d._control, CONTROL_SCHEMA, Counter())


async def test_control_requests(tmp_path):
    ca, cb = configs(tmp_path)
    async with trio.open_nursery() as nursery:
        a, b = Snetd(ca), Snetd(cb)
        await nursery.start(a.run)
        await nursery.start(b.run)
        r = await ask(a, cmd="write", peer="peer", address=0x100010, data="00112233")
        assert r["ok"] and r["length"] == 4
        r = await ask(a, cmd="read", peer=hex(B), address=0x100010, length=100)
        assert r["ok"] and r["data"] == "00112233" + "00" * 96
        r = await ask(a, cmd="read", peer="peer", address=0x900000, length=4)
        assert r == {"ok": False, "error": "nak"}
        r = await ask(a, cmd="write", peer="nobody", address=0, data="00")
        assert not r["ok"] and "unknown peer" in r["error"]
        r = await ask(a, cmd="block", peer="peer", address=0x100000, length=100_000, seed=9, fabric="y")
        assert r["ok"] and r["packets"] == {"Y": 1564}  # 1563 data WRITEs and the doorbell, all on Y
        irq = await ask(b, cmd="interrupts")
        assert len(irq["interrupts"]) == 1 and irq["blocks"][-1]["intact"] and irq["blocks"][-1]["length"] == 100_000
        assert (await ask(b, cmd="interrupts"))["interrupts"] == []  # taken off the queue
        memory = bytes(b.core.avt.windows[0].memory[:100_000])
        assert memory == pattern(9, 100_000) == random.Random(9).randbytes(100_000)
        st = await ask(a, cmd="status")
        assert st["paths"][f"{B:#07x}"]["X"]["state"] == "UP" and st["tids_high_water"] == 16
        for bad in ({"cmd": "write", "peer": "peer", "address": 0, "data": "xyz"},
                    {"cmd": "block", "peer": "peer", "address": 0, "fabric": "z"},
                    {"cmd": "read", "peer": "peer", "address": -1, "length": 4},
                    {"cmd": "read", "peer": "peer", "address": 0, "length": 1 << 20}):
            r = await ask(a, **bad)
            assert not r["ok"] and r["error"].startswith("bad request"), bad
        r = await ask(a, cmd="read", peer="peer", address=0xFFFFFFF0, length=64)
        assert not r["ok"] and "32-bit" in r["error"]
        r = await ask(a, cmd="block", peer="peer", address=0x100000)
        assert not r["ok"] and "give data, or length" in r["error"]
        nursery.cancel_scope.cancel()


async def test_garbage_on_a_fabric_socket_is_counted(tmp_path):
    ca, cb = configs(tmp_path)
    async with trio.open_nursery() as nursery:
        a = Snetd(ca)
        await nursery.start(a.run)
        s = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
        await s.bind(cb.fabrics[Fabric.X][0])  # where a's X router is: a takes datagrams from it
        for junk in (b"", b"SN\x01\x00", b"SN\x01\x00" + bytes(12), bytes(90)):
            await s.sendto(junk, ca.fabrics[Fabric.X][0])
        other = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
        await other.sendto(b"SN\x01\x00", ca.fabrics[Fabric.X][0])
        with trio.fail_after(5):
            while sum(v for k, v in a.core.counters.items() if k.startswith("drop")) < 4 or \
                    not a.driver.all_counters()["node"]["drop_foreign_sender"]:
                await trio.sleep(0.01)
        st = await ask(a, cmd="status")
        assert st["counters"]["node"]["drop_foreign_sender"] == 1
        drops = {k: v for k, v in st["counters"]["node"].items() if k.startswith("drop")}
        assert drops == {"drop_foreign_sender": 1, "drop_bad_envelope": 2, "drop_short": 1, "drop_crc": 1}
        s.close()
        other.close()
        nursery.cancel_scope.cancel()
