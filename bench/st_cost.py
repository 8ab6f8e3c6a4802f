#!/usr/bin/env python3
"""stpd's own CPU per GiB of ST, sending and receiving, with nothing else on the path.

    .venv/bin/python bench/st_cost.py [--size-mib 512] [--dir /dev/shm] [--runs 3]

No namespaces, no root: two real stpd processes, each on the ULP socket of a stand-in
gsnd in this process that forwards every SEND of one to the other as a RECV (one
recv_into and one sendmsg per Message, no link, no switch), then `stp send` of a
--size-mib file on VC3 into `stp recv`, as bench/st.py does.  Prints each stpd's user +
system CPU seconds (/proc/PID/stat) per GiB moved: the cost bench/st.py's stpd1/stpd2
columns show, without gsnd's and the switch's share of the machine.  Files live under
--dir (tmpfs by default: the receiver's writes into fresh tmpfs pages are part of its
cost, as they are in bench/st.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from daemons.constants import ULP_CLIENT_SOCKET_BYTES, ULP_MAX_PAYLOAD  # noqa: E402
from daemons.wire.ulp import HEADER, Frame, Op  # noqa: E402
from lab.cpu import cpu_seconds  # noqa: E402
from stpd.client import StClient  # noqa: E402

BIN = Path(sys.executable).parent
ULAS = [bytes([2, 0, 0, 0, 0, 1]), bytes([2, 0, 0, 0, 0, 2])]


class Relay:
    """The stand-in gsnds: accepts one stpd on each path, answers BIND with STATUS
    (link up, that stpd's ULA) and forwards SENDs to the other stpd as RECVs."""

    def __init__(self, tmp: Path) -> None:
        self.paths = [str(tmp / f"gsnd{i}.ulp") for i in range(2)]
        self.lsocks = []
        for path in self.paths:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            s.bind(path)
            s.listen(1)
            self.lsocks.append(s)
        self.conns: list[socket.socket | None] = [None, None]
        self.both = threading.Barrier(2)

    def serve(self, i: int) -> None:
        conn, _ = self.lsocks[i].accept()
        for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            conn.setsockopt(socket.SOL_SOCKET, opt, ULP_CLIENT_SOCKET_BYTES)
        self.conns[i] = conn
        buf = bytearray(ULP_MAX_PAYLOAD + HEADER.size + 1)
        view = memoryview(buf)
        while True:
            try:
                n = conn.recv_into(buf)
            except OSError:
                return
            if n < HEADER.size:
                return
            op, vc, ethertype, _ula = HEADER.unpack_from(buf)
            if op == Op.BIND:
                conn.send(Frame(Op.STATUS, 1, ula=ULAS[i]).encode())
                self.both.wait()
            elif op == Op.SEND:
                peer = self.conns[1 - i]
                assert peer is not None
                try:
                    peer.sendmsg([HEADER.pack(Op.RECV, vc, ethertype, ULAS[i]), view[HEADER.size : n]])
                except OSError:
                    return


def one_run(size_mib: int, where: str) -> tuple[float, float, float]:
    """(sender s/GiB, receiver s/GiB, Gbit/s) of one transfer."""
    tmp = Path(tempfile.mkdtemp(prefix="gsn-stcost-", dir=where))
    procs: list[subprocess.Popen] = []
    relay = Relay(tmp)
    try:
        for i in range(2):
            threading.Thread(target=relay.serve, args=(i,), daemon=True).start()
        apis = [str(tmp / f"api{i}.sock") for i in range(2)]
        for i in range(2):
            procs.append(subprocess.Popen(
                [str(BIN / "stpd"), "--ulp", relay.paths[i], "--api", apis[i], "--harpd-socket", str(tmp / "none"),
                 "--peer", f"192.0.2.1={ULAS[0].hex(':')}", "--peer", f"192.0.2.2={ULAS[1].hex(':')}",
                 "--log-level", "warning"], stdout=subprocess.DEVNULL))
        end = time.monotonic() + 30
        while not all(os.path.exists(a) for a in apis) or None in relay.conns:
            if time.monotonic() > end:
                raise RuntimeError("the stpds did not come up")
            time.sleep(0.05)
        src = tmp / "st.bin"
        with open(src, "wb") as f:
            for _ in range(size_mib):
                f.write(os.urandom(1 << 20))
        (tmp / "in").mkdir()
        rx = subprocess.Popen([str(BIN / "stp"), "--socket", apis[1], "recv", str(tmp / "in")],
                              stdout=subprocess.DEVNULL)
        while 5001 not in StClient(apis[1]).status()["listeners"]:
            time.sleep(0.05)
        cpu0 = [cpu_seconds(p.pid) for p in procs]
        t0 = time.monotonic()
        r = subprocess.run([str(BIN / "stp"), "--socket", apis[0], "send", "--vc", "3", str(src), "192.0.2.2"],
                           capture_output=True, text=True, timeout=900)
        rx.wait(60)
        dt = time.monotonic() - t0
        if r.returncode != 0:
            raise RuntimeError(f"stp send failed: {r.stdout.strip()} {r.stderr.strip()}")
        gib = size_mib / 1024
        tx, rxc = ((cpu_seconds(p.pid) - c) / gib for p, c in zip(procs, cpu0))
        return tx, rxc, size_mib * 8 * (1 << 20) / dt / 1e9
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
        for s in relay.lsocks + [c for c in relay.conns if c is not None]:
            s.close()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=512)
    ap.add_argument("--dir", default="/dev/shm", help="where the sent and received files live (default: tmpfs)")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    if not os.path.isdir(args.dir):
        print(f"bench/st_cost.py: --dir {args.dir}: not a directory", file=sys.stderr)
        return 1
    if args.size_mib < 1 or args.runs < 1:
        print("bench/st_cost.py: --size-mib and --runs must be at least 1", file=sys.stderr)
        return 1
    for k in range(args.runs):
        try:
            tx, rx, gbps = one_run(args.size_mib, args.dir)
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            print(f"bench/st_cost.py: {exc}", file=sys.stderr)
            return 1
        print(f"run {k + 1}: stpd CPU s/GiB  send {tx:.2f}  receive {rx:.2f}   ({gbps:.2f} Gbit/s through the "
              f"stand-in gsnd; load average {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
