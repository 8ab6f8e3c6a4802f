"""Logical and broadcast PacketWay addresses, real processes: two nodes (one on each of
two GSN fabrics) listen to a group they announced; a third sends to the group and to
broadcast through the CLI; each member gets each packet once."""

import subprocess

from lab.netns import BIN, Fabric, gsn_router_toml, poll
from daemons.runtime.control import request

H_A, M_A, M_B, R_A, R_B, GROUP = 0x40, 0x41, 0x60, 0x50, 0x51, 0xE00007


def test_group_and_broadcast_reach_every_member_once():
    with Fabric(3, prefix="ga") as fa, Fabric(2, prefix="gb") as fb:
        ula_a, ula_b = fa.up(v6=False), fb.up(v6=False)
        ctl = fa.tmp / "pktwayd.sock"
        (fa.tmp / "pktwayd.toml").write_text(gsn_router_toml(
            "groups", ctl, [(R_A, 0x100, 2048, fa.ulp_path(2), [(H_A, ula_a[0])]), (R_B, 0x101, 1024, fb.ulp_path(2), [])]))
        fa.spawn("pktwayd", 2, str(BIN / "pktwayd"), "-c", str(fa.tmp / "pktwayd.toml"))
        poll(lambda: ctl.exists(), 10, what="pktwayd")
        members = [subprocess.Popen([str(BIN / "pktway"), "listen", "--ulp", ulp, "--addr", hex(addr), "--router", router,
                                     "--group", hex(GROUP), "--count", "2", "--timeout", "30"],
                                    stdout=subprocess.PIPE, text=True)
                   for ulp, addr, router in ((fa.ulp_path(3), M_A, ula_a[1]), (fb.ulp_path(1), M_B, ula_b[1]))]
        try:
            def known():
                rts = request(str(ctl), {"cmd": "routes"})["halves"][0]["rts"]
                return {M_A, M_B} <= {n["addr"] for rt in rts for n in rt["nodes"]}

            poll(known, 15, interval=0.2, what="both members registered and known at half A")
            for dest, text in ((GROUP, "to the group"), (0x7FFFFF, "to everyone")):
                r = subprocess.run([str(BIN / "pktway"), "send", "--ulp", fa.ulp_path(1), "--addr", hex(H_A),
                                    "--router", ula_a[1], hex(dest), text], capture_output=True, text=True, timeout=30)
                assert r.returncode == 0, r.stderr
            for m in members:
                out, _ = m.communicate(timeout=30)
                assert m.returncode == 0, out
                lines = out.splitlines()
                assert len(lines) == 2 and f"to {GROUP:#08x}" in lines[0] and "to the group" in lines[0]
                assert "to 0x7fffff" in lines[1] and "to everyone" in lines[1]
            assert request(str(ctl), {"cmd": "routes"})["halves"][0]["counters"]["group_copies"] == 4
        finally:
            for m in members:
                m.kill()
                m.wait()
