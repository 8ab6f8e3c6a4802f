"""Short fuzz runs of gsn-switch's compiled receive (SwitchPlane.rx/flush from a UDP
socket) on hostile datagrams (see switchrx_target.py); the ASan+UBSan build runs them
too (tests/unit/test_fastpath_sanitizers.py).

GSN_FUZZ_RUNS sets the number of inputs (default 300 here; run a million by hand with
fuzz_switchrx.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from tests.fuzz.switchrx_target import one_input

RUNS = int(os.environ.get("GSN_FUZZ_RUNS", "300"))
ROOT = Path(__file__).resolve().parents[2]


@settings(max_examples=RUNS, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.binary(max_size=600))
def test_hostile_datagrams_through_the_c_receive(data):
    one_input(data)


def test_seed_inputs():
    for seed in (b"", bytes(range(256)), b"\x06\x01" * 100, b"\xff" * 600, b"\x07" * 300):
        one_input(seed)


def test_atheris_short_run():
    run = subprocess.run([sys.executable, "-m", "tests.fuzz.fuzz_switchrx", f"-atheris_runs={RUNS}",
                          "-max_len=600"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
