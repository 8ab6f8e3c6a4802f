"""gsnarp through click's CliRunner against harpd's real control handler on a real
Unix socket (harpd's cores fed by hand; only the kernel's neighbour table is canned)."""

import socket
import threading
from ipaddress import ip_address

import pytest
import trio
from click.testing import CliRunner

from daemons.constants import ULA_HARP_SERVER
from daemons.runtime.control import request, serve_control
from harpd import cli as gsnarp_cli
from harpd.cli import gsnarp_main
from harpd.constants import Op
from harpd.options import parse
from harpd.wire import Harp

OPTIONS = "lis gsn0 192.0.2.0/24\nlis gsn0 2001:db8::/64\nrole gsn0 server\nlis gsn1 127.0.0.0/8\n"
SRV, C1, C2 = bytes.fromhex("024753010100"), bytes.fromhex("024753010200"), bytes.fromhex("024753010300")
KERNEL = {"gsn1": [{"ip": "127.0.0.1", "ula": "02:47:53:02:01:00", "state": "reachable"},
                   {"ip": "127.0.0.9", "ula": "02:47:53:02:09:00", "state": "stale"}]}


@pytest.fixture
def harpd(tmp_path):
    from harpd.daemon import CONTROL_SCHEMA, Harpd

    path = str(tmp_path / "control.sock")
    ready, box = threading.Event(), {}

    async def main():
        h = Harpd(parse(OPTIONS, "t"), runtime_dir=str(tmp_path), state_dir=str(tmp_path / "state"),
                  gsnd_runtime=str(tmp_path))
        now = trio.current_time()
        core = h.agents["gsn0"].core
        core.set_port(SRV, [ip_address("192.0.2.1"), ip_address("2001:db8::1")], now)
        for ip, ula in (("192.0.2.2", C1), ("2001:db8::2", C1), ("192.0.2.3", C2)):
            a = ip_address(ip)
            core.receive(ula, Harp(Op.INHARP_REQUEST, a, type(a)(0), ula, ULA_HARP_SERVER).encode(), now)
        core.outgoing()
        for name, agent in h.agents.items():
            agent.kernel.neighbours = lambda name=name: list(KERNEL.get(name, []))
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_control, path, h._control, CONTROL_SCHEMA)
            box["cancel"], box["token"], box["harpd"] = nursery.cancel_scope.cancel, trio.lowlevel.current_trio_token(), h
            ready.set()

    t = threading.Thread(target=trio.run, args=(main,), daemon=True)
    t.start()
    assert ready.wait(10)
    yield path, box["harpd"]
    trio.from_thread.run_sync(box["cancel"], trio_token=box["token"])
    t.join(10)


def run(path, *args):
    return CliRunner().invoke(gsnarp_main, ["--socket", path, *args])


def rows(out):
    return {line.split()[0]: line.split() for line in out.splitlines()[1:]}


def test_all_numeric_lists_harp_and_kernel_entries(harpd):
    path, _ = harpd
    r = run(path, "-a", "-n")
    assert r.exit_code == 0, r.output
    t = rows(r.output)
    assert t["192.0.2.2"][1:4] == ["02:47:53:01:02:00", "192.0.2.0/24", "dynamic"]
    assert t["2001:db8::2"][1:4] == ["02:47:53:01:02:00", "2001:db8::/64", "dynamic"] and t["2001:db8::2"][-1] == "gsn0"
    # the kernel's own neighbours on a gsn interface (broadcast fabric: harpd's table is empty there)
    assert t["127.0.0.9"][1:4] == ["02:47:53:02:09:00", "127.0.0.0/8", "kernel"] and t["127.0.0.9"][-1] == "gsn1"
    assert rows(run(path, "-n").output) == t  # no option: the same as -a


def test_names_by_default_numeric_with_n(harpd):
    path, _ = harpd
    r = run(path, "-i", "gsn1")
    assert r.exit_code == 0 and "localhost (127.0.0.1)" in r.output  # reverse lookup (/etc/hosts)
    assert "gsn0" not in r.output
    r = run(path, "-n", "-i", "gsn1")
    assert "localhost" not in r.output and "127.0.0.1 " in r.output


def test_one_host_by_address_or_name(harpd):
    path, _ = harpd
    r = run(path, "-n", "192.0.2.3")
    assert r.exit_code == 0 and list(rows(r.output)) == ["192.0.2.3"]
    r = run(path, "-n", "2001:db8:0::2")  # any spelling of the address
    assert r.exit_code == 0 and list(rows(r.output)) == ["2001:db8::2"]
    r = run(path, "localhost")  # a name (getaddrinfo), shown with its name
    assert r.exit_code == 0 and r.output.splitlines()[1].startswith("localhost (127.0.0.1)")
    r = run(path, "-n", "192.0.2.77")
    assert r.exit_code == 1 and r.output == "gsnarp: 192.0.2.77: no entry\n"


def test_unknown_name_is_one_line(harpd, monkeypatch):
    path, _ = harpd

    def nxdomain(host, *a, **k):  # what the resolver says for a name nobody knows (no DNS traffic from tests)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(gsnarp_cli.socket, "getaddrinfo", nxdomain)
    for args in (["nosuchhost"], ["-d", "nosuchhost"], ["-s", "nosuchhost", "02:00:00:00:00:01"]):
        r = run(path, *args)
        assert r.exit_code == 1 and r.output == "gsnarp: nosuchhost: unknown host (Name or service not known)\n"


def test_set_and_delete_by_name_and_ipv6(harpd):
    path, h = harpd
    assert run(path, "-s", "localhost", "02:47:53:00:07:00").exit_code == 0  # the name's address in gsn1's LIS
    assert h.agents["gsn1"].core.lis[0].cache[ip_address("127.0.0.1")].static
    assert rows(run(path, "-n", "localhost").output)["127.0.0.1"][3] == "static"
    assert run(path, "-s", "2001:db8::7", "02:47:53:00:07:00").exit_code == 0
    assert rows(run(path, "-n", "2001:db8::7").output)["2001:db8::7"][1:4] == \
        ["02:47:53:00:07:00", "2001:db8::/64", "static"]
    assert "static gsn0 2001:db8::7 02:47:53:00:07:00" in (h.store.path.read_text())
    assert run(path, "-d", "2001:db8::7").exit_code == 0
    r = run(path, "-d", "2001:db8::7")
    assert r.exit_code == 1 and r.output == "gsnarp: 2001:db8::7: no such entry\n"
    r = run(path, "-s", "2001:db9::7", "02:47:53:00:07:00")
    assert r.exit_code == 1 and r.output == "gsnarp: 2001:db9::7 is in no LIS harpd serves\n"


def test_usage_errors_are_one_line(harpd):
    path, _ = harpd
    r = run(path, "192.0.2.3", "-d", "192.0.2.3")
    assert r.exit_code == 2 and "does not go with" in r.output
    r = run(path, "-s", "192.0.2.50", "zz")
    assert r.exit_code == 1 and len(r.output.splitlines()) == 1 and "ULA" in r.output
    r = run(path, "-i", "gsn9", "-s", "192.0.2.50", "02:00:00:00:00:01")
    assert r.exit_code == 1 and r.output == "gsnarp: harpd serves no interface 'gsn9' (gsn0, gsn1)\n"
    r = run("/nonexistent/control.sock", "-a")
    assert r.exit_code == 69 and len(r.output.splitlines()) == 1


def test_help_teaches():
    r = CliRunner().invoke(gsnarp_main, ["--help"])
    assert r.exit_code == 0
    for needle in ("gsnarp node3", "-n", "fe80::1%gsn0", "type kernel", "Exit status", "resolver"):
        assert needle in r.output


def test_control_ops_validate_fields(harpd):
    path, _ = harpd
    assert request(path, {"cmd": "resolve", "ip": 5}) == {
        "ok": False, "error": "bad request: resolve.ip: expected a string, got an integer"}
    assert request(path, {"cmd": "set", "ip": "192.0.2.9", "ula": None})["error"] == "bad request: set.ula: must not be null"
    assert request(path, {"cmd": "delete", "ip": "fe80::1%gsn0", "interface": "gsn1"})["error"] == \
        "fe80::1%gsn0 is scoped to gsn0, not gsn1"
    # found by ./gsn fuzz control (fuzz/crashes/control-2ad0681af840.bin): the scope was echoed raw
    assert request(path, {"cmd": "delete", "ip": "%\n", "interface": "gsn0"})["error"] == \
        "'%\\n' is scoped to '\\n', not gsn0"
    assert request(path, {"cmd": "neighbours", "interface": "gsn7"})["ok"] is False
    n = request(path, {"cmd": "neighbours", "interface": "gsn1"})
    assert n["ok"] and {r["ip"] for r in n["neighbours"]} == {"127.0.0.1", "127.0.0.9"}
    assert all(r["interface"] == "gsn1" and r["lis"] == "127.0.0.0/8" for r in n["neighbours"])
