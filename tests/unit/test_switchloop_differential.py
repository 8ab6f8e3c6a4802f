"""gsn-switch's compiled data path (Switch(plane=True), daemons/_switchloop.h) against its
Python oracle (the Switch's own _ingress + pump): the same cable datagrams in give the
same datagrams out of every port, the same counters (switch, ports, links) and the same
Messages at the hosts.

A three-port switch, hosts on ports 1 and 2 sending Messages of any length on any VC
(to host 3, to each other, broadcast, to an unknown ULA, with a spoofed source) while
host 3 frees its receive buffers slowly: two inputs contend for one output VC (the
wormhole) and the output's credits run out (the back-pressure).  On the way to the
switch datagrams are corrupted (two cancelling bit flips included), truncated, dropped,
duplicated; links are reset in the middle of Messages.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings, strategies as st

from daemons import constants as C
from daemons.link.clink import CLink
from daemons.link.link import Received
from daemons.switch.core import Switch
from daemons.wire.message import encode_stream, max_payload, stream_records
from daemons.wire.ula import assigned_ula

ULAS = {p: assigned_ula(9, p) for p in (1, 2, 3)}
UNKNOWN = assigned_ula(9, 44)
BUFFERS = (24, 40, 16, 40)  # small: output credits run out


def _rig(plane: bool, seed: int):
    sw = Switch(7, [1, 2, 3], 0.0, rng=random.Random(seed), buffers=BUFFERS,
                static={u: p for p, u in ULAS.items()}, plane=plane, windows={1: 200, 2: 200, 3: 200})
    hosts = {p: CLink(p, 0.0, buffers=BUFFERS, rng=random.Random(seed * 10 + p), window=200) for p in (1, 2, 3)}
    return sw, hosts


def _run(plane: bool, seed: int, msgs, faults, release_every: int, rounds: int = 60):
    sw, hosts = _rig(plane, seed)
    out, got = [], {p: [] for p in hosts}
    held = {p: [] for p in hosts}
    now = 0.0
    fault_at = {i: f for i, f in faults}
    k = 0
    for r in range(rounds):
        now += 0.004
        for src, vc, dst, spoof, n, when in msgs:
            if r == when:  # links are up from round 6
                d_ula = {"bcast": C.ULA_BROADCAST, "unknown": UNKNOWN}.get(dst, ULAS.get(dst, UNKNOWN))
                s_ula = ULAS[3] if spoof else ULAS[src]
                payload = bytes((i * 7 + n) & 0xFF for i in range(min(n, max_payload(vc))))
                hosts[src].enqueue(vc, stream_records(vc, encode_stream(vc, d_ula, s_ula, 0x88B5, payload)))
        restart = set()
        for p, host in hosts.items():
            for dg in host.handle_timer(now) + host.datagrams(now):
                f = fault_at.get(k)
                k += 1
                dg = bytes(dg)
                if f == "drop":
                    continue
                copies = [dg]
                if f == "flip2":  # the same bit in two micropackets: cancels in an XOR fold
                    b = bytearray(dg)
                    if len(b) >= C.SHIM_BYTES + 2 * C.MP_BYTES:
                        b[C.SHIM_BYTES + 5] ^= 4
                        b[C.SHIM_BYTES + C.MP_BYTES + 5] ^= 4
                    copies = [bytes(b)]
                elif f == "truncate":
                    copies = [dg[: len(dg) - 7]]
                elif f == "dup":
                    copies = [dg, dg]
                elif f == "restart" and p != 3:
                    restart.add(p)
                for c in copies:
                    sw.ports[p].link.receive(c, now)
                    sw.process(p, now)
        for p, host in hosts.items():
            link = sw.ports[p].link
            for dg in link.handle_timer(now) + link.datagrams(now):
                out.append((p, bytes(dg)))
                host.receive(dg, now)
            for ev in host.events():
                if isinstance(ev, Received):
                    got[p].append((ev.vc, ev.recs.tobytes()))
                    held[p].append((ev.vc, len(ev.recs)))
                else:
                    got[p].append(type(ev).__name__)
            # host 3 frees its buffers only every few rounds: the switch's output waits
            if p != 3 or r % release_every == 0:
                for vc, n in held[p]:
                    host.release(vc, n)
                held[p].clear()
        for p in restart:  # the host restarts mid-Message: the switch sees a RESET, its link goes down
            hosts[p] = CLink(p, now, buffers=BUFFERS, rng=random.Random(seed * 10 + p + 5), window=200)
        sw.handle_timer(now)
    st = sw.status()
    links = {n: dict(sw.ports[n].link.counters) for n in sw.ports}
    return out, got, st, links


MSG = st.tuples(st.sampled_from([1, 2]), st.integers(0, 3), st.sampled_from([1, 2, 3, 3, 3, "bcast", "unknown"]),
                st.integers(0, 4).map(lambda x: x == 0), st.integers(0, 3000), st.integers(6, 30))
FAULT = st.tuples(st.integers(0, 90), st.sampled_from(["drop", "flip2", "truncate", "dup", "restart"]))


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 2**16), st.lists(MSG, max_size=12), st.lists(FAULT, max_size=10), st.integers(1, 4))
def test_compiled_switch_matches_python(seed, msgs, faults, release_every):
    want = _run(False, seed, msgs, faults, release_every)
    got = _run(True, seed, msgs, faults, release_every)
    assert got[0] == want[0]  # every datagram out of every port
    assert got[1] == want[1]  # what the hosts received
    assert got[2] == want[2]  # switch and port counters, tables
    assert got[3] == want[3]  # link counters


def test_two_inputs_contend_for_one_output_and_credits_run_out():
    """Hand-checked: both hosts send long Messages to host 3 on VC1; the output VC carries
    one Message at a time (no interleaving at host 3), and host 3's slow release holds
    the switch's output queue at the VC's buffer."""
    msgs = [(1, 1, 3, False, 900, 6), (2, 1, 3, False, 900, 6), (1, 1, 3, False, 300, 6), (2, 1, 3, False, 500, 7)]
    for plane in (False, True):
        _, got, st_, _ = _run(plane, 3, msgs, [], 3, rounds=120)
        stream = b"".join(recs for e in got[3] if isinstance(e, tuple) for recs in [e[1]])
        import numpy as np

        from daemons.wire.micropacket import MP_DTYPE
        recs = np.frombuffer(stream, MP_DTYPE)
        types = (recs["ctrl"] >> np.uint64(58)) & np.uint64(0xF)
        tails = (recs["ctrl"] >> np.uint64(57)) & np.uint64(1)
        headers, ends = np.flatnonzero(types == C.MpType.HEADER), np.flatnonzero(tails)
        assert len(headers) == 4 and len(ends) == 4
        assert all(h < e < h2 for h, e, h2 in zip(headers, ends, list(headers[1:]) + [len(recs)]))
        assert st_["ports"]["3"]["counters"]["tx_mps"] == len(recs)
    assert _run(False, 3, msgs, [], 3, rounds=120) == _run(True, 3, msgs, [], 3, rounds=120)
