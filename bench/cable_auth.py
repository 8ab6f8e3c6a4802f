#!/usr/bin/env python3
"""What authenticated cables cost: ULP throughput between two gsnd back to back on
loopback over a plain cable and over a keyed one, measured alternately in the same
run, and the seal/open cost per datagram -- the compiled one the daemons use
(CompiledCableAuth, daemons/_cableauth.h) and its Python oracle (CableAuth) -- beside a
bare HMAC-SHA256 of the same bytes.

    .venv/bin/python bench/cable_auth.py [--seconds 3] [--rounds 2]

Cases: 64 KiB Messages on VC1 over a loopback cable (64 KB datagrams, 1,600
micropackets) and over ``--cable-mtu 1500`` (1.4 KB datagrams, 36 micropackets
plain, 35 keyed), and 1 KiB Messages on VC1.  Each line is the median of
``--rounds`` alternating runs; "keyed/plain" is the throughput ratio."""

from __future__ import annotations

import argparse
import hmac
import os
import statistics
import sys
import tempfile
import timeit

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from bench.ulp import start_pair, stop, ulp_run  # noqa: E402
from daemons import constants as C  # noqa: E402
from daemons.runtime.keyfile import new_key, write_key  # noqa: E402
from daemons.wire.cableauth import CableAuth, CompiledCableAuth  # noqa: E402


def per_datagram_cost(impl, n_mps: int, number: int) -> tuple[float, float, float]:
    """Microseconds to seal and to open one datagram of ``n_mps`` micropackets with
    ``impl``, and for a bare hmac.digest over the same bytes (OpenSSL's HMAC-SHA256)."""
    key = new_key()
    tx, rx = impl(key, 0, 1), impl(key, 1, 2)
    body = bytes(C.SHIM_BYTES) + os.urandom(n_mps * C.MP_BYTES)
    seal = timeit.timeit(lambda: tx.seal(body), number=number) / number
    sealed = [tx.seal(body) for _ in range(number)]
    it = iter(sealed)
    opened = timeit.timeit(lambda: rx.open(next(it)), number=number) / number
    assert rx.counters["rx_auth_ok"] == number
    bare = timeit.timeit(lambda: hmac.digest(key, body, "sha256"), number=number) / number
    return seal * 1e6, opened * 1e6, bare * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} "
          f"(1/5/15 min) on {os.cpu_count()} CPUs")
    print(f"\n{'seal/open per datagram':<44}{'seal us':>10}{'open us':>10}{'bare HMAC us':>14}{'MB/s open':>11}")
    for label, n_mps, number in (("64 KiB (32 + 1600 x 40 bytes)", 1600, 2000),
                                 ("1.4 KB (32 + 35 x 40 bytes)", 35, 20000)):
        for impl, name in ((CompiledCableAuth, "C"), (CableAuth, "Python oracle")):
            s, o, b = per_datagram_cost(impl, n_mps, number)
            size = C.SHIM_BYTES + n_mps * C.MP_BYTES
            print(f"{f'{label}, {name}':<44}{s:>10.1f}{o:>10.1f}{b:>14.1f}{size / o:>11.0f}")

    tmp = tempfile.mkdtemp(prefix="gsnauthbench-")
    key = f"{tmp}/cable.key"
    write_key(key, new_key())
    cases = [("64 KiB VC1, loopback", 65536, []), ("64 KiB VC1, mtu 1500", 65536, ["--cable-mtu", "1500"]),
             ("1 KiB VC1, loopback", 1024, [])]
    print(f"\n{'ULP throughput':<24}{'plain Gbit/s':>14}{'keyed Gbit/s':>14}{'keyed/plain':>13}"
          f"{'plain msg/s':>13}{'keyed msg/s':>13}")
    try:
        for label, size, extra in cases:
            quiet = [*extra, "--log-level", "error"]  # a client hanging up between runs is no news
            plain_procs: list = []
            keyed_procs: list = []
            try:  # start_pair adds each daemon to the list as it starts it: all are stopped below
                _, plain_dirs, ulas = start_pair(f"{tmp}/plain", plain_procs, quiet)
                _, keyed_dirs, _ = start_pair(f"{tmp}/keyed", keyed_procs, [*quiet, "--key-file", key])
                plain, keyed = [], []
                for _ in range(args.rounds):
                    plain.append(ulp_run(plain_dirs, ulas, size, 1, args.seconds))
                    keyed.append(ulp_run(keyed_dirs, ulas, size, 1, args.seconds))
            finally:
                stop(plain_procs, f"{tmp}/plain")
                stop(keyed_procs, f"{tmp}/keyed")
            pr, pg = statistics.median(r for r, _, _ in plain), statistics.median(g for _, g, _ in plain)
            kr, kg = statistics.median(r for r, _, _ in keyed), statistics.median(g for _, g, _ in keyed)
            print(f"{label:<24}{pg:>14.3f}{kg:>14.3f}{kg / pg:>13.3f}{pr:>13.0f}{kr:>13.0f}")
    finally:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nload after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
