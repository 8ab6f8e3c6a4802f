"""Issue 10 item 1 against real processes: the captured 72-byte datagram (reserved
TYPE, valid LCRC), sent from the configured peer's own address, must leave gsnd and
gsn-switch running, with the drop counted."""

import sys

from lab.netns import Fabric, poll
from tests.unit.test_packet_of_death import DEATH

SEND = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.sendto(bytes.fromhex(sys.argv[3]), (sys.argv[4], int(sys.argv[5])))
"""


def spoof(fab, ns_index, src, dst):
    """Send DEATH from ``src`` (the configured peer's address, which we own) to ``dst``."""
    fab.ns_exec(ns_index, sys.executable, "-c", SEND, *src, DEATH.hex(), *dst)


def count(status, path):
    for key in path:
        if not status:
            return 0
        status = status.get(key)
    return status or 0


def test_gsnd_and_switch_survive_the_packet_of_death():
    # unkeyed cables: on a keyed one the datagram never reaches the link decoder
    # (rx_auth_unauthenticated; tests/netns/test_cable_auth.py)
    with Fabric(1, prefix="pd", keys=False) as fab:
        # gsnd of host 1 alone: its configured peer 198.18.1.1:7000 is ours to bind.
        fab.start_gsnd(1)
        poll(lambda: fab.gsnd_status(1), what="gsnd1 control socket")

        def gsnd_counted():
            assert fab.procs["gsnd1"].poll() is None, "gsnd died: " + fab.logs["gsnd1"].read_text()[-2000:]
            spoof(fab, 0, ("198.18.1.1", "7000"), ("198.18.1.2", "6400"))
            return count(fab.gsnd_status(1), ("link", "counters", "bad_control_TYPE"))

        poll(gsnd_counted, what="gsnd counting the reserved TYPE")
        assert fab.procs["gsnd1"].poll() is None, "gsnd died"

        # The switch alone: its port 1 peer 198.18.1.2:6400 (gsnd's address) is now ours.
        fab.kill("gsnd1")
        fab.start_switch()

        def switch_counted():
            assert fab.procs["switch"].poll() is None, "gsn-switch died: " + fab.logs["switch"].read_text()[-2000:]
            spoof(fab, 1, ("198.18.1.2", "6400"), ("198.18.1.1", "7000"))
            return count(fab.switch_status(), ("ports", "1", "link", "counters", "bad_control_TYPE"))

        poll(switch_counted, what="gsn-switch counting the reserved TYPE")
        assert fab.procs["switch"].poll() is None, "gsn-switch died"

        # Both still do their job: gsnd comes back, the link comes up, a ULA is assigned.
        fab.start_gsnd(1)
        assert fab.wait_ula(1) == "02:47:53:01:01:00"
        assert fab.procs["switch"].poll() is None
