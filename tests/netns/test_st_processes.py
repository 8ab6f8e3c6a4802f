"""Scheduled Transfer with real processes: stpd on two hosts of a GSN fabric."""

import hashlib
import os
import signal
import struct
import subprocess
import threading

import pytest

from lab.netns import BIN, Fabric, poll
from stpd.client import StClient, StError


@pytest.fixture
def pair():
    with Fabric(2) as fab:
        fab.apis = fab.start_stpds(fab.up(v6=False))
        yield fab


def wait_listener(fab, port):
    poll(lambda: port in StClient(fab.apis[1]).status()["listeners"], 10, what=f"a listener on {port}")


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def test_stp_send_one_gib_sha256(pair):
    src, dst = pair.tmp / "big.bin", pair.tmp / "in"
    dst.mkdir()
    with open(src, "wb") as f:
        for _ in range(256):
            f.write(os.urandom(4 << 20))
    rx = subprocess.Popen([str(BIN / "stp"), "--socket", pair.apis[1], "recv", str(dst)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    wait_listener(pair, 5001)
    tx = subprocess.run([str(BIN / "stp"), "--socket", pair.apis[0], "send", str(src), "192.0.2.2"],
                        capture_output=True, text=True, timeout=300)
    assert tx.returncode == 0, tx.stderr
    out, err = rx.communicate(timeout=60)
    assert rx.returncode == 0, err
    assert "sent 1073741824 bytes" in tx.stdout and "received big.bin (1073741824 bytes)" in out
    assert sha(src) == sha(dst / "big.bin")


def test_four_concurrent_transfers_on_vc1_to_vc3(pair):
    size = 16 << 20
    blobs = [os.urandom(size) for _ in range(4)]
    files = []
    for k, blob in enumerate(blobs):
        p = pair.tmp / f"s{k}"
        p.write_bytes(blob)
        files.append(p)
    got, errors = {}, []

    def receiver(k):
        try:
            with StClient(pair.apis[1]) as st:
                vc, _ = st.accept(6000 + k)
                with open(pair.tmp / f"r{k}", "w+b") as f:
                    got[k] = st.recv(vc, f, size)
        except Exception as exc:  # reported below
            errors.append(exc)

    def sender(k, dc):
        try:
            with StClient(pair.apis[0]) as st:
                vc = poll(lambda: _try_connect(st, 6000 + k), 10, what="listener")
                with open(files[k], "rb") as f:
                    st.send(vc, f, dc=dc)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=receiver, args=(k,)) for k in range(4)]
    threads += [threading.Thread(target=sender, args=(k, dc)) for k, dc in enumerate((1, 2, 3, 3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert got == {k: size for k in range(4)}
    for k, blob in enumerate(blobs):
        assert (pair.tmp / f"r{k}").read_bytes() == blob
    st = StClient(pair.apis[0]).status()
    assert st["counters"]["tx_DATA"] >= 4 * 16


def _try_connect(st, port):
    try:
        return st.connect("192.0.2.2", port)
    except StError:
        return None


def test_fetchop_four_clients_one_counter(pair):
    fd = os.memfd_create("counter")
    os.ftruncate(fd, 4096)
    n_clients, n_ops = 4, 10_000
    ready = threading.Barrier(n_clients + 1)
    errors, values = [], []

    def exposer():
        with StClient(pair.apis[1]) as st:
            for _ in range(n_clients):
                vc, _ = st.accept(7000)
                st.expose(vc, fd, 4096)
            ready.wait(60)
            done.wait(600)

    def client(k):
        try:
            with StClient(pair.apis[0]) as st:
                vc = poll(lambda: _try_connect(st, 7000), 10, what="listener")
                ready.wait(60)
                rid = st.region(vc, 4096)["rid"]
                mine = [st.fetchop(vc, rid, 64, "inc") for _ in range(n_ops)]
                values.extend(mine)
        except Exception as exc:
            errors.append(exc)

    done = threading.Event()
    ex = threading.Thread(target=exposer)
    ex.start()
    workers = [threading.Thread(target=client, args=(k,)) for k in range(n_clients)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(900)
    done.set()
    ex.join(10)
    assert not errors, errors
    # a client has its value when the DATA arrives; the responder applies the
    # increment when the FOC reaches it, so the last one may still be on its way
    word = lambda: struct.unpack(">Q", os.pread(fd, 8, 64))[0]  # noqa: E731
    poll(lambda: word() == 40_000, 5, what="the last FOC to be applied")
    assert word() == n_clients * n_ops == 40_000
    assert sorted(values) == list(range(40_000))  # atomic: every fetched value is distinct


def test_peer_vanishes_mid_transfer_error_to_application(pair):
    src = pair.tmp / "mid.bin"
    with open(src, "wb") as f:
        for _ in range(64):
            f.write(os.urandom(4 << 20))
    (pair.tmp / "in2").mkdir()
    rx = subprocess.Popen([str(BIN / "stp"), "--socket", pair.apis[1], "recv", str(pair.tmp / "in2")],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_listener(pair, 5001)
    tx = subprocess.Popen([str(BIN / "stp"), "--socket", pair.apis[0], "send", str(src), "192.0.2.2"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    poll(lambda: StClient(pair.apis[0]).status()["counters"].get("tx_DATA", 0) > 2, 20, what="data flowing")
    pair.kill("stpd2", signal.SIGKILL)
    out, err = tx.communicate(timeout=60)
    rx.kill()
    assert tx.returncode == 1 and "transfer failed" in err
    st = StClient(pair.apis[0]).status()
    assert all(v["sending"] == 0 for v in st["vcs"])


def test_stp_read_serve_abort_release(pair):
    """RTR reads between real stpd processes (`stp serve` / `stp read`), then END from
    the CLI: `stp abort` on a waiting write, `stp release` on a region."""
    src, out = pair.tmp / "served.bin", pair.tmp / "read-in"
    out.mkdir()
    with open(src, "wb") as f:
        f.write(os.urandom(16 << 20))
    server = subprocess.Popen([str(BIN / "stp"), "--socket", pair.apis[1], "serve", str(src)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_listener(pair, 5002)
    r = subprocess.run([str(BIN / "stp"), "--socket", pair.apis[0], "read", "192.0.2.2", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    sout, serr = server.communicate(timeout=30)
    assert server.returncode == 0, serr
    assert sha(src) == sha(out / "served.bin")

    fd = os.memfd_create("region")
    os.ftruncate(fd, 4096)
    with StClient(pair.apis[1]) as b, StClient(pair.apis[0]) as a:
        b.listen(8000)
        vc = a.connect("192.0.2.2", 8000)
        bvc = poll(lambda: [v["vc"] for v in b.status()["vcs"] if v["uport"] == 8000], 10, what="accepted")[0]
        b.expose(bvc, fd, 4096)
        rid = a.region(vc, 4096)["rid"]
        a.put(vc, rid, 0, b"hello")
        assert os.pread(fd, 5, 0) == b"hello"
        r = subprocess.run([str(BIN / "stp"), "--socket", pair.apis[0], "release", str(vc), str(rid)],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        with pytest.raises(StError, match="unknown region"):
            a.put(vc, rid, 0, b"x")
        poll(lambda: b.status()["vcs"][0]["regions"] == 0, 10, what="END at the peer")

        errors = []

        def waiting_send():  # only a, the connection's owner, may send on it
            try:
                a.send_bytes(vc, b"nobody receives this")
            except StError as exc:
                errors.append(str(exc))

        t = threading.Thread(target=waiting_send)
        t.start()
        xid = poll(lambda: [x["xid"] for v in StClient(pair.apis[0]).status()["vcs"] for x in v["transfers"]], 10,
                   what="a transfer")[0]  # root's status: every client's
        r = subprocess.run([str(BIN / "stp"), "--socket", pair.apis[0], "abort", str(vc), str(xid)],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        t.join(30)
        assert errors and "ended locally" in errors[0]
    os.close(fd)
