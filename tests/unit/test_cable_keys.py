"""Keyed cables end to end in one process: key files (format, mode 0600, one-line
errors), `gsnctl genkey`, key_file in gsnd / gsn-switch / pktwayd configs, and the UDP
transport sealing (GSO segments each with its own MAC) and opening on loopback."""

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daemons import constants as C
from daemons.io import pmtu
from daemons.io.udp import UdpTransport
from daemons.runtime.keyfile import encode_key, parse_key, read_key, write_key
from tests.unit.linkpair import Pair
from tests.unit.test_cable_mtu import _Shrunk
from tests.unit.test_link import msgs

BIN = Path(sys.executable).parent
KEY = bytes(range(1, 33))


def run(*argv, **kw):
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True, timeout=30, **kw)


def keyfile(tmp_path, name="k", text=None, mode=0o600):
    p = tmp_path / name
    p.write_text(encode_key(KEY) + "\n" if text is None else text)
    p.chmod(mode)
    return p


# --- key files --------------------------------------------------------------------
def test_base64_and_hex_keys_parse():
    assert parse_key(encode_key(KEY)) == KEY
    assert parse_key("  " + KEY.hex().upper() + "\n") == KEY
    for bad in ("", "abc", encode_key(KEY[:31]), KEY.hex()[:-2] + "zz", encode_key(KEY) + "\n" + encode_key(KEY)):
        with pytest.raises(ValueError):
            parse_key(bad)


@pytest.mark.parametrize("setup,needle", [
    (lambda d: keyfile(d, mode=0o644), "mode 0644 lets group or others at the key; `chmod 600"),
    (lambda d: keyfile(d, mode=0o640), "mode 0640"),
    (lambda d: keyfile(d, mode=0o606), "mode 0606"),
    (lambda d: d / "missing", "cannot open: No such file or directory"),
    (lambda d: keyfile(d, text="not a key\n"), "is not a 32-byte key in base64 or hex (make one with `gsnctl genkey`)"),
    (lambda d: keyfile(d, text="x" * 5000), "longer than 4096 bytes"),
    (lambda d: keyfile(d, text="\xff\xfe"), "is not text"),
    (lambda d: d, "not a regular file"),
])
def test_bad_key_files_are_one_line_errors(tmp_path, setup, needle):
    p = setup(tmp_path)
    with pytest.raises(ValueError, match="key file ") as exc:
        read_key(str(p))
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_a_symlinked_key_is_judged_by_its_target(tmp_path):
    target = keyfile(tmp_path)
    (tmp_path / "link").symlink_to(target)
    assert read_key(str(tmp_path / "link")) == KEY
    target.chmod(0o644)
    with pytest.raises(ValueError, match="mode 0644"):
        read_key(str(tmp_path / "link"))


def test_binary_key_file_is_refused(tmp_path):
    p = tmp_path / "bin"
    p.write_bytes(b"\xff" * 40)
    p.chmod(0o600)
    with pytest.raises(ValueError, match="is not text"):
        read_key(str(p))


def test_gsnctl_genkey(tmp_path):
    r = run("gsnctl", "genkey")
    assert r.returncode == 0 and len(parse_key(r.stdout)) == 32
    assert run("gsnctl", "genkey").stdout != r.stdout  # random
    out = tmp_path / "cable.key"
    assert run("gsnctl", "genkey", "-o", str(out)).returncode == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and len(read_key(str(out))) == 32
    first = out.read_text()
    r = run("gsnctl", "genkey", "-o", str(out))
    assert r.returncode == 1 and "exists (--force replaces it)" in r.stderr and out.read_text() == first
    out.chmod(0o644)
    assert run("gsnctl", "genkey", "-o", str(out), "--force").returncode == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and out.read_text() != first
    r = run("gsnctl", "genkey", "-o", str(tmp_path / "no" / "dir"))
    assert r.returncode == 1 and "No such file or directory" in r.stderr and "Traceback" not in r.stderr


def test_write_key_refuses_to_overwrite(tmp_path):
    p = tmp_path / "k"
    write_key(str(p), KEY)
    with pytest.raises(FileExistsError):
        write_key(str(p), bytes(32))
    assert read_key(str(p)) == KEY


# --- configs ----------------------------------------------------------------------
def test_gsnd_key_file_in_config_and_flag(tmp_path):
    k = keyfile(tmp_path)
    g = tmp_path / "gsnd.toml"
    g.write_text(f'[cable]\npeer = "127.0.0.1:7001"\nlocal = "127.0.0.1:6401"\nkey_file = "{k}"\n')
    assert run("gsnd", "-c", str(g), "--check").returncode == 0
    from daemons.gsnd import config as gconfig
    assert gconfig.load(str(g), {}).key == KEY
    k.chmod(0o644)
    r = run("gsnd", "-c", str(g), "--check")
    assert r.returncode == 78 and f"{g}: cable.key_file: key file {k}: mode 0644" in r.stderr, r
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    r = run("gsnd", "--peer", "127.0.0.1:1", "--key-file", str(tmp_path / "nope"), "--check")
    assert r.returncode == 78 and r.stderr.startswith("error: --key-file: key file ") and "cannot open" in r.stderr
    # the two ends on one UDP port: the local address must be given
    k.chmod(0o600)
    r = run("gsnd", "--peer", "10.0.0.1:6400", "--key-file", str(k), "--check")
    assert r.returncode == 78 and "both ends of the keyed cable use UDP port 6400" in r.stderr, r
    assert run("gsnd", "--peer", "10.0.0.1:6400", "--local", "10.0.0.2:6400", "--key-file", str(k),
               "--check").returncode == 0
    # the trailer counts in the smallest MTU: 100 + 32
    r = run("gsnd", "--peer", "127.0.0.1:1", "--key-file", str(k), "--cable-mtu", "131", "--check")
    assert r.returncode == 78 and "131 is outside 132..65535" in r.stderr and "32-byte auth trailer" in r.stderr


def test_switch_port_key_file(tmp_path):
    k = keyfile(tmp_path)
    s = tmp_path / "sw.toml"
    port = '[[port]]\nnumber = {n}\nlocal = "127.0.0.1:700{n}"\npeer = "127.0.0.1:640{n}"\n'
    s.write_text(port.format(n=1) + f'key_file = "{k}"\n' + port.format(n=2))
    assert run("gsn-switch", "-c", str(s), "--check").returncode == 0
    from daemons.switch import config as sconfig
    cfg = sconfig.load(str(s), {})
    assert [p.key for p in cfg.ports] == [KEY, None]
    k.chmod(0o660)
    r = run("gsn-switch", "-c", str(s), "--check")
    assert r.returncode == 78 and "port[0].key_file: key file" in r.stderr and "(port 1)" in r.stderr, r
    assert len(r.stderr.strip().splitlines()) == 1


def test_pktwayd_twin_key_file(tmp_path):
    from daemons.runtime.config import ConfigError
    from pktwayd import config as pconfig
    k = keyfile(tmp_path)
    f = tmp_path / "p.toml"
    base = ('[router]\nname = "r"\n[twin]\naddr = 2\nlocal = "127.0.0.1:1"\npeer = "127.0.0.1:2"\nkey_file = "{k}"\n'
            '[[half]]\naddr = 1\nsan_id = 1\nulp = "/tmp/x.ulp"\n')
    f.write_text(base.format(k=k))
    assert pconfig.load(str(f)).twin.key == KEY
    f.write_text(base.format(k=tmp_path / "nope"))
    with pytest.raises(ConfigError, match="twin.key_file: key file .*cannot open"):
        pconfig.load(str(f))


# --- the transport ----------------------------------------------------------------
def pair(key_a=KEY, key_b=KEY, **kw):
    a = UdpTransport(("127.0.0.1", 0), None)
    b = UdpTransport(("127.0.0.1", 0), a.sock.getsockname(), key=key_b, **kw)
    if key_a is not None:
        port = a.sock.getsockname()[1]
        a.close()
        a = UdpTransport(("127.0.0.1", port), b.sock.getsockname(), key=key_a)
    else:
        a.peer = b.sock.getsockname()
    return a, b


def drain_all(t, want, timeout=2.0):
    got, end = [], time.monotonic() + timeout
    while len(got) < want and time.monotonic() < end:
        got += t.drain()
        time.sleep(0.005)
    return got


def link_datagrams(n_msgs=3):
    p = Pair(seed=1)
    p.run(0.05)
    for m in msgs(p.rng, n_msgs):
        p.links[0].enqueue(m.vc, m.records())
    return p.links[0].datagrams(p.now + 0.01)


def test_keyed_cable_fits_the_trailer_into_the_mtu():
    a, b = pair(mtu=1500)
    assert b.status()["auth"] == "on" and a.status()["auth"] == "on"
    assert (b.max_mps, b.max_datagram) == (35, C.SHIM_BYTES + 35 * C.MP_BYTES + C.AUTH_TRAILER_BYTES) == (35, 1464)
    assert pmtu.max_mps_for(1500, pmtu.family_of("127.0.0.1"), C.AUTH_TRAILER_BYTES) == 35
    plain = UdpTransport(("127.0.0.1", 0), ("127.0.0.1", 9), mtu=1500)
    assert plain.status()["auth"] == "off" and plain.max_mps == 36


def test_gso_segments_are_each_sealed_and_open_in_order():
    a, b = pair()
    sent = [bytes(C.SHIM_BYTES) + bytes([i]) * (C.MP_BYTES * 30) for i in range(40)]
    sent.append(bytes(C.SHIM_BYTES) + b"s" * (C.MP_BYTES * 2))
    b.send_many(sent)
    if b.gso:
        assert b.counters["tx_gso_sends"] == 1 and b.counters["tx_gso_datagrams"] == 41
    assert b.max_sent == len(sent[0]) + C.AUTH_TRAILER_BYTES
    assert drain_all(a, len(sent)) == sent
    assert a.counters["rx_auth_ok"] == 41 and b.auth.counter == 41
    assert not any(k.startswith("rx_auth_") and k != "rx_auth_ok" for k in a.counters)


def test_unkeyed_and_wrongly_keyed_senders_are_dropped():
    a, b = pair(key_b=None)
    b.send_many(link_datagrams())
    time.sleep(0.1)
    assert a.drain() == [] and a.counters["rx_auth_unauthenticated"] >= 1
    a, b = pair(key_b=bytes(32))
    b.send_many(link_datagrams())
    time.sleep(0.1)
    assert a.drain() == [] and a.counters["rx_auth_bad_mac"] >= 1 and "rx_auth_ok" not in a.counters


def test_a_resent_datagram_is_a_replay():
    a, b = pair()
    b.sock = _Shrunk(b.sock, 65535)  # records what leaves
    d = bytes(C.SHIM_BYTES) + bytes(C.MP_BYTES)
    b.send(d)
    assert drain_all(a, 1) == [d]
    b.sock._sock.sendto(b.sock.sent[0], b.peer)  # the same bytes again, from the peer's address
    b.send(d)  # the same datagram sent anew: a new counter
    assert drain_all(a, 1) == [d]
    time.sleep(0.05)
    assert a.drain() == [] and a.counters["rx_auth_replayed"] == 1 and a.counters["rx_auth_ok"] == 2


def test_emsgsize_recut_pieces_are_sealed_each(monkeypatch):
    a, b = pair()
    monkeypatch.setattr(pmtu, "path_mtu", lambda peer, local=None: (1500, "path"))
    b.sock = _Shrunk(b.sock, 1472)
    big = [d for d in link_datagrams() if len(d) > 1472]
    assert big
    b.send_many(big[:1])
    assert b.counters["tx_resplit_datagrams"] == 1 and (b.mtu, b.max_mps) == (1500, 35)
    assert max(map(len, b.sock.sent)) <= 1464
    got = drain_all(a, len(b.sock.sent))
    assert len(got) == len(b.sock.sent) and a.counters["rx_auth_ok"] == len(got)
    assert b"".join(d[C.SHIM_BYTES:] for d in got) == big[0][C.SHIM_BYTES:]


def test_a_keyed_transport_needs_a_peer():
    with pytest.raises(ValueError, match="peer"):
        UdpTransport(("127.0.0.1", 0), None, key=KEY)


def test_key_file_of_the_demo_fabric_is_private(tmp_path):
    """Whatever generates configs writes keys the daemons accept (mode 0600)."""
    from lab.netns import write_cable_key
    p = write_cable_key(tmp_path / "c.key")
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600 and len(read_key(str(p))) == 32


def test_every_auth_drop_is_logged_as_a_drop():
    from collections import Counter

    from daemons.runtime.log import CounterLog
    from daemons.wire.cableauth import DROP_REASONS

    class Log:
        def __init__(self):
            self.lines = []

        def warning(self, event, **kw):
            self.lines.append(kw["counter"])

    log = Log()
    CounterLog(log).update("cable", Counter({**{f"rx_auth_{r}": 1 for r in DROP_REASONS}, "rx_auth_ok": 5}), 0.0)
    assert sorted(log.lines) == sorted(f"cable.rx_auth_{r}" for r in DROP_REASONS)
