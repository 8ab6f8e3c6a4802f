"""The MessageWay Appendix-C walk-through (spec pktway.md §4.4), step by step through the
pktway CLI on three GSN fabrics: SAN1 holds Node1 and one half of routers A and B, SAN2
Node2 and router B's other half, SAN3 Node3 and router A's other half.  Level C: a node
finds nodes by capability, asks which router to use (HRTO), asks a node about itself
(TELL by L3, answered by the node), plans an L2 route (GVL2) and sends along it."""

import subprocess

from lab.netns import BIN, Fabric, poll
from daemons.runtime.control import request

NODE1, NODE2, NODE3 = 0x41, 0x42, 0x43
RTRA1, RTRA3, RTRB1, RTRB2 = 0x51, 0x52, 0x53, 0x54


def half(addr, san, mtu, ulp, nodes) -> str:
    text = f'[[half]]\naddr = {addr}\nsan_id = {san}\nmtu = {mtu}\nulp = "{ulp}"\n'
    for a, ula, router in nodes:
        text += f'[[half.node]]\naddr = {a}\nula = "{ula}"\nrouter = {str(router).lower()}\n'
    return text


def test_appendix_c_walkthrough_through_the_cli():
    with Fabric(3, prefix="c1") as s1, Fabric(2, prefix="c2") as s2, Fabric(2, prefix="c3") as s3:
        u1, u2, u3 = s1.up(v6=False), s2.up(v6=False), s3.up(v6=False)
        ctl_a, ctl_b = s1.tmp / "ra.sock", s1.tmp / "rb.sock"
        # SAN1 16 KB (2048 words), SAN2 8 KB (1024 words), SAN3 16 KB
        (s1.tmp / "ra.toml").write_text(f'[router]\nname = "RouterA"\ncontrol = "{ctl_a}"\n'
                                        + half(RTRA1, 0x101, 2048, s1.ulp_path(2), [(NODE1, u1[0], False), (RTRB1, u1[2], True)])
                                        + half(RTRA3, 0x103, 2048, s3.ulp_path(2), []))
        (s1.tmp / "rb.toml").write_text(f'[router]\nname = "RouterB"\ncontrol = "{ctl_b}"\n'
                                        + half(RTRB1, 0x101, 2048, s1.ulp_path(3), [(NODE1, u1[0], False), (RTRA1, u1[1], True)])
                                        + half(RTRB2, 0x102, 1024, s2.ulp_path(2), []))
        s1.spawn("routerA", 2, str(BIN / "pktwayd"), "-c", str(s1.tmp / "ra.toml"))
        s1.spawn("routerB", 3, str(BIN / "pktwayd"), "-c", str(s1.tmp / "rb.toml"))
        poll(lambda: ctl_a.exists() and ctl_b.exists(), 10, what="both routers' control sockets")
        # Node2 and Node3 power up: they announce themselves to their routers (INFO to Hey-You)
        node2 = subprocess.Popen(["ip", "netns", "exec", s2.host_ns[0], str(BIN / "pktway"), "listen", "--ulp",
                                  s2.ulp_path(1), "--addr", hex(NODE2), "--router", u2[1], "--name", "Super",
                                  "--capability", "7:4,8", "--capability", "42", "--timeout", "60"],
                                 stdout=subprocess.PIPE, text=True)
        node3 = subprocess.Popen([str(BIN / "pktway"), "listen", "--ulp", s3.ulp_path(1), "--addr", hex(NODE3),
                                  "--router", u3[1], "--capability", "7:8,4", "--timeout", "60"],
                                 stdout=subprocess.DEVNULL)
        try:
            def pktway(*args, router=u1[1]):
                return subprocess.run([str(BIN / "pktway"), *args, "--ulp", s1.ulp_path(1), "--addr", hex(NODE1),
                                       "--router", router], capture_output=True, text=True, timeout=30)

            # steps 1-2: TELL by capability (FP DSP handling 64-bit words) to RTRA1 -> INFO: Node2, Node3
            poll(lambda: all(f"{n:#08x}" in pktway("find", "--capability", "7:8").stdout for n in (NODE2, NODE3)),
                 20, interval=0.3, what="RTRA1 knows Node2 and Node3 with their capabilities")
            out = pktway("find", "--capability", "7:8").stdout
            assert "CC7[4, 8]" in out and "CC7[8, 4]" in out
            # steps 3-4: HRTO Node2 to RTRA1 -> RDRC(Node2, RTRB1)
            r = pktway("hrto", hex(NODE2))
            assert r.returncode == 0 and r.stdout.strip() == f"use half-router {RTRB1:#08x}", r.stdout + r.stderr
            # steps 5-6: TELL ADDR Node2 sent by L3 via router B to Node2 itself, which answers INFO
            r = pktway("find", "--address", hex(NODE2), "--ask-node", router=u1[2])
            assert r.returncode == 0, r.stderr
            assert f"{NODE2:#08x}" in r.stdout and "Super" in r.stdout and "CC7[4, 8]" in r.stdout and "CC42[]" in r.stdout
            # steps 7-8: GVL2 Node2 to RTRB1 -> L2SR: one L2RH (Node2's route on SAN2), MTU min(16 KB, 8 KB)
            r = pktway("route", hex(NODE2), router=u1[2])
            assert r.returncode == 0 and f"MTU=1024 words  SR={u2[0].replace(':', '')}" in r.stdout, r.stdout + r.stderr
            # step 9: data along that L2 route
            r = pktway("send", "--l2", hex(NODE2), "sensor data", router=u1[2])
            assert r.returncode == 0, r.stderr
            out, _ = node2.communicate(timeout=15)
            assert f"from {NODE1:#08x}" in out and "sensor data" in out
            assert request(str(ctl_b), {"cmd": "routes"})["halves"][0]["counters"].get("rrp_GVL2", 0) >= 1
        finally:
            for p in (node2, node3):
                p.kill()
                p.wait()
