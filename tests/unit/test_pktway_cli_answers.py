"""pktway's router queries (find, route, hrto) turn an answer they cannot read into one
line and exit 1, never a traceback: a fake datagram SAN switch answers with RRP whose
records do not decode."""

import socket
import threading

import pytest
from click.testing import CliRunner

from pktwayd.cli import pktway_main
from pktwayd.constants import PT, RrpTE
from pktwayd.eep import Packet, decode
from pktwayd.udpsan import native, split

NODE = 0x40


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bad_router(sock: socket.socket, te: RrpTE) -> None:
    """Answer the node's first query with an RRP packet whose body is no records."""
    try:
        data, src = sock.recvfrom(65536)
    except OSError:
        return
    route, raw = split(data)
    asked = decode(raw)
    reply = Packet(dt=asked.sa, sa=0x99, pt=PT.RRP, te=te, data=b"\xff" * 8)
    sock.sendto(native(route[0]) + reply.encode(), src)


@pytest.mark.parametrize("args,te", [
    (["find", "--name", "x"], RrpTE.GVL2),
    (["route", "0x60"], RrpTE.GVL2),
    (["hrto", "0x60"], RrpTE.RDRC),
])
def test_an_unreadable_answer_is_one_line(args, te):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sw:
        sw.bind(("127.0.0.1", 0))
        sw.settimeout(10)
        t = threading.Thread(target=_bad_router, args=(sw, te), daemon=True)
        t.start()
        port = sw.getsockname()[1]
        r = CliRunner().invoke(pktway_main, [args[0], "--san", f"127.0.0.1:{port},127.0.0.1:{_free_port()},5", "--router", "1",
                                             "--addr", hex(NODE), *args[1:]])
        t.join(5)
    assert r.exit_code == 1, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "pktway:" in r.output and "Traceback" not in r.output
