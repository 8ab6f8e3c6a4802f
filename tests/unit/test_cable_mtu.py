"""Cable datagrams that fit the underlay: path MTU -> micropackets per datagram, Don't
Fragment, re-cutting on EMSGSIZE, UDP GSO/GRO, and the [cable] mtu config."""

import errno
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daemons import constants as C
from daemons.io import pmtu
from daemons.io.udp import UdpTransport
from tests.unit.linkpair import Pair
from tests.unit.test_link import msgs, per_vc

BIN = Path(sys.executable).parent
V4, V6 = socket.AF_INET, socket.AF_INET6


def test_max_mps_follows_the_mtu():
    assert pmtu.max_mps_for(1500, V4) == (1500 - 20 - 8 - 32) // 40 == 36
    assert pmtu.max_mps_for(1500, V6) == (1500 - 40 - 8 - 32) // 40 == 35
    assert pmtu.max_mps_for(9000, V4) == 223
    assert pmtu.max_mps_for(65535, V4) == C.MAX_DATAGRAM_MPS
    assert pmtu.max_mps_for(pmtu.min_mtu(V4), V4) == 1 and pmtu.min_mtu(V4) == 100 and pmtu.min_mtu(V6) == 120
    for fam, bad in ((V4, 99), (V6, 119), (V4, 65536)):
        with pytest.raises(ValueError):
            pmtu.check_mtu(bad, fam)


def test_split_datagrams_are_valid_batches():
    """A sequenced datagram cut at micropacket boundaries (new shim seq each) is
    accepted piece by piece: everything arrives, in order, on a lossy path too."""
    p = Pair(seed=3, drop=0.02)
    pieces = []
    for link in p.links:
        for name in ("datagrams", "handle_timer"):
            orig = getattr(link, name)

            def cut(now, orig=orig):
                out = []
                for d in orig(now):
                    out += pmtu.split_datagram(d, 7)
                pieces.extend(out)
                return out
            setattr(link, name, cut)
    p.run(0.05)
    sent = msgs(p.rng, 6)
    for m in sent:
        p.links[0].enqueue(m.vc, m.records())
    p.run(3.0)
    assert per_vc(p.got[1]) == per_vc(sent)
    assert max((len(d) - C.SHIM_BYTES) // C.MP_BYTES for d in pieces) == 7


def pair(**kw):
    a = UdpTransport(("127.0.0.1", 0), None)
    b = UdpTransport(("127.0.0.1", 0), a.sock.getsockname(), **kw)
    a.peer = b.sock.getsockname()
    return a, b


def drain_all(t, want, timeout=2.0):
    got, end = [], time.monotonic() + timeout
    while len(got) < want and time.monotonic() < end:
        got += t.drain()
        time.sleep(0.005)
    return got


def test_path_mtu_of_loopback_and_a_configured_ceiling():
    a, b = pair()
    assert b.mtu_source == "path" and b.mtu >= 65535 and b.max_mps == C.MAX_DATAGRAM_MPS
    a2, b2 = pair(mtu=1500)
    assert (b2.mtu, b2.mtu_source, b2.max_mps, b2.max_datagram) == (1500, "configured", 36, 1472)
    for t in (a, b, a2, b2):
        v = t.sock.getsockopt(socket.IPPROTO_IP, pmtu.IP_MTU_DISCOVER)
        assert v == pmtu.IP_PMTUDISC_DO  # Don't Fragment on every cable socket
        t.close()


def test_gso_send_arrives_as_the_same_datagrams():
    a, b = pair()
    if not b.gso:
        pytest.skip("no UDP GSO here")
    sent = [bytes([i]) * 1472 for i in range(40)] + [b"short" * 10]
    b.send_many(sent)
    assert b.counters["tx_gso_sends"] == 1 and b.counters["tx_gso_datagrams"] == 41
    got = drain_all(a, len(sent))
    assert got == sent
    # runs break at a size change; more than 64 segments take two calls
    b.send_many([b"x" * 100] * 70 + [b"y" * 200] * 3)
    assert b.counters["tx_gso_sends"] == 1 + 3  # 64 x, 6 x, 3 y
    assert drain_all(a, 73) == [b"x" * 100] * 70 + [b"y" * 200] * 3
    assert not any(k.startswith(("tx_error", "gso_unsupported", "tx_dropped")) for k in b.counters)


def test_gro_receive_splits_coalesced_datagrams_with_a_short_last_one():
    a, b = pair()
    if not (a.gro and b.gso):
        pytest.skip("no UDP GRO/GSO here")
    sent = [bytes([i]) * 1000 for i in range(9)] + [b"z" * 333]
    b.send_many(sent)
    assert drain_all(a, len(sent)) == sent
    assert a.counters["rx_gro_coalesced"] >= 1  # loopback hands the GSO datagram up whole


class _NoGso:
    """A socket whose kernel refuses UDP_SEGMENT (as one without GSO does)."""

    def __init__(self, sock, err):
        self._sock, self.err, self.calls = sock, err, 0

    def sendmsg(self, *a):
        self.calls += 1
        raise OSError(self.err, "no GSO")

    def __getattr__(self, name):
        return getattr(self._sock, name)


@pytest.mark.parametrize("err", [errno.EIO, errno.ENOPROTOOPT, errno.EINVAL])
def test_without_gso_datagrams_go_one_by_one_detected_once(err):
    a, b = pair()
    b.gso = True
    b.sock = _NoGso(b.sock, err)
    sent = [bytes([i]) * 500 for i in range(10)]
    b.send_many(sent)
    b.send_many(sent)
    assert b.sock.calls == 1 and not b.gso
    assert b.counters[f"gso_unsupported_{errno.errorcode[err]}"] == 1
    assert drain_all(a, 20) == sent + sent


def test_a_foreign_sender_is_dropped_and_counted():
    a, b = pair()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as other:
        other.sendto(b"intruder", a.sock.getsockname())
        b.send(b"friend")
        got = drain_all(a, 1)
        time.sleep(0.05)
        got += a.drain()
    assert got == [b"friend"] and a.counters["rx_foreign_datagram"] == 1


class _Shrunk:
    """A socket whose path MTU just dropped: datagrams over ``limit`` fail EMSGSIZE."""

    def __init__(self, sock, limit):
        self._sock, self.limit, self.sent = sock, limit, []

    def sendto(self, data, addr):
        if len(data) > self.limit:
            raise OSError(errno.EMSGSIZE, "Message too long")
        self.sent.append(data)
        return self._sock.sendto(data, addr)

    def sendmsg(self, bufs, anc, flags, addr):
        if max(map(len, bufs)) > self.limit:
            raise OSError(errno.EINVAL, "gso_size over the path MTU")
        return self._sock.sendmsg(bufs, anc, flags, addr)

    def __getattr__(self, name):
        return getattr(self._sock, name)


def test_emsgsize_recuts_the_datagram_and_lowers_max_mps(monkeypatch):
    """The kernel's path MTU fell to 1500: the datagram that failed is sent cut to
    fit at once, max_mps drops for new ones, the change is reported once."""
    reports = []
    a = UdpTransport(("127.0.0.1", 0), None)
    b = UdpTransport(("127.0.0.1", 0), a.sock.getsockname(), on_mtu=reports.append)
    a.peer = b.sock.getsockname()
    assert b.max_mps == C.MAX_DATAGRAM_MPS
    monkeypatch.setattr(pmtu, "path_mtu", lambda peer, local=None: (1500, "path"))
    b.sock = _Shrunk(b.sock, 1472)
    p = Pair(seed=1)
    p.run(0.05)
    for m in msgs(p.rng, 3):
        p.links[0].enqueue(m.vc, m.records())
    big = [d for d in p.links[0].datagrams(p.now + 0.01) if len(d) > 1472]
    assert big
    b.send_many(big[:1])
    assert b.counters["tx_emsgsize"] == 1 and b.counters["tx_resplit_datagrams"] == 1
    assert (b.mtu, b.max_mps) == (1500, 36) and reports[-1]["max_mps"] == 36
    n = (len(big[0]) - C.SHIM_BYTES) // C.MP_BYTES
    assert len(b.sock.sent) == -(-n // 36) and max(map(len, b.sock.sent)) <= 1472
    assert b"".join(d[C.SHIM_BYTES:] for d in b.sock.sent) == big[0][C.SHIM_BYTES:]
    got = drain_all(a, len(b.sock.sent))
    assert got == b.sock.sent
    n_reports = len(reports)
    b.refresh_mtu()
    assert len(reports) == n_reports  # logged once


def run(*argv):
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("argv,needle", [
    (["--cable-mtu", "99"], "--cable-mtu: 99 is outside 100..65535"),
    (["--cable-mtu", "70000"], "--cable-mtu: 70000 is outside"),
])
def test_gsnd_cable_mtu_flag_checked(argv, needle):
    r = run("gsnd", "--peer", "127.0.0.1:1", *argv, "--check")
    assert r.returncode == 78 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r
    assert run("gsnd", "--peer", "127.0.0.1:1", "--cable-mtu", "1500", "--check").returncode == 0


def test_cable_mtu_in_config_files(tmp_path):
    g = tmp_path / "gsnd.toml"
    g.write_text('[cable]\npeer = "[::1]:1"\nlocal = "[::1]:2"\nmtu = 110\n')
    r = run("gsnd", "-c", str(g), "--check")
    assert r.returncode == 78 and "cable.mtu: 110 is outside 120..65535" in r.stderr and str(g) in r.stderr, r
    g.write_text('[cable]\npeer = "127.0.0.1:1"\nmtu = 9000\n')
    assert run("gsnd", "-c", str(g), "--check").returncode == 0
    s = tmp_path / "sw.toml"
    port = '[[port]]\nnumber = 1\nlocal = "127.0.0.1:1"\npeer = "127.0.0.1:2"\n'
    s.write_text('[cable]\nmtu = 50\n' + port)
    r = run("gsn-switch", "-c", str(s), "--check")
    assert r.returncode == 78 and "cable.mtu: 50 is outside" in r.stderr, r
    s.write_text('[cable]\nmtu = 1500\n' + port + "mtu = 64\n")
    r = run("gsn-switch", "-c", str(s), "--check")
    assert r.returncode == 78 and "port[0].mtu: 64 is outside" in r.stderr, r
    s.write_text('[cable]\nmtu = 1500\n' + port)
    assert run("gsn-switch", "-c", str(s), "--check").returncode == 0
    r = run("gsn-switch", "-c", str(s), "--cable-mtu", "10", "--check")
    assert r.returncode == 78 and "--cable-mtu: 10 is outside" in r.stderr, r
    from daemons.switch import config as sconfig
    cfg = sconfig.load(str(s), {"cable_mtu": 9000})
    assert cfg.ports[0].mtu == 9000


def test_pktwayd_twin_mtu(tmp_path):
    from daemons.runtime.config import ConfigError
    from pktwayd import config as pconfig
    base = ('[router]\nname = "r"\n[twin]\naddr = 2\nlocal = "127.0.0.1:1"\npeer = "127.0.0.1:2"\n{mtu}'
            '[[half]]\naddr = 1\nsan_id = 1\nulp = "/tmp/x.ulp"\n')
    f = tmp_path / "p.toml"
    f.write_text(base.format(mtu="mtu = 1500\n"))
    assert pconfig.load(str(f)).twin.mtu == 1500
    f.write_text(base.format(mtu="mtu = 20\n"))
    with pytest.raises(ConfigError, match="twin.mtu: 20 is outside"):
        pconfig.load(str(f))
