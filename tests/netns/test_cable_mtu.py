"""Cable datagrams fit the underlay (issue 11 item 3): on 1500-byte veths
every cable datagram is at most 1472 bytes of UDP and nothing is fragmented; on
9000-byte veths they grow to 222 micropackets (the Fabric keys its cables: the auth
trailer takes 32 bytes); when the MTU drops under a running cable, EMSGSIZE re-cuts
and max_mps follows; a bulk transfer survives 1% loss."""

import sys
import threading
from pathlib import Path

from daemons import constants as C
from lab.netns import Fabric, poll
from daemons.ulpclient import UlpClient
from daemons.wire.ula import parse_ula
from daemons.wire.ulp import Op

ET = 0x88B5
RELAY = str(Path(__file__).with_name("impair.py"))


def transfer(fab, total, size=65536, vc=3, timeout=60):
    """``total`` bytes host 1 -> host 2 over the ULP socket, in order and intact."""
    n = total // size
    fab.wait_ula(1, timeout=20)  # the sender's gsnd is up, so its ULP socket exists
    dst = parse_ula(fab.wait_ula(2, timeout=20))
    with UlpClient(fab.ulp_path(2)) as rx, UlpClient(fab.ulp_path(1)) as tx:
        rx.bind(ET)
        tx.bind(ET)
        sender = threading.Thread(target=lambda: [
            tx.send(dst, k.to_bytes(4, "big") * (size // 4), vc=vc, ethertype=ET) for k in range(n)])
        sender.start()
        got = 0
        while got < n:
            try:
                f = rx.recv(timeout=timeout)
            except TimeoutError:
                st = {i: {k: fab.gsnd_status(i)[k] for k in ("counters", "link", "cable")} for i in (1, 2)}
                st["switch"] = {p: v["link"]["counters"] for p, v in fab.switch_status()["ports"].items()}
                raise AssertionError(f"{got} of {n} arrived, then nothing: {st}") from None
            if f.op is not Op.RECV:
                continue
            if f.payload != got.to_bytes(4, "big") * (size // 4):
                st = {i: {k: fab.gsnd_status(i)[k] for k in ("counters", "reassembly", "ulp", "link")} for i in (1, 2)}
                raise AssertionError(f"message {got}: got {int.from_bytes(f.payload[:4], 'big')}; {st}")
            got += 1
        sender.join(10)


def frag_stats(fab, i):
    """IPv4 fragmentation counters of a namespace (0 = the switch's)."""
    lines = [ln.split() for ln in fab.ns_exec(i, "cat", "/proc/net/snmp").stdout.splitlines() if ln.startswith("Ip:")]
    ip = dict(zip(lines[0][1:], map(int, lines[1][1:])))
    return {k: ip[k] for k in ("FragCreates", "FragOKs", "ReasmReqds", "FragFails")}


def cables(fab):
    g = {i: fab.gsnd_status(i)["cable"] for i in (1, 2)}
    sw = {p: v["cable"] for p, v in fab.switch_status()["ports"].items()}
    return g, sw


def test_datagrams_fit_1500_then_grow_with_9000_then_shrink_again():
    with Fabric(2, underlay_mtu=1500) as fab:
        fab.up(v6=False)
        transfer(fab, 16 << 20)
        g, sw = cables(fab)
        for c in [*g.values(), *sw.values()]:
            # keyed cables (the Fabric's default): the 32-byte auth trailer costs one micropacket
            assert (c["mtu"], c["mtu_source"], c["max_mps"], c["auth"]) == (1500, "path", 35, "on"), c
            assert 0 < c["max_sent"] <= c["max_datagram"] == 32 + 35 * 40 + 32 == 1464 <= 1500 - 28, c
            assert not c.get("tx_emsgsize"), c
        for i in (0, 1, 2):
            st = frag_stats(fab, i)
            assert st["FragCreates"] == 0 and st["ReasmReqds"] == 0, (i, st)
        print("1500:", {i: (c["max_mps"], c["max_sent"], c["transport"]) for i, c in g.items()})

        for i in (1, 2):
            fab.set_underlay_mtu(i, 9000)
        poll(lambda: all(c["max_mps"] == 222 for d in cables(fab) for c in d.values()), 5,
             what="max_mps 222 on every cable (IP_MTU re-read each second)")
        transfer(fab, 16 << 20)
        g, sw = cables(fab)
        for c in [*g.values(), *sw.values()]:
            assert c["mtu"] == 9000 and c["max_datagram"] == 32 + 222 * 40 + 32 == 8944, c
        assert g[1]["max_sent"] == 8944 and sw["2"]["max_sent"] == 8944, (g, sw)
        assert all(frag_stats(fab, i)["FragCreates"] == 0 for i in (0, 1, 2))

        # the path shrinks under running cables: EMSGSIZE or the IP_MTU re-read; max_mps follows
        tx_before = g[1]["transport"].get("tx_emsgsize", 0)
        for i in (1, 2):
            fab.set_underlay_mtu(i, 1500)
        transfer(fab, 4 << 20)
        g, sw = cables(fab)
        for c in [*g.values(), *sw.values()]:
            assert c["max_mps"] == 35, c
        assert all(frag_stats(fab, i)["FragCreates"] == 0 for i in (0, 1, 2))
        print("shrunk:", g[1]["transport"], "EMSGSIZE before:", tx_before)


def lossy(frag_mtu: int, gsnd_args=(), timeout=120):
    """16 MiB host 1 -> host 2 with 1% loss per IP packet (of a ``frag_mtu`` underlay) on
    both hosts' cables; returns the micropackets sent and retransmitted by gsnd1 and
    by the switch port towards host 2."""
    with Fabric(2, underlay_mtu=1500) as fab:
        fab.start_switch()
        for i in (1, 2):
            fab._spawn(f"impair{i}", fab.host_ns[i - 1], [
                sys.executable, RELAY, f"198.18.{i}.2:6500", f"198.18.{i}.2:6402", f"198.18.{i}.2:6400",
                f"198.18.{i}.1:7000", "0.01", "0", "0", str(i), str(frag_mtu)])
            fab.start_gsnd(i, *gsnd_args, via=6500)
        transfer(fab, 16 << 20, timeout=timeout)
        g1 = fab.gsnd_status(1)["link"]["counters"]
        sw2 = fab.switch_status()["ports"]["2"]["link"]["counters"]
        return {"gsnd1_tx_mps": g1.get("tx_mps", 0), "gsnd1_rtx_mps": g1.get("rtx_mps", 0),
                "switch2_tx_mps": sw2.get("tx_mps", 0), "switch2_rtx_mps": sw2.get("rtx_mps", 0),
                "max_sent": fab.gsnd_status(1)["cable"]["max_sent"]}


def test_bulk_transfer_through_one_percent_loss():
    """gsnd's peer is a relay on its own host (a loopback path, 64 KB datagrams by
    default), so it is told the underlay's MTU: --cable-mtu 1500."""
    r = lossy(1500, ["--cable-mtu", "1500"])
    print("1% loss, cable mtu 1500:", r)
    assert r["max_sent"] <= 1472
    data_mps = (16 << 20) // C.MP_BYTES
    # go-back-N resends what is in flight after a loss; it must stay a bounded multiple
    assert r["gsnd1_rtx_mps"] < 20 * data_mps and r["switch2_rtx_mps"] < 20 * data_mps, r
