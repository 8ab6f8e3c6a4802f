"""Short fuzz runs of CLink.receive against Link (see link_target.py).

GSN_FUZZ_RUNS sets the number of inputs (default 300 here; run longer by hand with
fuzz_link.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.fuzz.link_target import one_input

RUNS = int(os.environ.get("GSN_FUZZ_RUNS", "300"))
ROOT = Path(__file__).resolve().parents[2]


@settings(max_examples=RUNS, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.binary(max_size=600))
def test_random_inputs_agree_with_link(data):
    one_input(data)


@pytest.mark.parametrize("seed", [bytes([op, 1, 0, 200, 2, 7, 0, 0, 0, 0]) * 8 for op in range(5)]
                         + [bytes([1, 1, 5, 220, 2, 0, 0, 9, 3, 3, 1, 7, 4, 30, 3, 0])])
def test_seed_inputs(seed):
    one_input(seed)
    one_input(seed[:5])


def test_atheris_short_run(tmp_path):
    run = subprocess.run([sys.executable, "-m", "tests.fuzz.fuzz_link", f"-atheris_runs={RUNS}",
                          "-max_len=600"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
