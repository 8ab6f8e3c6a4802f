"""snetd, snet-router, snetctl and pktwayd's servernet half: bad configuration and
options give one line (exit 78 or a usage error), never a traceback; --help teaches."""

import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
ETC = Path(__file__).resolve().parents[2] / "etc"
FABRICS = ('[fabric.x]\nlocal = "127.0.0.1:1"\nrouter = "127.0.0.1:2"\n'
           '[fabric.y]\nlocal = "127.0.0.1:3"\nrouter = "127.0.0.1:4"\n')
PEER = '[[peer]]\nid = 0x08001\n'


def run(*argv):
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True, timeout=30)


def test_shipped_example_is_valid():
    r = run("snetd", "-c", str(ETC / "snetd.toml"), "--check")
    assert r.returncode == 0 and r.stdout == "snetd: ok\n", r.stderr


@pytest.mark.parametrize("text,needle", [
    ("[node\n", ":1: "),
    (FABRICS + PEER, "node.id: missing"),
    ("[node]\nid = 0x100000\n" + FABRICS + PEER, "node.id: 1048576 is outside"),
    ("[node]\nid = 1\n" + PEER, "fabric.x: missing"),
    ("[node]\nid = 1\n" + FABRICS.replace("127.0.0.1:3", "127.0.0.1:1"), "X and Y need separate sockets"),
    ("[node]\nid = 1\n" + FABRICS, "[[peer]]: give at least one peer"),
    ("[node]\nid = 1\n" + FABRICS + "[[peer]]\nid = 1\n", "is this node or listed twice"),
    ("[node]\nid = 1\n" + FABRICS + PEER + '[[window]]\npage = 1\naccess = "x"\n', "access 'x' is not r, w or rw"),
    ("[node]\nid = 1\n" + FABRICS + PEER + '[[window]]\npage = 1\npaths = ["z"]\n', "window[0].paths"),
    ("[node]\nid = 1\n" + FABRICS + PEER + '[[window]]\npage = 1\nsources = [7]\n', "configured peer's id"),
    ("[node]\nid = 1\n" + FABRICS + PEER + '[[window]]\npage = 1\npages = 4\n[[window]]\npage = 3\n',
     "page 0x3 is also in"),
    ("[node]\nid = 1\nspeed = 3\n" + FABRICS + PEER, "node.speed: unknown key"),
])
def test_snetd_bad_config(tmp_path, text, needle):
    cfg = tmp_path / "snetd.toml"
    cfg.write_text(text)
    r = run("snetd", "-c", str(cfg), "--check")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 78 and len(lines) == 1 and "Traceback" not in r.stderr, r
    assert needle in lines[0] and str(cfg) in lines[0]


@pytest.mark.parametrize("args,needle", [
    (["--listen", "127.0.0.1:1"], "at least one cabled port"),
    (["--listen", "nowhere", "--port", "0=127.0.0.1:2"], "--listen"),
    (["--listen", "127.0.0.1:1", "--port", "12=127.0.0.1:2"], "N in 0..11"),
    (["--listen", "127.0.0.1:1", "--port", "0=127.0.0.1:2", "--route", "0x1=3"], "port 3 is not cabled"),
    (["--listen", "127.0.0.1:1", "--port", "0=127.0.0.1:2", "--route", "0x40001/6=0"], "beyond the /6 prefix"),
    (["--listen", "127.0.0.1:1", "--port", "0=127.0.0.1:2", "--route", "1=0", "--route", "1=0"], "routed twice"),
    (["--listen", "127.0.0.1:1", "--port", "0=127.0.0.1:2", "--enable", "0=5"], "--enable"),
])
def test_router_bad_options(args, needle):
    r = run("snet-router", "--fabric", "x", *args, "--check")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 78 and len(lines) == 1 and needle in lines[0], r


def test_help_teaches():
    for prog in ("snetd", "snet-router", "snetctl"):
        r = run(prog, "--help")
        assert r.returncode == 0 and ("Example" in r.stdout or "snetctl -s" in r.stdout), prog


def test_snetctl_usage_errors_and_no_daemon(tmp_path):
    r = run("snetctl", "-s", str(tmp_path / "no.sock"), "status")
    assert r.returncode == 69 and "not running" in r.stderr
    r = run("snetctl", "-s", str(tmp_path / "no.sock"), "write", "b", "0x10", "--hex", "zz")
    assert r.returncode == 2 and "not hex" in r.stderr and "Traceback" not in r.stderr
    r = run("snetctl", "-s", str(tmp_path / "no.sock"), "read", "b", "nope", "8")
    assert r.returncode == 2 and "not a number" in r.stderr
    r = run("snetctl", "-s", str(tmp_path / "no.sock"), "block", "b", "0x10")
    assert r.returncode == 2 and "--file or --random" in r.stderr


def test_pktwayd_servernet_half_errors(tmp_path):
    snet = tmp_path / "snet.toml"
    snet.write_text("[node]\nid = 0x04001\n" + FABRICS + PEER)
    base = f"""[router]\nname = "r"\ncontrol = "{tmp_path}/r.sock"\n[[half]]\naddr = 0x50\nsan_id = 1\nulp = "/x.ulp"
[[half]]\nkind = "servernet"\naddr = 0x51\nsan_id = 2\nservernet = "{snet}"\n"""
    cfg = tmp_path / "r.toml"
    cfg.write_text(base)
    r = run("pktwayd", "-c", str(cfg), "--check")
    assert r.returncode == 78 and "PacketWay needs windows named 'pktway-ring'" in r.stderr, r.stderr
    snet.write_text(snet.read_text() + '[[window]]\nname = "pktway-ring"\npage = 0x400\npages = 16\nper_source = true\n'
                    '[[window]]\nname = "pktway-bell"\npage = 0x410\naccess = "w"\ninterrupt = true\n')
    for node, needle in [("did = 0x0c001", "is not a [[peer]]"), ('did = 0x08001\nfabric = "z"', "not x, y or either"),
                         ("did = 0x08001\nring = 0x123", "page-aligned")]:
        cfg.write_text(base + f"[[half.node]]\naddr = 0x60\n{node}\n")
        r = run("pktwayd", "-c", str(cfg), "--check")
        assert r.returncode == 78 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr
    cfg.write_text(base + "[[half.node]]\naddr = 0x60\ndid = 0x08001\n")
    assert run("pktwayd", "-c", str(cfg), "--check").returncode == 0
