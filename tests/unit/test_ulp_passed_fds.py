"""A ULP client that passes file descriptors (SCM_RIGHTS) along with its frames: gsnd
must not take them (its control buffer holds the client's credentials only, so the
kernel closes them instead of installing them), in the data plane's C reader
(daemons/_ulploop.h) and in the Python reader alike; the frames are still served."""

from __future__ import annotations

import array
import os
import socket

import trio

from daemons.wire.ulp import Frame, Op
from tests.unit.dprig import ULAS
from tests.unit.test_ulp_dataplane import ET, attach, rig, run, server  # noqa: F401  (rig: the fixture)
from tests.unit.test_ulp_server import server as py_server

FDS = 50


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def send_with_fds(sock: socket.socket, frame: bytes) -> None:
    fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(FDS)]
    try:
        sock.sendmsg([frame], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    finally:
        for fd in fds:
            os.close(fd)


def test_c_takes_no_descriptor_a_client_passes(rig):  # noqa: F811
    srv = server(rig, 0)
    p = rig.pair()
    attach(srv, p)
    before = open_fds()
    for k in range(20):
        send_with_fds(p.app, Frame(Op.SEND, 1, ET, ULAS[1], b"with fds %d" % k).encode())
    send_with_fds(p.app, Frame(Op.UNBIND, ethertype=ET).encode())  # one handed up to Python too
    for _ in range(5):
        run(rig, 0, 0.02)
    assert open_fds() == before
    assert rig.dps[0].counters("ulp", srv.counters)["tx_direct"] == 20


async def test_python_takes_no_descriptor_a_client_passes(tmp_path):
    async with py_server(tmp_path) as srv:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sock.connect(srv.path)
        sock.setblocking(False)
        with trio.fail_after(5):
            while not srv.clients:  # accepted: its descriptor counted in before
                await trio.sleep(0.01)
        before = open_fds()
        for k in range(20):
            send_with_fds(sock, Frame(Op.SEND, 1, ET, ULAS[1], b"with fds %d" % k).encode())
        with trio.fail_after(5):
            while len(srv.sent) < 20:
                await trio.sleep(0.01)
        assert open_fds() == before
        sock.close()
