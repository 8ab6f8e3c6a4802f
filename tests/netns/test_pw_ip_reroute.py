"""A router killed -9 between unlike SANs, and level B: GSN fabric A and an
InfiniBand-style fabric joined by two routers, X and Y, each split in two processes
(one half per SAN, twins cabled over loopback).  A's pw0 uses X, the IB host's pw0
uses Y.  X's IB half is killed -9 while A pings: X's GSN half re-routes through its
buddy Y's GSN half and redirects A to it (RDRC); A asks Y who it is, learns Y's ULA
from Y's own answer and sends there directly: X forwards nothing more."""

import json
import subprocess

from lab.netns import BIN, Fabric, poll
from daemons.runtime.control import request
from tests.netns.test_pw_ip_paths import pw0

H_A, H_X = 0x40, 0x61
X_A, X_S, Y_A, Y_S = 0x50, 0x51, 0x52, 0x53
IP_A, IP_X, IP6_A, IP6_X = "10.77.0.1", "10.77.0.2", "fd77::1", "fd77::2"
G_X, G_Y, G_H = 0x0002C903000000A1, 0x0002C903000000A2, 0x0002C903000000B2
LID_X, LID_Y, LID_H = 7, 8, 9  # fixed by the SM's state file
SM = "127.0.0.1:4781"
IB_PORT = {G_X: 1, G_Y: 2, G_H: 3}  # the switch port each GUID is cabled to
LIVE = 0.3


def ib_local(guid: int) -> str:
    return f"127.0.0.1:{7610 + IB_PORT[guid]}"


def ib_switch(guid: int) -> str:
    return f"127.0.0.1:{7510 + IB_PORT[guid]}"


def start_ib(fa) -> None:
    t = fa.tmp
    (t / "sm").mkdir()
    lids = {f"{G_X:#018x}": LID_X, f"{G_Y:#018x}": LID_Y, f"{G_H:#018x}": LID_H}
    (t / "sm" / "lids.json").write_text(json.dumps({"lids": lids}))
    ports = "".join(f'[[port]]\nnumber = {n}\nlocal = "{ib_switch(g)}"\npeer = "{ib_local(g)}"\n'
                    for g, n in IB_PORT.items())
    (t / "sw.toml").write_text(f'[switch]\nguid = "0x1001"\nsm = "{SM}"\nruntime_dir = "{t}/sw-ib"\n{ports}')
    fa.spawn("ib-sm", 2, str(BIN / "ib-sm"), "--listen", SM, "--state-file", str(t / "sm" / "lids.json"),
             "--runtime-dir", str(t / "sm"))
    fa.spawn("ib-switch", 2, str(BIN / "ib-switch"), "-c", str(t / "sw.toml"))


def split_half(fa, name, me, twin, half: str) -> str:
    """One half-router in a process of its own, joined to its twin by a cable over loopback."""
    ctl = fa.tmp / f"{name}.sock"
    text = (f'[router]\nname = "{name}"\ncontrol = "{ctl}"\nliveness = {LIVE}\n'
            f'[twin]\naddr = {twin}\nlocal = "127.0.0.1:{7300 + me}"\npeer = "127.0.0.1:{7300 + twin}"\n'
            f'[[half]]\naddr = {me}\n{half}')
    (fa.tmp / f"{name}.toml").write_text(text)
    fa.spawn(name, 2, str(BIN / "pktwayd"), "-c", str(fa.tmp / f"{name}.toml"))
    return str(ctl)


def gsn_half(fa, host: int, nodes) -> str:
    return (f'san_id = 0x100\nmtu = 8192\nulp = "{fa.ulp_path(host)}"\n'
            + "".join(f'[[half.node]]\naddr = {a}\nula = "{u}"\nrouter = {str(r).lower()}\n' for a, u, r in nodes))


def ib_half(guid: int, nodes) -> str:
    return (f'kind = "infiniband"\nsan_id = 0x300\nmtu = 255\nguid = "{guid:#x}"\nlocal = "{ib_local(guid)}"\n'
            f'switch = "{ib_switch(guid)}"\nsm = "{SM}"\n'
            + "".join(f'[[half.node]]\naddr = {a}\nlid = {lid}\nrouter = {str(r).lower()}\n' for a, lid, r in nodes))


def test_router_kill_9_gsn_to_infiniband_reroutes_and_the_redirect_is_followed():
    with Fabric(3, prefix="wr") as fa:
        ula = fa.up(v6=False)
        start_ib(fa)
        ctl = {
            "xa": split_half(fa, "xa", X_A, X_S, gsn_half(fa, 2, [(H_A, ula[0], False), (Y_A, ula[2], True)])),
            "xs": split_half(fa, "xs", X_S, X_A, ib_half(G_X, [(H_X, LID_H, False), (Y_S, LID_Y, True)])),
            "ya": split_half(fa, "ya", Y_A, Y_S, gsn_half(fa, 3, [(H_A, ula[0], False), (X_A, ula[1], True)])),
            "ys": split_half(fa, "ys", Y_S, Y_A, ib_half(G_Y, [(H_X, LID_H, False), (X_S, LID_X, True)])),
        }

        def half(name):
            try:
                return request(ctl[name], {"cmd": "routes"}, 2.0)["halves"][0]
            except (OSError, KeyError):
                return {}

        seen: dict[str, dict] = {}

        def ready():
            seen.update((n, half(n)) for n in ctl)
            return all(h and h["twin_alive"] and len(h["rts"]) >= 3 for h in seen.values())

        try:
            poll(ready, 30, what="every half: twin alive, the other SAN by two paths")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last seen: {json.dumps(seen, default=str)}") from None
        ca = pw0(fa, 1, "pwa", IP_A, IP6_A, "--ulp", fa.ulp_path(1), "--addr", hex(H_A), "--router", ula[1],
                 "--peer", f"{IP_X}={H_X:#x}", "--peer", f"{IP6_X}={H_X:#x}", "--mtu-recheck", "0")
        pw0(fa, 2, "pwib", IP_X, IP6_X, "--ib", f"{G_H:#x},{ib_local(G_H)},{ib_switch(G_H)},{SM}",
            "--router", str(LID_Y), "--addr", hex(H_X), "--peer", f"{IP_A}={H_A:#x}", "--peer", f"{IP6_A}={H_A:#x}")
        poll(lambda: fa.ns_exec(1, "ping", "-c", "1", "-W", "1", IP_X, check=False).returncode == 0, 20,
             interval=0.2, what="the first ping across")
        assert "redirects" in request(ca, {"cmd": "status"}) and not request(ca, {"cmd": "status"})["redirects"]
        # 100 pings, 0.1 s apart; X's IB half dies a second in: the loss is bounded
        pinger = subprocess.Popen(["ip", "netns", "exec", fa.host_ns[0], "ping", "-c", "100", "-i", "0.1", "-W", "1",
                                   IP_X], stdout=subprocess.PIPE, text=True)
        poll(lambda: request(ca, {"cmd": "status"})["counters"].get("tx_ipv4", 0) >= 10, 10, interval=0.05,
             what="pings under way")
        fa.kill("xs", 9)
        out = pinger.communicate(timeout=60)[0]
        received = int(out.split(" received")[0].rsplit(" ", 1)[1])
        assert received >= 70, out  # the twin's loss is noticed in 3 x 0.3 s, then Y carries it
        # level B: X redirected A to Y's GSN half, A learned its ULA (Y answered A's WRU itself)
        st = request(ca, {"cmd": "status"})
        assert st["redirects"][hex(H_X)] == hex(Y_A) and st["native_routes"][hex(Y_A)]
        assert st["counters"]["redirect_obeyed"] >= 1 and st["counters"]["native_route_learnt"] == 1
        before_x = half("xa")["counters"].get("l3_forwarded", 0)
        before_y = half("ya")["counters"].get("l3_forwarded", 0)
        before_tx = st["counters"].get("tx_redirected", 0)
        r = fa.ns_exec(1, "ping", "-c", "10", "-i", "0.1", "-W", "2", IP_X, check=False)
        assert r.returncode == 0 and " 0% packet loss" in r.stdout, r.stdout
        r = fa.ns_exec(1, "ping", "-6", "-c", "3", "-i", "0.2", "-W", "2", IP6_X, check=False)
        assert r.returncode == 0, r.stdout + r.stderr
        # 13 packets to the new first hop, but for one when the redirect's 10 s ran out in between
        # (that one goes through X, which redirects A again)
        assert request(ca, {"cmd": "status"})["counters"]["tx_redirected"] >= before_tx + 12
        assert half("xa")["counters"].get("l3_forwarded", 0) <= before_x + 3
        assert half("ya")["counters"]["l3_forwarded"] >= before_y + 13
