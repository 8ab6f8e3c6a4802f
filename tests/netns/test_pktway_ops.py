"""pktwayd and pktway-san under operations: STATUS= for systemd, Prometheus metrics (half
state, RRP tables, drops with their reason), a reload by pid acknowledged in the log.
One router joining two emulated SANs, in a namespace of its own."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from lab.netns import BIN, Fabric, poll
from daemons.runtime.control import request

SCRAPE = ("import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("
          "'http://127.0.0.1:' + sys.argv[1] + '/metrics', timeout=10).read().decode())")


@pytest.fixture
def router(tmp_path):
    with Fabric(1, prefix="po") as fab:
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(str(fab.tmp / "notify"))
        notify.settimeout(10)
        ctl = fab.tmp / "router.sock"
        (fab.tmp / "router.toml").write_text(f"""
[router]
name = "po"
control = "{ctl}"

[[half]]
kind = "udp"
addr = 0x50
san_id = 0x100
switch = "127.0.0.1:7400"
local = "127.0.0.1:7401"
port = 1

[[half]]
kind = "udp"
addr = 0x51
san_id = 0x200
switch = "127.0.0.1:7500"
local = "127.0.0.1:7501"
port = 1
""")
        fab.spawn("sanA", 1, str(BIN / "pktway-san"), "--listen", "127.0.0.1:7400", "--port", "1=127.0.0.1:7401",
                  "--metrics", "127.0.0.1:9645")
        fab.spawn("sanB", 1, str(BIN / "pktway-san"), "--listen", "127.0.0.1:7500", "--port", "1=127.0.0.1:7501")
        os.environ["NOTIFY_SOCKET"] = str(fab.tmp / "notify")
        try:
            fab.spawn("pktwayd", 1, str(BIN / "pktwayd"), "-c", str(fab.tmp / "router.toml"),
                      "--metrics", "127.0.0.1:9644")
        finally:
            del os.environ["NOTIFY_SOCKET"]
        poll(lambda: ctl.exists(), 10, what="pktwayd control socket")
        poll(lambda: all(h["up"] and len(h["rts"]) == 2 for h in request(str(ctl), {"cmd": "routes"})["halves"]),
             10, what="both halves up")
        yield fab, notify, ctl
        notify.close()


def scrape(fab, port: int) -> dict[str, float]:
    r = fab.ns_exec(1, sys.executable, "-c", SCRAPE, str(port), check=False)
    assert r.returncode == 0, r.stderr
    return {k: float(v) for k, v in (line.rsplit(" ", 1) for line in r.stdout.splitlines()
                                     if line and not line.startswith("#"))}


def test_pktwayd_status_metrics_reload(router):
    fab, notify, ctl = router
    seen = []
    poll(lambda: seen.append(notify.recv(4096).decode()) or
         "STATUS=router po: 0x50 up (2 SANs routed), 0x51 up (2 SANs routed)" in seen, 15, what="pktwayd STATUS")
    assert seen[0] == "READY=1"

    m = scrape(fab, 9644)
    for half in ("0x50", "0x51"):
        labels = f'router="po",half="{half}"'
        assert m[f"gsn_pktway_half_up{{{labels}}}"] == 1 and m[f"gsn_pktway_rrp_tables{{{labels}}}"] == 2
        assert m[f"gsn_pktway_twin_alive{{{labels}}}"] == 1
    # garbage to the router's SAN port is dropped and counted with its reason
    fab.ns_exec(1, sys.executable, "-c", "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                "s.bind(('127.0.0.1', 0)); s.sendto(b'junk', ('127.0.0.1', 7401))")
    key = 'gsn_drops_total{router="po",half="0x50",component="san",reason="rx_foreign"}'
    poll(lambda: scrape(fab, 9644).get(key) == 1, 10, what="the foreign datagram counted")
    san = scrape(fab, 9645)
    assert san['gsn_san_ports{kind="datagram"}'] == 1 and san["gsn_metrics_scrapes_total"] == 1

    root = fab.tmp / "run"
    root.mkdir()
    (root / "pktwayd").symlink_to(fab.tmp)  # holds router.sock, as /run/pktwayd holds NAME.sock
    r = subprocess.run([str(BIN / "gsnctl"), "show", "--run-dir", str(root), "--interval", "0"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0 and r.stdout == ("pktwayd: router\n"
                                              "  half 0x50 on SAN 0x100: up   SANs routed 2   buddies 0\n"
                                              "  half 0x51 on SAN 0x200: up   SANs routed 2   buddies 0\n"), r.stdout

    pid = fab.procs["pktwayd"].pid
    r = subprocess.run([str(BIN / "gsnctl"), "reload", "--pid", str(pid)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    poll(lambda: any(json.loads(line).get("event") == "reload.done" for line in
                     fab.logs["pktwayd"].read_text().splitlines() if line.startswith("{")), 10,
         what="pktwayd reload.done")
