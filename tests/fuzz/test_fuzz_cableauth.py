"""Short fuzz runs of the keyed cable's open in C against CableAuth (see
cableauth_target.py).  GSN_FUZZ_RUNS sets the number of inputs (default 300 here; run
longer by hand with fuzz_cableauth.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from tests.fuzz.cableauth_target import one_input

RUNS = int(os.environ.get("GSN_FUZZ_RUNS", "300"))
ROOT = Path(__file__).resolve().parents[2]


@settings(max_examples=RUNS, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.binary(max_size=2000))
def test_random_inputs_agree_with_the_oracle(data):
    one_input(data)


def test_atheris_short_run():
    run = subprocess.run([sys.executable, "-m", "tests.fuzz.fuzz_cableauth", f"-atheris_runs={RUNS}",
                          "-max_len=2000"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
