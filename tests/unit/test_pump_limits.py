"""gsnd's compiled pumps (daemons/_pump.h) called from Python: they
must take any limit Python hands them as the Python path (io/udp.py drain) does."""

from __future__ import annotations

import socket

import pytest

from daemons import constants as C
from daemons.gsnd import dataplane  # noqa: F401  (setup_dp/setup_ulp: the event types)
from daemons.io.udp import UdpTransport
from daemons.link.clink import CLink


def _pair():
    rx, tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM), socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    tx.bind(("127.0.0.1", 0))
    rx.setblocking(False)
    return rx, tx


@pytest.mark.parametrize("limit", [2 ** 61, 2 ** 62, (1 << 63) - 1])
def test_rx_pump_with_a_large_limit_drains_like_the_python_path(limit):
    """rx_pump(now, limit) bounded its receives by ``4 * limit`` (a Py_ssize_t): a limit
    above PY_SSIZE_T_MAX / 4 overflowed (undefined; in practice it wrapped to 0 or below)
    and the pump read nothing while datagrams waited.  io/udp.py's drain(limit) takes them."""
    rx, tx = _pair()
    try:
        link = CLink(9, 0.0)
        link.dp_attach(-1, rx.fileno(), tx.getsockname(), 1500, True, b"", C.ULP_MAX_PAYLOAD)
        for i in range(3):
            tx.sendto(bytes([i]) * 10, rx.getsockname())
        assert link.rx_pump(0.0, limit) == 3
        assert link.dp_counters()["cable"]["rx_datagrams"] == 3
    finally:
        rx.close()
        tx.close()
    # the oracle: the Python path's drain with the same limit
    t = UdpTransport(("127.0.0.1", 0), None)
    try:
        for i in range(3):
            t.sock.sendto(bytes([i]) * 10, t.sock.getsockname())
        assert len(t.drain(limit)) == 3
    finally:
        t.sock.close()
