"""stpd end to end through its API (two real daemons joined back to back, real API
sockets, StClient): truncated files never kill stpd, exposed memory does not leak
descriptors, and the read/serve, abort and release operations."""

import itertools
import os
import threading
import time

import pytest

from stpd.client import StClient, StError
from stpd.core import Timers
from tests.sim.stpd_pair import PairThread


@pytest.fixture
def pair(tmp_path):
    with PairThread(tmp_path) as p:
        with StClient(p.paths[1]) as lb:  # B listens on 9 while the test runs
            lb.listen(9)
            yield p


PORTS = itertools.count(100)


def connected(p):
    """(a, vc on A, b, vc on B): a fresh connection A -> B, each end its client's own."""
    a, b = StClient(p.paths[0]), StClient(p.paths[1])
    port = next(PORTS)
    b.listen(port)
    vc = a.connect("192.0.2.2", port)
    bvc, _ = b.accept(port)
    return a, vc, b, bvc


def in_thread(fn, *args):
    box = {}

    def run():
        try:
            box["value"] = fn(*args)
        except Exception as exc:  # checked by the caller
            box["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    return t, box


def memfd(data: bytes):
    fd = os.memfd_create("t")
    os.write(fd, data)
    return os.fdopen(fd, "r+b")


def test_send_of_a_memfd_truncated_before_the_transfer_is_refused(pair):
    a, vc, b, bvc = connected(pair)
    f = memfd(b"x" * 4096)
    os.ftruncate(f.fileno(), 100)
    with pytest.raises(StError, match="the file has 100 bytes, fewer than length 4096"):
        a.send(vc, f, 4096)
    assert a.status()["vcs"]


def test_send_of_a_memfd_truncated_during_the_transfer_fails_that_transfer_only(pair):
    """The old stpd mapped the file: the next access after ftruncate was SIGBUS."""
    a, vc, b, bvc = connected(pair)
    f = memfd(os.urandom(1 << 20))
    t, box = in_thread(a.send, vc, f, 1 << 20)  # RTS: B has no receive posted, the write waits
    time.sleep(0.3)
    os.ftruncate(f.fileno(), 0)
    sink = memfd(b"")
    with pytest.raises(StError, match="transfer failed"):
        b.recv(bvc, sink, 1 << 20)
    t.join(10)
    assert "source file truncated" in str(box["error"]) and "\n" not in str(box["error"])
    # the connection and both daemons carry on
    t, box = in_thread(a.send_bytes, vc, b"still here")
    assert b.recv_bytes(bvc) == b"still here"
    t.join(10)
    assert pair.inside(lambda ds: ds[0].core.counters["tx_buffer_gone"]) == 1


def test_exposed_memfd_truncated_then_the_peer_gets_puts_and_fetchops(pair):
    a, vc, b, bvc = connected(pair)
    f = memfd(bytes(4096))
    b.expose(bvc, f.fileno(), 4096)
    rid = a.region(vc, 4096)["rid"]
    a.put(vc, rid, 0, b"abcd")
    assert a.get(vc, rid, 0, 4) == b"abcd" and os.pread(f.fileno(), 4, 0) == b"abcd"
    os.ftruncate(f.fileno(), 0)
    for op in (lambda: a.get(vc, rid, 0, 4), lambda: a.put(vc, rid, 0, b"x"), lambda: a.fetchop(vc, rid, 8)):
        with pytest.raises(StError, match="out_of_bounds"):
            op()
    os.ftruncate(f.fileno(), 4096)  # grown again: usable again
    assert a.fetchop(vc, rid, 8) == 0 and a.fetchop(vc, rid, 8) == 1
    assert a.status()["vcs"] and b.status()["vcs"]


def test_recv_into_a_file_truncated_during_the_transfer(pair):
    a, vc, b, bvc = connected(pair)
    dst = memfd(b"")
    t, box = in_thread(b.recv, bvc, dst, 8 << 20)
    time.sleep(0.2)
    src = memfd(os.urandom(8 << 20))

    def shrink():
        while pair.inside(lambda ds: ds[1].core.counters["rx_DATA"]) < 2:
            time.sleep(0.001)
        os.ftruncate(dst.fileno(), 0)

    s = threading.Thread(target=shrink)
    s.start()
    with pytest.raises(StError, match="transfer failed"):
        a.send(vc, src, 8 << 20)
    s.join(10)
    t.join(10)
    assert "transfer failed" in str(box.get("error")), box


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_two_thousand_exposed_memfds_do_not_leak_descriptors(pair):
    """The old stpd kept every exposed memfd mapped (and so open) for ever: EMFILE after ~1,011."""
    a, vc, b, bvc = connected(pair)
    before = fd_count()
    peak = 0
    for i in range(2000):
        fd = os.memfd_create(f"r{i}")
        os.ftruncate(fd, 64)
        b.expose(bvc, fd, 64)
        os.close(fd)
        rid = a.region(vc, 64)["rid"]
        a.put(vc, rid, 0, b"z")
        a.release(vc, rid)
        peak = max(peak, fd_count() - before)
    assert peak <= 256 + 2  # bounded by MAX_SHARED_OBJECTS while releases are swept
    time.sleep(1.5)  # the once-a-second sweep
    assert fd_count() <= before + 1
    assert pair.inside(lambda ds: len(ds[1].shared)) == 0
    a.close(vc)


def test_closing_the_connection_closes_exposed_descriptors(pair):
    a, vc, b, bvc = connected(pair)
    before = fd_count()
    for i in range(16):
        fd = os.memfd_create(f"e{i}")
        os.ftruncate(fd, 64)
        b.expose(bvc, fd, 64)
        os.close(fd)
    fd = os.memfd_create("one too many")
    os.ftruncate(fd, 64)
    with pytest.raises(StError, match="16 exposures already wait"):
        b.expose(bvc, fd, 64)
    os.close(fd)
    assert fd_count() == before + 16
    a.close(vc)
    time.sleep(0.3)
    assert fd_count() <= before


def test_read_served_inline_and_from_a_file(pair):
    a, vc, b, bvc = connected(pair)
    t, box = in_thread(b.serve_bytes, bvc, b"answer to an RTR")
    assert a.read_bytes(vc, 100) == b"answer to an RTR"
    t.join(10)
    assert box["value"] == 16
    data = os.urandom(3 << 20)
    src, dst = memfd(data), memfd(b"")
    t, box = in_thread(b.serve, bvc, src)
    assert a.read(vc, dst, len(data)) == len(data)
    t.join(10)
    assert os.pread(dst.fileno(), len(data) + 1, 0) == data
    # a reader asking for less gets what it asked for
    t, box = in_thread(b.serve_bytes, bvc, b"0123456789")
    assert a.read_bytes(vc, 4) == b"0123"
    t.join(10)
    assert box["value"] == 4


def test_abort_ends_a_running_transfer_at_both_ends(pair):
    a, vc, b, bvc = connected(pair)
    t, box = in_thread(a.send_bytes, vc, b"never received")  # waits: B posts no receive
    with StClient(pair.paths[0]) as other:
        poll = time.monotonic() + 5
        while not (xfers := [x for v in other.status()["vcs"] for x in v["transfers"]]) and time.monotonic() < poll:
            time.sleep(0.02)
        assert xfers and xfers[0]["dir"] == "tx"
        other.abort(vc, xfers[0]["xid"])
        with pytest.raises(StError, match="no transfer"):
            other.abort(vc, xfers[0]["xid"])
        t.join(10)
        assert "ended locally" in str(box["error"])
        assert other.status()["vcs"][0]["state"] == "connected"
    assert pair.inside(lambda ds: ds[1].core.counters["rx_END"]) == 1


def test_release_gives_the_region_back(pair):
    a, vc, b, bvc = connected(pair)
    f = memfd(bytes(128))
    b.expose(bvc, f.fileno(), 128)
    rid = a.region(vc, 128)["rid"]
    assert a.status()["vcs"][0]["region_ids"] == [rid]
    a.release(vc, rid)
    with pytest.raises(StError, match="unknown region"):
        a.put(vc, rid, 0, b"x")
    with pytest.raises(StError, match=f"no region {rid}"):
        a.release(vc, rid)
    time.sleep(0.2)
    assert b.status()["vcs"][0]["regions"] == 0  # END reached B


def stp(p, i, *args, timeout=60):
    import subprocess
    import sys
    from pathlib import Path

    return subprocess.run([str(Path(sys.executable).parent / "stp"), "--socket", p.paths[i], *args],
                          capture_output=True, text=True, timeout=timeout)


def test_cli_serve_and_read_a_file(pair, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    src = tmp_path / "served.bin"
    data = os.urandom((2 << 20) + 123)
    src.write_bytes(data)
    out = tmp_path / "out"
    out.mkdir()
    server = subprocess.Popen([str(Path(sys.executable).parent / "stp"), "--socket", pair.paths[1], "serve",
                               str(src)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 10
    while 5002 not in StClient(pair.paths[1]).status()["listeners"] and time.monotonic() < end:
        time.sleep(0.05)
    r = stp(pair, 0, "read", "192.0.2.2", str(out))
    assert r.returncode == 0, r.stderr
    assert f"read served.bin ({len(data)} bytes)" in r.stdout
    assert (out / "served.bin").read_bytes() == data
    sout, serr = server.communicate(timeout=20)
    assert server.returncode == 0 and f"served served.bin ({len(data)} bytes)" in sout, serr


@pytest.fixture
def patient_pair(tmp_path):
    """A pair whose transfers wait 60 s for a silent peer: a test that drives a waiting
    transfer through several `stp` processes (about 1 s each on a loaded machine) must
    not see it time out first."""
    with PairThread(tmp_path, timers=Timers(tx=60.0, rx=60.0)) as p:
        yield p


def test_cli_abort_and_release(patient_pair):
    import json

    pair = patient_pair

    a, vc, b, bvc = connected(pair)
    t, box = in_thread(a.send_bytes, vc, b"waits for a receive")
    end = time.monotonic() + 5
    while not (xfers := json.loads(stp(pair, 0, "status", "--json").stdout)["vcs"][0]["transfers"]):
        assert time.monotonic() < end
        time.sleep(0.05)
    assert f"vc {vc} transfer {xfers[0]['xid']} tx" in stp(pair, 0, "status").stdout
    r = stp(pair, 0, "abort", str(vc), str(xfers[0]["xid"]))
    assert r.returncode == 0 and "ended transfer" in r.stdout, r.stderr
    t.join(10)
    assert "ended locally" in str(box["error"])
    r = stp(pair, 0, "abort", str(vc), str(xfers[0]["xid"]))
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0 and "no transfer" in r.stderr
    f = memfd(bytes(64))
    b.expose(bvc, f.fileno(), 64)
    rid = a.region(vc, 64)["rid"]
    r = stp(pair, 0, "release", str(vc), str(rid))
    assert r.returncode == 0 and f"released region {rid}" in r.stdout, r.stderr
    with pytest.raises(StError, match="unknown region"):
        a.get(vc, rid, 0, 8)
    r = stp(pair, 0, "release", str(vc), str(rid))
    assert r.returncode == 1 and "no region" in r.stderr
    assert stp(pair, 0, "abort", "0", "1").returncode == 2  # usage: ids start at 1
    for cmd in ("read", "serve", "abort", "release"):
        h = stp(pair, 0, cmd, "--help")
        assert h.returncode == 0 and "Usage: stp " + cmd in h.stdout


def test_a_client_hanging_up_mid_request_withdraws_it_and_orphans_its_connections(pair):
    """The request is cancelled (receive unposted, descriptor closed) and the port
    withdrawn; the connection stays up (its peer may still use what was exposed on it)
    but belongs to nobody: no other client may use it, root may close it."""
    import json
    import socket

    a, vc, b, bvc = connected(pair)
    port = pair.inside(lambda ds: ds[1].core.vcs[bvc].uport)
    before = fd_count()
    f = memfd(b"")
    socket.send_fds(b.sock, [json.dumps({"op": "recv", "vc": bvc, "max": 1 << 20}).encode()], [f.fileno()])
    time.sleep(0.3)
    assert pair.inside(lambda ds: len(ds[1].core.vcs[bvc].posted)) == 1
    b.sock.close()
    f.close()
    time.sleep(0.3)
    assert pair.inside(lambda ds: len(ds[1].core.vcs[bvc].posted)) == 0
    assert pair.inside(lambda ds: port in ds[1].core.listeners) is False
    assert pair.inside(lambda ds: ds[1].owner[bvc]) is None
    assert fd_count() <= before  # stpd closed its copy of the descriptor
    api = pair.inside(lambda ds: dict(ds[1].api_counters))
    assert api["cancelled_client_gone"] == 1 and api["orphaned_client_gone"] == 1
    with pytest.raises(StError, match=r"refused \(NO_LISTENER\)"):
        a.connect("192.0.2.2", port)


def test_listeners_and_connections_are_bounded(pair, monkeypatch):
    from stpd import constants as K

    monkeypatch.setattr(K, "MAX_LISTENERS", 3)
    monkeypatch.setattr(K, "MAX_CONNECT_VCS", 2)
    with StClient(pair.paths[0]) as a:
        a.listen(1)
        a.listen(2)
        a.listen(3)
        with pytest.raises(StError, match="3 ports are listened on already"):
            a.listen(4)
        a.listen(3)  # already listened: fine
        a.connect("192.0.2.2", 9)
        a.connect("192.0.2.2", 9)
        with pytest.raises(StError, match="2 connections exist already"):
            a.connect("192.0.2.2", 9)
        api = a.status()["api"]
    assert api["refused_listeners"] == 1 and api["refused_connect_vcs"] == 1


# --- local clients are isolated (issue 12, item 4) ---------------------------------------------
def _attempts(vc: int, rid: int, xid: int, port: int) -> list[tuple[dict, bool]]:
    """Every request that names another client's connection or port: (request, needs a descriptor)."""
    b64 = "eHg="
    return [({"op": "send", "vc": vc, "data": b64}, False), ({"op": "send", "vc": vc, "length": 2}, True),
            ({"op": "recv", "vc": vc, "max": 100}, False), ({"op": "recv", "vc": vc, "max": 100}, True),
            ({"op": "read", "vc": vc, "length": 100}, False), ({"op": "serve", "vc": vc, "data": b64}, False),
            ({"op": "abort", "vc": vc, "xid": xid}, False), ({"op": "expose", "vc": vc, "size": 64}, True),
            ({"op": "region", "vc": vc, "size": 64}, False),
            ({"op": "put", "vc": vc, "rid": rid, "offset": 0, "data": b64}, False),
            ({"op": "get", "vc": vc, "rid": rid, "offset": 0, "length": 2}, False),
            ({"op": "fetchop", "vc": vc, "rid": rid, "offset": 0}, False),
            ({"op": "release", "vc": vc, "rid": rid}, False), ({"op": "status", "vc": vc}, False),
            ({"op": "close", "vc": vc}, False),
            ({"op": "listen", "uport": port}, False), ({"op": "accept", "uport": port}, False)]


def _try_all(path: str, attempts) -> list[str]:
    """Each attempt from one new API client: its errors (or "ok")."""
    out = []
    with StClient(path) as c:
        c.sock.settimeout(10)
        for msg, with_fd in attempts:
            fd = os.memfd_create("x")
            os.ftruncate(fd, 64)
            try:
                c.call(msg, [fd] if with_fd else [])
                out.append("ok")
            except StError as exc:
                out.append(str(exc))
            finally:
                os.close(fd)
    return out


def _live(p, a, vc, b, bvc):
    """A's and B's ends still work: data from A reaches B, a PUT lands in B's memory."""
    t, box = in_thread(a.send_bytes, vc, b"still private")
    assert b.recv_bytes(bvc) == b"still private"
    t.join(10)
    assert box["value"] == 13


@pytest.fixture
def shared_pair():
    """A pair whose API sockets a member of their group (uid 65534) can reach."""
    from tests.asuser import shared_dir, to_group

    with shared_dir() as d, PairThread(d) as p:
        for path in p.paths:
            to_group(path)
        yield p


def test_another_client_can_neither_use_nor_take_a_connection_or_port(shared_pair):
    """Issue 12: client B read the data of client A's connection, closed it and took an
    incoming connection meant for A.  Now every request naming another client's
    connection (its transfers, regions) or listened port is refused, one line,
    counted; a member of the group (uid 65534) sees only its own objects in status."""
    from click.testing import CliRunner

    from stpd.cli import stp_main
    from tests.asuser import as_user

    p = shared_pair
    a, vc, b, bvc = connected(p)
    port = next(PORTS)
    b.listen(port)
    f = memfd(bytes(64))
    b.expose(bvc, f.fileno(), 64)
    rid = a.region(vc, 64)["rid"]
    t, box = in_thread(a.send_bytes, vc, b"x" * 10)  # waits: a transfer of A's for someone to abort
    end = time.monotonic() + 5
    while not (xids := [x["xid"] for v in StClient(p.paths[0]).status()["vcs"] if v["vc"] == vc
                        for x in v["transfers"]]):
        assert time.monotonic() < end
        time.sleep(0.02)
    assert b.recv_bytes(bvc) == b"x" * 10
    t.join(10)

    # uid 65534, a member of the socket's group: nothing at all
    for i, (target, theirs) in enumerate([(p.paths[0], vc), (p.paths[1], bvc)]):
        attempts = _attempts(theirs, rid, xids[0], port)[:None if i else -2]  # B's port is on B's stpd
        got = as_user(lambda: _try_all(target, attempts))
        want = [f"{m['op']}: connection {theirs} belongs to another client" for m, _ in attempts[:15]]
        if i:
            want += [f"listen: port {port} belongs to another client", f"accept: port {port} belongs to another client"]
        assert got == want
        st = as_user(lambda: StClient(target).status())
        assert (st["vcs"], st["listeners"], st["scope"]) == ([], [], "own")
        out = as_user(lambda: CliRunner().invoke(stp_main, ["--socket", target, "status"]).output)
        assert "(this client's connections only: every client's are shown to root)" in out
    api = p.inside(lambda ds: [dict(d.api_counters) for d in ds])
    assert api[0]["refused_not_owner"] == 15 and api[1]["refused_not_owner"] == 17
    # root, not the owner: sees all, may end things (stp abort/release/close), never use or take them
    st = StClient(p.paths[1]).status()
    assert st["scope"] == "all" and bvc in [v["vc"] for v in st["vcs"]] and port in st["listeners"]
    data_ops = [(m, fd) for m, fd in _attempts(bvc, rid, 1, port) if m["op"] not in ("abort", "release", "status",
                                                                                      "close")]
    got = _try_all(p.paths[1], data_ops)
    assert got == [f"{m['op']}: connection {bvc} belongs to another client" for m, _ in data_ops[:-2]] + [
        f"listen: port {port} belongs to another client", f"accept: port {port} belongs to another client"]
    # the owners' connection is untouched, the data went nowhere else
    _live(p, a, vc, b, bvc)
    a.put(vc, rid, 0, b"ok")
    assert os.pread(f.fileno(), 2, 0) == b"ok"
    # an incoming connection goes to the client listening on its port, and only to it
    vc2 = a.connect("192.0.2.2", port)
    got = _try_all(p.paths[1], [({"op": "accept", "uport": port}, False)])
    assert got == [f"accept: port {port} belongs to another client"]
    bvc2, _ = b.accept(port)
    t, box = in_thread(a.send_bytes, vc2, b"to the listener")
    assert b.recv_bytes(bvc2) == b"to the listener"
    t.join(10)
    # root may close another client's connection (administration); the owner sees it go
    with StClient(p.paths[1]) as root:
        root.close(bvc2)
    time.sleep(0.3)
    with pytest.raises(StError, match=f"no connection {bvc2}"):
        b.recv_bytes(bvc2)
