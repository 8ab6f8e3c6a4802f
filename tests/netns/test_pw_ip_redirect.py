"""Level B and C between two pw0 nodes of one GSN fabric.  Level B: A's first packets to B cross the
router, which hairpins them and redirects A ("B is on your SAN", RDRC(B, B)); A asks B
who it is (WRU through the router, carrying A's ULA), B answers straight to A's ULA, A
learns B's and sends there directly.  B learns A's the same way.  Then the router
forwards nothing more and every ping still comes back.  Level C: a pw0 node started with
no router hears the router's power-up WRU (to Hey-You), asks it which router to use
(HRTO) and takes it when it answers (RDRC)."""

from lab.netns import BIN, Fabric, poll
from daemons.runtime.control import request
from tests.netns.test_pw_ip_paths import pw0

H_A, H_B, R_G, R_S = 0x40, 0x41, 0x50, 0x51
IP_A, IP_B, IP6_A, IP6_B = "10.77.0.1", "10.77.0.2", "fd77::1", "fd77::2"
SAN = "127.0.0.1:7430"


def start_router(fa, ula):
    """A router on host 3 whose GSN half knows A (host 1) and B (host 2); (its control
    socket, a function returning its GSN half's state)."""
    ctl = str(fa.tmp / "router.sock")
    # the router's other half sits on an emulated datagram SAN with no node: only its GSN half works here
    (fa.tmp / "router.toml").write_text(f"""
[router]
name = "rd"
control = "{ctl}"

[[half]]
addr = {R_G}
san_id = 0x100
mtu = 8192
ulp = "{fa.ulp_path(3)}"
[[half.node]]
addr = {H_A}
ula = "{ula[0]}"
[[half.node]]
addr = {H_B}
ula = "{ula[1]}"

[[half]]
kind = "udp"
addr = {R_S}
san_id = 0x200
mtu = 2048
switch = "{SAN}"
local = "127.0.0.1:7431"
port = 1
""")
    fa.spawn("san", 3, str(BIN / "pktway-san"), "--listen", SAN, "--port", "1=127.0.0.1:7431")
    fa.spawn("pktwayd", 3, str(BIN / "pktwayd"), "-c", str(fa.tmp / "router.toml"))

    def gsn_half() -> dict:
        try:
            return request(ctl, {"cmd": "routes"}, 2.0)["halves"][0]
        except (OSError, KeyError, IndexError):
            return {}

    return ctl, gsn_half


def test_redirect_between_two_pw0_nodes_of_one_san_is_followed():
    with Fabric(3, prefix="wd") as fa:
        ula = fa.up(v6=False)
        _, gsn_half = start_router(fa, ula)
        poll(lambda: gsn_half().get("up") and len(gsn_half()["rts"]) == 2, 15, what="the router's GSN half up")
        ca = pw0(fa, 1, "pwa", IP_A, IP6_A, "--ulp", fa.ulp_path(1), "--addr", hex(H_A), "--router", ula[2],
                 "--peer", f"{IP_B}={H_B:#x}", "--peer", f"{IP6_B}={H_B:#x}", "--mtu", "4000")
        cb = pw0(fa, 2, "pwb", IP_B, IP6_B, "--ulp", fa.ulp_path(2), "--addr", hex(H_B), "--router", ula[2],
                 "--peer", f"{IP_A}={H_A:#x}", "--peer", f"{IP6_A}={H_A:#x}", "--mtu", "4000")
        poll(lambda: fa.ns_exec(1, "ping", "-c", "1", "-W", "1", IP_B, check=False).returncode == 0, 20,
             interval=0.2, what="the first ping, through the router")
        assert gsn_half()["counters"]["l3_forwarded"] >= 2  # the first echo and its reply crossed it

        def learnt(control: str, peer: int) -> bool:
            return request(control, {"cmd": "status"})["native_routes"].get(hex(peer)) is not None

        # a few more pings carry the redirects and the WRU/INFO exchange both ways
        try:
            poll(lambda: fa.ns_exec(1, "ping", "-c", "1", "-W", "1", IP_B, check=False).returncode == 0
                 and learnt(ca, H_B) and learnt(cb, H_A), 10, interval=0.2, what="both learnt the other's ULA")
        except AssertionError:
            print("A:", request(ca, {"cmd": "status"}))
            print("B:", request(cb, {"cmd": "status"}))
            print("router:", gsn_half()["counters"])
            raise
        sa, sb = request(ca, {"cmd": "status"}), request(cb, {"cmd": "status"})
        assert sa["native_routes"][hex(H_B)] == ula[1].replace(":", "") and sa["redirects"][hex(H_B)] == hex(H_B)
        assert sb["native_routes"][hex(H_A)] == ula[0].replace(":", "")
        assert sb["counters"]["wru_answered_direct"] >= 1 and sa["counters"]["wru_answered_direct"] >= 1
        before = gsn_half()["counters"]["l3_forwarded"]
        r = fa.ns_exec(1, "ping", "-c", "20", "-i", "0.1", "-W", "2", IP_B, check=False)
        assert r.returncode == 0 and " 0% packet loss" in r.stdout, r.stdout
        r = fa.ns_exec(2, "ping", "-6", "-c", "5", "-i", "0.1", "-W", "2", IP6_A, check=False)
        assert r.returncode == 0 and " 0% packet loss" in r.stdout, r.stdout + r.stderr
        # 50 packets; a redirect's 10 s may run out once on each side in between (that packet
        # crosses the router, which redirects again)
        assert gsn_half()["counters"]["l3_forwarded"] <= before + 2
        after_a, after_b = request(ca, {"cmd": "status"}), request(cb, {"cmd": "status"})
        assert after_a["counters"]["tx_redirected"] >= sa["counters"].get("tx_redirected", 0) + 24
        assert after_b["counters"]["tx_redirected"] >= sb["counters"].get("tx_redirected", 0) + 24


def test_without_a_router_pw0_asks_the_one_that_powers_up():
    with Fabric(3, prefix="wh") as fa:
        ula = fa.up(v6=False)
        ca = pw0(fa, 1, "pwa", IP_A, IP6_A, "--ulp", fa.ulp_path(1), "--addr", hex(H_A),
                 "--peer", f"{IP_B}={H_B:#x}", "--mtu", "4000")  # no --router
        cb = pw0(fa, 2, "pwb", IP_B, IP6_B, "--ulp", fa.ulp_path(2), "--addr", hex(H_B), "--router", ula[2],
                 "--peer", f"{IP_A}={H_A:#x}", "--mtu", "4000")
        poll(lambda: request(ca, {"cmd": "status"})["counters"].get("hrto_no_router_known", 0) >= 2, 10,
             what="A without a router, knowing none to ask")
        r = fa.ns_exec(1, "ping", "-c", "1", "-W", "1", IP_B, check=False)
        assert r.returncode != 0 and request(ca, {"cmd": "status"})["counters"]["tx_drop_no_router"] >= 1
        _, gsn_half = start_router(fa, ula)
        poll(lambda: gsn_half().get("up"), 15, what="the router's GSN half up")
        st = poll(lambda: (s := request(ca, {"cmd": "status"}))["router"] and s, 15, what="A chose a router")
        assert st["router"] == ula[2].replace(":", "") and st["routers"] == {st["router"]: R_G}
        assert st["counters"]["hr_heard"] >= 1 and st["counters"]["hrto_sent"] >= 1
        assert st["counters"]["router_chosen"] == 1
        assert gsn_half()["counters"]["rrp_HRTO"] >= 1
        r = fa.ns_exec(1, "ping", "-c", "3", "-i", "0.2", "-W", "2", IP_B, check=False)
        assert r.returncode == 0, r.stdout + r.stderr
        assert request(cb, {"cmd": "status"})["counters"]["rx_ipv4"] >= 3
