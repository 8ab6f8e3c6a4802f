"""ib-sm / ib-switch / ipoibd configuration: one-line errors and exit 78, the
partitions file (OpenSM defaults: default partition, full/limited membership)."""

import subprocess
import sys
from pathlib import Path

import pytest

from ib import partitions
from ib.partitions import may_talk, pkey_table

BIN = Path(sys.executable).parent
GOOD = ["--guid", "0x2", "--local", "127.0.0.1:4800", "--peer", "127.0.0.1:4701", "--sm", "127.0.0.1:4791"]


def run(*argv):
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("argv,needle", [
    (["ipoibd", *GOOD, "--child", "0x8000"], "0 and 0x8000 are not partitions"),
    (["ipoibd", *GOOD, "--child", "zz"], "is not a P_Key"),
    (["ipoibd", *GOOD[:-2]], "port.sm: missing"),
    (["ipoibd", *GOOD[2:], "--guid", "0x0"], "outside 1..2^64-1"),
    (["ipoibd", *GOOD, "-i", "a-very-long-interface-name"], "is not an interface name"),
    (["ipoibd", *GOOD, "--peer", "nowhere"], "is not host:port"),
    (["ib-sm", "--listen", "1.2.3:99999"], "is not host:port"),
])
def test_bad_input_is_one_line_and_exit_78(argv, needle):
    r = run(*argv, "--check")
    assert r.returncode == 78, r.stderr
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_bad_partitions_file(tmp_path):
    p = tmp_path / "p.toml"
    for text, needle in [
        ("[[partition]]\npkey = 0x8001\nall = \"maybe\"\n", "is not one of full, limited, none"),
        ("[[partition]]\npkey = 0x8001\n[[partition]]\npkey = 0x0001\n", "defined twice"),
        ("[[partition]]\npkey = 0x8001\ncolour = 1\n", "partition[0].colour: unknown key"),
        ("[[partition]]\npkey = 0x8000\n", "are not partitions"),
        ("[[partition]]\npkey = 0x8001\nfull = [\"xyz\"]\n", "is not a GUID"),
        ("[[partition]\n", str(p)),
    ]:
        p.write_text(text)
        r = run("ib-sm", "--partitions", str(p), "--check")
        assert r.returncode == 78 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_switch_config_errors(tmp_path):
    c = tmp_path / "s.toml"
    c.write_text("[switch]\nguid = \"0x1\"\nsm = \"127.0.0.1:4791\"\n")
    r = run("ib-switch", "-c", str(c), "--check")
    assert r.returncode == 78 and "at least one port" in r.stderr
    c.write_text("[switch]\nguid = \"0x1\"\nsm = \"127.0.0.1:4791\"\n[[port]]\nnumber = 64\nlocal = \"127.0.0.1:1\"\n"
                 "peer = \"127.0.0.1:2\"\n")
    r = run("ib-switch", "-c", str(c), "--check")
    assert r.returncode == 78 and "port[0].number: 64 is outside 1..63" in r.stderr


def test_help_teaches_and_ibctl_without_daemon():
    for prog in ("ib-sm", "ib-switch", "ipoibd", "ibctl"):
        r = run(prog, "--help")
        assert r.returncode == 0 and "InfiniBand-style" in r.stdout, prog
    assert "Example" in run("ipoibd", "--help").stdout
    r = run("ibctl", "-s", "/nonexistent/ib0.ctl", "neighbours")
    assert r.returncode == 69 and "is not running" in r.stderr


def test_partition_defaults_follow_opensm(tmp_path):
    assert pkey_table(partitions.load(None), 5) == (0xFFFF,)  # no file: everyone full in 0x7fff
    p = tmp_path / "p.toml"
    p.write_text("[[partition]]\nname = \"red\"\npkey = 0x8001\nfull = [\"0x5\"]\nlimited = [\"0x6\"]\n")
    parts = partitions.load(str(p))
    assert parts[0].pkey == 0x7FFF  # always there, index 0
    assert pkey_table(parts, 5) == (0x7FFF, 0x8001)  # a file: limited in the default partition unless listed
    assert pkey_table(parts, 6) == (0x7FFF, 0x0001)
    assert pkey_table(parts, 7) == (0x7FFF,)
    assert may_talk(0x8001, 0x0001) and not may_talk(0x0001, 0x0001) and not may_talk(0x8001, 0x8002)
