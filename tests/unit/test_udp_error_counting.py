"""UDP errors are counted alike by every driver (daemons/runtime/oserrors.py
``count_udp_error``): a full buffer under one name, any other error by its errno name;
never raised."""

import errno
from collections import Counter

from daemons.runtime.oserrors import count_udp_error
from ib.udp import Udp
from pktwayd.udpsan import AsyncSanPort


def test_count_udp_error_names():
    c: Counter[str] = Counter()
    count_udp_error(c, BlockingIOError(errno.EAGAIN, "full"), 3)
    count_udp_error(c, ConnectionRefusedError(errno.ECONNREFUSED, "refused"))
    count_udp_error(c, OSError(errno.ECONNREFUSED, "refused"), prefix="rx_error_")
    count_udp_error(c, OSError(9999, "no name"), full="drop_full", prefix="send_error_")
    assert c == {"tx_dropped_socket_full": 3, "tx_error_ECONNREFUSED": 1, "rx_error_ECONNREFUSED": 1,
                 "send_error_9999": 1}


BROADCAST = ("255.255.255.255", 9)  # sendto without SO_BROADCAST: EACCES, every time


def test_ib_udp_counts_errors_and_a_missing_destination():
    u = Udp(("127.0.0.1", 0))
    try:
        u.send(b"x", BROADCAST)
        u.send(b"x")  # no peer and no destination: counted, not a TypeError
        assert u.counters == {"send_error_EACCES": 1, "drop_no_destination": 1}
    finally:
        u.close()


def test_san_port_counts_errors_by_errno():
    port = AsyncSanPort(BROADCAST, ("127.0.0.1", 0))
    try:
        port.send_nowait(b"\x01\x03\x00", b"payload")
        assert port.counters == {"tx_error_EACCES": 1}
    finally:
        port.sock.close()
