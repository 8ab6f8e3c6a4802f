"""pktwayd configuration: the bundled file loads; every mistake is one line naming
the file and key, and the daemon exits 78 without a traceback."""

import subprocess

import pytest

from lab.netns import BIN
from daemons.runtime.config import ConfigError
from pktwayd.config import load

GSN_HALF = '[[half]]\naddr = 0x50\nsan_id = 0x100\nulp = "/run/gsnd/gsn0.ulp"\n'
UDP_HALF = ('[[half]]\nkind = "udp"\naddr = 0x51\nsan_id = 0x200\nswitch = "127.0.0.1:7400"\n'
            'local = "127.0.0.1:7401"\nport = 1\n[[half.node]]\naddr = 0x60\nport = 2\n')
TWIN = '[twin]\naddr = 0x51\nlocal = "127.0.0.1:7350"\npeer = "127.0.0.1:7351"\n'


def write(tmp_path, text):
    p = tmp_path / "pktwayd.toml"
    p.write_text('[router]\nname = "r"\n' + text)
    return str(p)


def test_bundled_config_loads():
    cfg = load("etc/pktwayd.toml")
    assert [h.addr for h in cfg.halves] == [0x50, 0x51] and cfg.twin is None and cfg.k == 3


def test_gsn_and_udp_halves_and_a_split_router(tmp_path):
    cfg = load(write(tmp_path, GSN_HALF + UDP_HALF))
    udp = cfg.halves[1]
    assert udp.kind == "udp" and udp.port == 1 and udp.nodes[1].sr[0].route == bytes((2, 3, 0)) and not udp.map
    cfg = load(write(tmp_path, TWIN + GSN_HALF))
    assert cfg.twin.addr == 0x51 and cfg.twin.peer == ("127.0.0.1", 7351) and len(cfg.halves) == 1


@pytest.mark.parametrize("text, where", [
    (GSN_HALF, "[[half]]"),  # one half and no twin
    (TWIN + GSN_HALF + UDP_HALF, "[[half]]"),  # a twin and two halves
    (GSN_HALF + GSN_HALF.replace("0x50", "0x52", 1), "half[1].san_id"),
    (GSN_HALF + UDP_HALF.replace("port = 1\n", ""), "half[1].port"),
    (GSN_HALF + UDP_HALF.replace('"udp"', '"atm"'), "half[1].kind"),
    (GSN_HALF + UDP_HALF.replace("port = 2", 'ula = "02:00:00:00:00:01"'), "half[1].node[0].port"),
    (GSN_HALF + UDP_HALF + "[[half.node]]\naddr = 0x60\nport = 3\n", "half[1].node[1].addr"),
    (TWIN.replace("127.0.0.1:7351", "nowhere") + GSN_HALF, "twin.peer"),
    (TWIN.replace("0x51", "0x50") + GSN_HALF, "twin.addr"),
    ("[routing]\n" + GSN_HALF, "[routing]"),
])
def test_mistakes_are_named(tmp_path, text, where):
    with pytest.raises(ConfigError) as err:
        load(write(tmp_path, text))
    assert where in str(err.value) and "\n" not in str(err.value)


def test_daemon_exits_78_with_one_line(tmp_path):
    path = write(tmp_path, GSN_HALF)
    r = subprocess.run([str(BIN / "pktwayd"), "-c", path, "--check"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 78 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
