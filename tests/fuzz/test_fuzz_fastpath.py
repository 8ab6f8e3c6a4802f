"""Short fuzz runs of every daemons._fastpath entry (see fastpath_target.py).

GSN_FUZZ_RUNS sets the number of inputs (default 300 here; run longer by hand with
fuzz_fastpath.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.fuzz.fastpath_target import one_input

RUNS = int(os.environ.get("GSN_FUZZ_RUNS", "300"))
ROOT = Path(__file__).resolve().parents[2]


@settings(max_examples=RUNS, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.binary(max_size=600))
def test_random_inputs_agree_with_oracles_or_are_rejected(data):
    one_input(data)


@pytest.mark.parametrize("seed", [bytes([op]) + bytes(range(7)) * 30 for op in range(6)])
def test_seed_inputs(seed):
    one_input(seed)
    one_input(seed[:5])
    one_input(bytes([seed[0], 1, 0, 3]) + seed[1:])


def test_atheris_short_run(tmp_path):
    run = subprocess.run([sys.executable, "-m", "tests.fuzz.fuzz_fastpath", f"-atheris_runs={RUNS * 5}",
                          "-max_len=600"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
