"""Prometheus metrics scraped from real daemons (a switch and two hosts in namespaces,
harpd and stpd on both): link state, per-VC credits, queues, Messages and bytes, drops
with their reason, HARP table sizes, ST transfers.  Scraped from inside each namespace."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lab.netns import BIN, Fabric, poll
from stpd.client import StClient

OPTIONS = "lis gsn0 192.0.2.0/24\nrole gsn0 auto\nserver gsn0 00:10:3b:ff:ff:e0\n"
SCRAPE = ("import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("
          "'http://127.0.0.1:' + sys.argv[1] + '/metrics', timeout=10).read().decode())")


def scrape(fab, i: int, port: int) -> dict[str, float]:
    """{'name{labels}': value} from the daemon listening on 127.0.0.1:port in namespace i."""
    r = fab.ns_exec(i, sys.executable, "-c", SCRAPE, str(port), check=False)
    assert r.returncode == 0, r.stderr
    out = {}
    for line in r.stdout.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


@pytest.fixture
def fab():
    with Fabric(2, broadcast=False, static={"00:10:3b:ff:ff:e0": 1}, prefix="m") as fab:
        fab._spawn("switch", fab.sw_ns, [str(BIN / "gsn-switch"), "-c", str(fab.switch_config()),
                                         "--metrics", "127.0.0.1:9641"])
        poll(lambda: (fab.tmp / "sw" / "control.sock").exists(), what="switch control socket")
        for i in (1, 2):
            fab.start_gsnd(i, "--metrics", "127.0.0.1:9640")
        ulas = [fab.wait_ula(i) for i in (1, 2)]
        for i in (1, 2):
            fab.ip_address(i, v6=None)
            fab.start_harpd(i, OPTIONS, "--timer-scale", "0.01", "--metrics", "127.0.0.1:9642")
        fab.apis = [fab.start_stpd(i, *[f"--peer=192.0.2.{k}={u}" for k, u in enumerate(ulas, 1)],
                                   "--metrics", "127.0.0.1:9643") for i in (1, 2)]
        yield fab


def test_scrape_every_daemon(fab, tmp_path):
    poll(lambda: fab.ns_exec(1, "ping", "-c", "1", "-W", "1", "192.0.2.2", check=False).returncode == 0, 20,
         what="ping through harpd")
    src, dst = fab.tmp / "blob", fab.tmp / "in"
    dst.mkdir()
    src.write_bytes(b"x" * (1 << 20))
    rx = subprocess.Popen([str(BIN / "stp"), "--socket", fab.apis[1], "recv", str(dst)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    poll(lambda: 5001 in StClient(fab.apis[1]).status()["listeners"], 10, what="stp recv listening")
    tx = subprocess.run([str(BIN / "stp"), "--socket", fab.apis[0], "send", str(src), "192.0.2.2"],
                        capture_output=True, text=True, timeout=120)
    assert tx.returncode == 0, tx.stderr
    rx.communicate(timeout=60)

    g = scrape(fab, 1, 9640)
    i = 'interface="gsn0"'
    assert g[f"gsn_link_up{{{i}}}"] == 1 and g[f"gsn_ula_assigned{{{i}}}"] == 1
    assert 0 <= g[f"gsn_link_last_heard_seconds{{{i}}}"] < 1
    assert g[f'gsn_vc_credits{{{i},vc="1"}}'] > 0 and f'gsn_vc_queued_micropackets{{{i},vc="3"}}' in g
    assert g[f'gsn_vc_messages_total{{{i},vc="1",direction="tx"}}'] >= 1  # the pings (IP on VC1)
    assert g[f'gsn_vc_bytes_total{{{i},vc="3",direction="tx"}}'] >= 1 << 20  # the ST data (default DATA VC 3)
    assert g[f'gsn_events_total{{{i},component="gsnd",name="tx_messages"}}'] >= 2
    assert g[f"gsn_ulp_clients{{{i}}}"] == 2  # harpd and stpd

    sw = scrape(fab, 0, 9641)
    assert sw['gsn_link_up{port="1"}'] == 1 and sw['gsn_link_up{port="2"}'] == 1 and sw["gsn_switch_ulas"] == 3
    assert sw['gsn_events_total{port="2",component="link",name="rx_mps"}'] > 0

    h = scrape(fab, 1, 9642)
    assert h['gsn_harp_table_entries{interface="gsn0",lis="192.0.2.0/24",table="server"}'] >= 2  # both registered

    s1, s2 = scrape(fab, 1, 9643), scrape(fab, 2, 9643)
    # stp sends the file's name and size, then the file: two transfers
    assert s1['gsn_st_transfers_total{direction="send",result="ok"}'] == 2
    assert s2['gsn_st_transfers_total{direction="receive",result="ok"}'] == 2
    assert s1["gsn_st_connections"] >= 0 and s1["gsn_metrics_scrapes_total"] == 1


def test_drops_carry_their_reason(fab):
    """A refused control request is a drop: it shows up with its reason at once."""
    from daemons.runtime.control import request

    key = 'gsn_drops_total{interface="gsn0",component="control",reason="bad_request"}'
    before = scrape(fab, 1, 9640).get(key, 0)
    assert request(str(fab.runtime(1) / "gsn0.ctl"), {"cmd": "status", "junk": 1})["ok"] is False
    assert scrape(fab, 1, 9640)[key] == before + 1
