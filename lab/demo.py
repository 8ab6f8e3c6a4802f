"""The demo: a GSN fabric of two switches and three hosts in network namespaces,
then a second fabric joined to it by a PacketWay router.

Run as root (``sudo ./gsn demo``).  Starts two gsn-switch processes cabled to each
other (hosts 1 and 2 on switch 1, host 3 on switch 2) and one gsnd per host as
real processes on the bundled defaults (each cable keyed: authenticated datagrams),
shows the fabric map the switches built, exchanges Messages on every VC through
the ULP sockets, prints link states, ULAs, round-trip times and throughput, runs
IP over GSN, then routes PacketWay packets between the two fabrics through
pktwayd, ends with IP (ping, iperf3) from a GSN host to a host on an
InfiniBand-style fabric through a PacketWay router (pw0 on both), and removes
everything on exit or Ctrl-C.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import time

from .netns import BIN, Fabric, SwitchedFabric, iperf3_run, poll
from daemons.ulpclient import UlpClient
from daemons.wire.ula import parse_ula
from daemons.wire.ulp import Op

ET = 0x88B5  # IEEE local experimental EtherType


def _rtt(fab: Fabric, a: int, b: int, n: int = 50) -> list[float]:
    """Echo n 64-byte Messages a -> b -> a on VC1; RTTs in ms."""
    ula_a, ula_b = (parse_ula(fab.wait_ula(i)) for i in (a, b))
    out = []
    with UlpClient(fab.ulp_path(a)) as ca, UlpClient(fab.ulp_path(b)) as cb:
        ca.bind(ET)
        cb.bind(ET)
        for k in range(n):
            t0 = time.perf_counter()
            ca.send(ula_b, k.to_bytes(64, "big"), ethertype=ET)
            f = cb.recv(timeout=2)
            cb.send(ula_a, f.payload, ethertype=ET)
            while ca.recv(timeout=2).op is not Op.RECV:
                pass
            out.append((time.perf_counter() - t0) * 1000)
    return out


def _throughput(fab: Fabric, a: int, b: int, vc: int, size: int, seconds: float = 2.0) -> tuple[float, int]:
    ula_b = parse_ula(fab.wait_ula(b))
    payload = os.urandom(size)
    with UlpClient(fab.ulp_path(a)) as tx, UlpClient(fab.ulp_path(b)) as rx:
        tx.bind(ET)
        rx.bind(ET)
        rx.sock.setblocking(False)
        buf = bytearray(size + 10)  # one RECV frame: 10-byte header + payload
        got = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            tx.send(ula_b, payload, vc=vc, ethertype=ET)
            try:
                while True:
                    n = rx.sock.recv_into(buf)
                    got += n - 10
            except BlockingIOError:
                pass
        rx.sock.setblocking(True)
        rx.sock.settimeout(0.5)
        try:
            while True:
                got += rx.sock.recv_into(buf) - 10
        except TimeoutError:
            pass
        dt = time.perf_counter() - t0
    return got * 8 / dt / 1e9, got


def _packetway(fa: Fabric) -> None:
    """Fabric B (a switch + 2 hosts) joined to fabric A by one pktwayd router whose halves
    use host3's gsnd on A and host1's on B; host1 of A talks to host2 of B."""
    from pktwayd.node import Node

    from daemons.runtime.control import request

    print("\nPacketWay: a second fabric (B: 1 switch + 2 hosts) joined to A by router 'rab' (pktwayd),\n"
          "  half 0x50 on A (host3's gsnd), half 0x51 on B (its host1's gsnd); hosts A1 = 0x40, B2 = 0x60")
    with Fabric(2, prefix="demopw") as fb:
        fb.start_switch()
        for i in (1, 2):
            fb.start_gsnd(i)
        ula_b = [fb.wait_ula(i) for i in (1, 2)]
        ula_a = [fa.wait_ula(i) for i in (1, 2, 3)]
        ctl = fa.tmp / "rab.sock"
        (fa.tmp / "rab.toml").write_text(
            f'[router]\nname = "rab"\ncontrol = "{ctl}"\n'
            f'[[half]]\naddr = 0x50\nsan_id = 0x100\nmtu = 8192\nulp = "{fa.ulp_path(3)}"\n'
            f'[[half.node]]\naddr = 0x40\nula = "{ula_a[0]}"\nname = "a1"\n'
            f'[[half]]\naddr = 0x51\nsan_id = 0x101\nmtu = 1024\nulp = "{fb.ulp_path(1)}"\n'
            f'[[half.node]]\naddr = 0x60\nula = "{ula_b[1]}"\nname = "b2"\n')
        fa.spawn("pktwayd", 3, str(BIN / "pktwayd"), "-c", str(fa.tmp / "rab.toml"))
        poll(lambda: ctl.exists() and all(h["twin_alive"] and len(h["rts"]) == 2
                                          for h in request(str(ctl), {"cmd": "routes"})["halves"]), 15,
             what="the router's halves exchanging their tables")
        with Node(fa.ulp_path(1), 0x40, parse_ula(ula_a[2])) as a1, Node(fb.ulp_path(2), 0x60, parse_ula(ula_b[0])) as b2:
            a1.send(0x60, b"hello from fabric A")
            got = b2.recv(10)
            print(f"  L3  A1 -> B2 through the router: B2 got {got.data.rstrip(bytes(1))!r} from {got.sa:#x}")
            q, hops, mtu = a1.route(0x60)[0]
            print(f"  GVL2 A1 asks the router for B2: L2 route Q={q} MTU={mtu} words, "
                  f"SR = L2RH({', '.join(h.route.hex(':') for h in hops)})  (B2's ULA on fabric B)")
            a1.send(0x60, b"along the planned L2 route", route=hops)
            print(f"  L2  A1 -> B2: B2 got {b2.recv(10).data.rstrip(bytes(1))!r}")
            found = b2.find(name=b"a1")
            print(f"  TELL from B2: who is 'a1'? -> {', '.join(hex(n['addr']) for n in found)}")
        for h in request(str(ctl), {"cmd": "routes"})["halves"]:
            rts = "; ".join(f"SAN {rt['san_id']:#x} via RCVF {','.join(hex(x) for x in rt['rcvf'])} "
                            f"(Q {rt['csr_q']}, MinMTU {rt['min_mtu']})" for rt in h["rts"])
            print(f"  half {h['addr']:#x}: {rts}")
    _ip_across_unlike_sans(fa)


IB_SM, IB_GUIDS, IB_LIDS = "127.0.0.1:4791", (0x0002C903000000A1, 0x0002C903000000B2), (7, 9)  # router, host


def _ib_fabric(fa: Fabric) -> None:
    """An InfiniBand-style fabric in host2's namespace (over its loopback): ib-sm with fixed
    LIDs and one ib-switch whose port 1 is the router's, port 2 the IB host's."""
    t = fa.tmp / "ib"
    t.mkdir()
    (t / "lids.json").write_text(json.dumps({"lids": {f"{g:#018x}": lid for g, lid in zip(IB_GUIDS, IB_LIDS)}}))
    ports = "".join(f'[[port]]\nnumber = {n}\nlocal = "127.0.0.1:750{n}"\npeer = "127.0.0.1:760{n}"\n' for n in (1, 2))
    (t / "sw.toml").write_text(f'[switch]\nguid = "0x1001"\nsm = "{IB_SM}"\nruntime_dir = "{t}/sw"\n{ports}')
    fa.spawn("ib-sm", 2, str(BIN / "ib-sm"), "--listen", IB_SM, "--state-file", str(t / "lids.json"),
             "--runtime-dir", str(t))
    fa.spawn("ib-switch", 2, str(BIN / "ib-switch"), "-c", str(t / "sw.toml"))


def _ip_across_unlike_sans(fa: Fabric) -> None:
    """pw0 (pktway ip) on A1 (GSN) and on a host of an InfiniBand-style fabric, joined to
    fabric A by router 'rai' (half 0x52 on host2's gsnd, half 0x53 a UD port on the IB
    fabric): IP across two unlike SANs."""
    from daemons.runtime.control import request

    print("\nIP over PacketWay across unlike SANs: an InfiniBand-style fabric (ib-sm + ib-switch, in host2's\n"
          "  namespace over loopback) joined to GSN fabric A by router 'rai' (half 0x52 on host2's gsnd, half 0x53\n"
          "  an IB UD port, LID 7); pw0 (pktway ip, a TUN) on A1 10.77.0.1 (0x40) and on IB host I1 10.77.0.2 (0x70)")
    ula_a = [fa.wait_ula(i) for i in (1, 2)]
    _ib_fabric(fa)
    ctl = fa.tmp / "rai.sock"
    (fa.tmp / "rai.toml").write_text(
        f'[router]\nname = "rai"\ncontrol = "{ctl}"\n'
        f'[[half]]\naddr = 0x52\nsan_id = 0x100\nmtu = 8192\nulp = "{fa.ulp_path(2)}"\n'
        f'[[half.node]]\naddr = 0x40\nula = "{ula_a[0]}"\n'
        f'[[half]]\nkind = "infiniband"\naddr = 0x53\nsan_id = 0x300\nmtu = 255\nguid = "{IB_GUIDS[0]:#x}"\n'
        f'local = "127.0.0.1:7601"\nswitch = "127.0.0.1:7501"\nsm = "{IB_SM}"\n'
        f'[[half.node]]\naddr = 0x70\nlid = {IB_LIDS[1]}\n')
    fa.spawn("rai", 2, str(BIN / "pktwayd"), "-c", str(fa.tmp / "rai.toml"))
    poll(lambda: ctl.exists() and all(h["up"] and len(h["rts"]) == 2 for h in request(str(ctl), {"cmd": "routes"})["halves"]),
         15, what="router rai's halves up (the IB half once the SM gave it its LID)")
    ib_host = f"{IB_GUIDS[1]:#x},127.0.0.1:7602,127.0.0.1:7502,{IB_SM}"
    for i, name, ip, args in ((1, "pw0-a1", "10.77.0.1", ("--ulp", fa.ulp_path(1), "--addr", "0x40", "--router", ula_a[1],
                                                         "--peer", "10.77.0.2=0x70")),
                              (2, "pw0-i1", "10.77.0.2", ("--ib", ib_host, "--addr", "0x70", "--router", str(IB_LIDS[0])))):
        fa.spawn(name, i, str(BIN / "pktway"), "ip", *args, "--name", ip, "--control", str(fa.tmp / f"{name}.sock"))
        poll(lambda: fa.ns_exec(i, "ip", "link", "show", "pw0", check=False).returncode == 0, 10, what=f"{name}'s pw0")
        fa.ns_exec(i, "ip", "addr", "add", f"{ip}/24", "dev", "pw0")
        fa.ns_exec(i, "ip", "link", "set", "pw0", "up")
    st = poll(lambda: (s := request(str(fa.tmp / "pw0-a1.sock"), {"cmd": "status"}))["mtu"] != 1500 and s, 15,
              what="A1's pw0 MTU from the route")
    half = request(str(ctl), {"cmd": "routes"})["halves"][0]
    rt = next(rt for rt in half["rts"] if any(n["addr"] == 0x70 for n in rt["nodes"]))
    sr = next(n["sr"] for n in rt["nodes"] if n["addr"] == 0x70)
    hops = " -> ".join(f"half {a:#x}" for a in rt["rcvf"])
    print(f"  route A1 (0x40, GSN SAN 0x100) -> {hops} -> I1 (0x70, IB SAN {rt['san_id']:#x}); last hop "
          f"L2RH {', '.join(sr)} (DLID {IB_LIDS[1]}, QPN 0xa0)\n"
          f"  MinMTU {rt['min_mtu']} words: A1's pw0 MTU {st['mtu']} bytes (GVL2: {st['route_mtu']})")
    r = fa.ns_exec(1, "ping", "-c", "5", "-i", "0.2", "-W", "2", "10.77.0.2", check=False)
    tail = [line for line in r.stdout.splitlines() if "rtt" in line or "received" in line]
    print("  ping A1 -> I1 10.77.0.2: " + ("; ".join(tail) if tail else r.stderr.strip()))
    if shutil.which("iperf3"):
        gbps = iperf3_run(lambda *a: fa.ns_exec(1, *a, check=False, timeout=60), ["ip", "netns", "exec", fa.host_ns[1]],
                          "10.77.0.2", "-t", "2")
        print(f"  iperf3 TCP A1 (GSN) -> I1 (InfiniBand-style) across router rai, 2 s: {gbps * 1000:.0f} Mbit/s")


def _answered(what: str, reply: dict | None) -> dict:
    """A daemon's control-socket answer; none is a step that failed (reported like a timeout)."""
    if reply is None:
        raise AssertionError(f"{what}: no answer on its control socket")
    return reply


def main() -> int:
    if os.geteuid() != 0:
        print("gsn demo: needs root to create network namespaces (try: sudo ./gsn demo)", file=sys.stderr)
        return 1
    if not shutil.which("ip"):
        print("gsn demo: needs iproute2 ('ip'); ./gsn installs it", file=sys.stderr)
        return 1
    print("GSN demo: 2 gsn-switches cabled together + 3 hosts (host1, host2 on switch 1; host3 on switch 2),\n"
          "each in its own network namespace, UDP cables over veth")
    with SwitchedFabric(hosts=[1, 1, 2], links=[(1, 2)], prefix="demo") as fab:
        try:
            fab.start_switch()
            for i in (1, 2, 3):
                fab.start_gsnd(i)
            print("\nlinks and ULAs (assigned by each host's switch over Admin ASSIGN_ULA); every cable has its own key\n"
                  "(gsnctl genkey), each datagram an HMAC-SHA256 tag and a replay-window counter:")
            for i in (1, 2, 3):
                ula = fab.wait_ula(i)
                st = _answered(f"host{i}'s gsnd status", fab.gsnd_status(i))
                print(f"  host{i}  gsn0  link {st['link']['state']:<4} ULA {ula}  "
                      f"credits/VC {st['link']['credits_tx']}  auth {st['cable']['auth']}")
            poll(fab.converged, 20, interval=0.2, what="the switches' fabric map")
            print("\nthe fabric as switch 1 (the manager: lowest id) mapped it over Admin "
                  "(gsnctl -s .../sw1/control.sock fabric):")
            r = fab.ns_exec(0, str(BIN / "gsnctl"), "-s", str(fab.switch_dir(1) / "control.sock"), "fabric")
            print("\n".join("  " + line for line in r.stdout.splitlines()))
            rtts = _rtt(fab, 1, 2)
            print(f"\nround trip host1 -> host2 -> host1 (64-byte Messages, VC1, ULP sockets):\n"
                  f"  min {min(rtts):.3f} ms   median {statistics.median(rtts):.3f} ms   max {max(rtts):.3f} ms")
            print("\nthroughput host1 -> host3 through both switches (2 s each):")
            for vc, size in ((1, 65536), (3, 1 << 20)):
                gbps, got = _throughput(fab, 1, 3, vc, size)
                print(f"  VC{vc}  {size // 1024:>5} KiB Messages   {gbps:6.2f} Gbit/s   ({got / 1e6:.0f} MB delivered)")
            print("\nIP over GSN (RFC 2835: VC1, LLC/SNAP, MTU 65280) on gsn0, addressed with ip(8):")
            for i in (1, 2, 3):
                fab.ip_address(i)
                print(f"  host{i}  gsn0  192.0.2.{i}/24  2001:db8::{i}/64")
            for src, dst, extra in ((1, "192.0.2.2", ()), (2, "192.0.2.3", ()), (3, "2001:db8::1", ()),
                                    (1, "192.0.2.3", ("-M", "do", "-s", "65252"))):
                r = fab.ns_exec(src, "ping", "-c", "5", "-i", "0.2", "-W", "2", *extra, dst, check=False)
                tail = [line for line in r.stdout.splitlines() if "rtt" in line or "received" in line]
                what = f"{' '.join(extra)} " if extra else ""
                print(f"  ping {what}host{src} -> {dst}: " + ("; ".join(tail) if tail else r.stderr.strip()))
            if shutil.which("iperf3"):
                gbps = fab.iperf3(1, 3, "-t", "3")
                print(f"  iperf3 TCP host1 -> host3 through both switches, 3 s: {gbps:.2f} Gbit/s")
            else:
                print("  (iperf3 not installed: skipping the TCP run)")
            sts = [_answered(f"switch {k}'s status", fab.switch_status(k)) for k in (1, 2)]
            print("\nswitch 1 ULA table (port 21 is the cable to switch 2; 'route' entries the manager programmed):")
            for e in sts[0]["table"]:
                print(f"  {e['ula']}  -> port {e['port']}  ({e['kind']})")
            print("\ndrops on the switches:",
                  sum(v for st in sts for p in st["ports"].values() for k, v in p["counters"].items()
                      if k.startswith("drop")))
            _packetway(fab)
        except KeyboardInterrupt:
            print("\ninterrupted")
        except AssertionError as exc:  # a step that timed out: say which, and what the daemons logged
            print(f"\ngsn demo failed: {exc}\n{fab.diagnostics(tail=15)}", file=sys.stderr)
            return 1
        finally:
            print("\ncleaning up namespaces and processes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
