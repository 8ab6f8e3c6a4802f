"""Bad configuration: one line naming file and key or line, exit 78, never a traceback."""

import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
ETC = Path(__file__).resolve().parents[2] / "etc"


def run(*argv):
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("text,needle", [
    ('[gsnd\n', ":1: "),
    ('[gsnd]\nula = "zz"\n[cable]\npeer = "127.0.0.1:1"\n', "gsnd.ula: 'zz' is not a ULA"),
    ('[cable]\npeer = "nowhere"\n', "cable.peer: 'nowhere' is not host:port"),
    ('[cable]\npeer = "127.0.0.1:1"\nid = "one"\n', "cable.id: expected int"),
    ('[cable]\npeer = "127.0.0.1:1"\n[link]\nbuffers = [1, 2]\n', "link.buffers"),
    ('[cable]\npeer = "127.0.0.1:1"\nspeed = 9\n', "cable.speed: unknown key"),
    ('[gsnd]\n', "cable.peer: missing"),
    ('[cable]\npeer = "127.0.0.1:1"\n[link]\nkeepalive_ms = 500\ndead_interval_ms = 100\n', "dead_interval_ms"),
])
def test_gsnd_bad_config(tmp_path, text, needle):
    cfg = tmp_path / "gsnd.toml"
    cfg.write_text(text)
    r = run("gsnd", "-c", str(cfg), "--check")
    assert r.returncode == 78, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr
    assert needle in lines[0] and (str(cfg) in lines[0])


@pytest.mark.parametrize("text,needle", [
    ('[switch]\nid = 1\n', "[[port]]: at least one port"),
    ('[[port]]\nnumber = 1\nlocal = "127.0.0.1:1"\npeer = "127.0.0.1:2"\n'
     '[[port]]\nnumber = 1\nlocal = "127.0.0.1:3"\npeer = "127.0.0.1:4"\n', "port[1].number: port 1 configured twice"),
    ('[[port]]\nnumber = 1\nlocal = "127.0.0.1:1"\npeer = "127.0.0.1:2"\n[[static]]\nula = "00:10:3b:ff:ff:e0"\n'
     'port = 7\n', "static[0].port: no port 7"),
    ('[switch]\nid = 300\n[[port]]\nnumber = 1\nlocal = "127.0.0.1:1"\npeer = "127.0.0.1:2"\n', "switch.id"),
    ('[[port]]\nnumber = 1\nlocal = "127.0.0.1:1"\npeer = "127.0.0.1:2"\nmanagement = "yes"\n',
     "port[0].management: expected bool"),
    ('[[port]]\nnumber = 1\nlocal = "127.0.0.1:1"\npeer = "127.0.0.1:2"\ntrust_source = 1\n',
     "port[0].trust_source: expected bool"),
    ('[[port]]\nnumber = 70\nlocal = "127.0.0.1:1"\npeer = "127.0.0.1:2"\nswitch = true\n',
     "port[0].switch: an inter-switch port is numbered 1..64"),
    ('[[port]]\nnumber = 1\nlocal = "127.0.0.1:1"\npeer = "127.0.0.1:2"\nswitch = "on"\n',
     "port[0].switch: expected bool"),
])
def test_switch_bad_config(tmp_path, text, needle):
    cfg = tmp_path / "sw.toml"
    cfg.write_text(text)
    r = run("gsn-switch", "-c", str(cfg), "--check")
    assert r.returncode == 78 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r


def test_bundled_configs_are_valid():
    assert run("gsn-switch", "-c", str(ETC / "gsn-switch.toml"), "--check").returncode == 0
    assert run("gsnd", "-c", str(ETC / "gsnd.toml"), "--check").returncode == 0


def test_bad_flag_value_and_missing_file():
    r = run("gsnd", "--peer", "127.0.0.1:99999", "--check")
    assert r.returncode == 78 and "--peer" in r.stderr
    r = run("gsnd", "-c", "/nonexistent/gsnd.toml")
    assert r.returncode == 78 and "cannot read" in r.stderr


def test_gsnctl_without_daemon_is_one_line(tmp_path):
    r = run("gsnctl", "-s", str(tmp_path / "none.ctl"), "status")
    assert r.returncode == 69 and "is not running" in r.stderr and "Traceback" not in r.stderr


def test_switch_security_keys_reach_the_core(tmp_path):
    """[[port]] management / trust_source (issue 12): off unless set, per port."""
    import socket

    from daemons.switch import config as sconfig
    from daemons.switch.daemon import SwitchDaemon

    def free_udp():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    cfg = tmp_path / "sw.toml"
    cfg.write_text(f'[switch]\nruntime_dir = "{tmp_path}"\n'
                   + ''.join(f'[[port]]\nnumber = {n}\nlocal = "127.0.0.1:{free_udp()}"\npeer = "127.0.0.1:9"\n'
                             f'{extra}' for n, extra in ((1, ""), (2, "management = true\n"), (3, "trust_source = true\n"),
                                                        (4, "switch = true\n"))))
    c = sconfig.load(str(cfg), {})
    assert [(p.management, p.trust_source, p.switch) for p in c.ports] == [
        (False, False, False), (True, False, False), (False, True, False), (False, False, True)]

    async def build():
        d = SwitchDaemon(c)
        try:
            return {n: (p.management, p.trust_source, p.fabric) for n, p in d.core.ports.items()}
        finally:
            for t in d.transports.values():
                t.close()

    import trio
    assert trio.run(build) == {1: (False, False, False), 2: (True, False, False), 3: (False, True, False),
                               4: (False, False, True)}
