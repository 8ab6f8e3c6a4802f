"""A ULP client that closes with frames from gsnd still unread: Linux reports that to
gsnd's end once (ECONNRESET on the next read), before the frames the client sent and
its end.  Those frames are read and answered, in the data plane's C reader
(daemons/_ulploop.h) and in the Python reader (daemons/io/ulp.py) alike."""

from __future__ import annotations

import socket

import trio

from daemons.gsnd.dataplane import UlpClosed
from daemons.wire.ulp import Frame, Op
from tests.unit.dprig import ULAS
from tests.unit.test_ulp_dataplane import ET, attach, rig, run, server  # noqa: F401  (rig: the fixture)
from tests.unit.test_ulp_server import server as py_server


def test_c_reads_the_sends_of_a_client_that_closed_with_recvs_unread(rig):  # noqa: F811
    srv = server(rig, 0)
    p = rig.pair()
    attach(srv, p)
    p.gsnd.send(Frame(Op.RECV, 1, ET, ULAS[1], b"never read").encode())
    for k in range(3):
        p.app.send(Frame(Op.SEND, 1, ET, ULAS[1], b"sent before closing %d" % k).encode())
    p.app.close()  # with the RECV unread: gsnd's end gets ECONNRESET first
    events = []
    for _ in range(5):
        events += run(rig, 0, 0.02)[1]
        if any(isinstance(e, UlpClosed) for e in events):
            break
    assert [type(e) for e in events] == [UlpClosed]
    assert rig.dps[0].counters("ulp", srv.counters) == {"tx_messages": 3, "tx_direct": 3}


async def test_python_reads_the_sends_of_a_client_that_closed_with_recvs_unread(tmp_path):
    async with py_server(tmp_path) as srv:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sock.setblocking(False)
        sock.connect(srv.path)
        sock.send(Frame(Op.BIND, ethertype=ET).encode())
        with trio.fail_after(5):
            while True:  # the STATUS answer waits, unread, in the client's socket
                try:
                    sock.recv(1, socket.MSG_PEEK)
                    break
                except BlockingIOError:
                    await trio.sleep(0.005)
        for k in range(3):  # no checkpoint between these and the close: the server reads after it
            sock.send(Frame(Op.SEND, 1, ET, ULAS[1], b"sent before closing %d" % k).encode())
        sock.close()
        with trio.fail_after(5):
            while srv.clients:
                await trio.sleep(0.01)
        assert len(srv.sent) == 3 and srv.counters["tx_messages"] == 3
