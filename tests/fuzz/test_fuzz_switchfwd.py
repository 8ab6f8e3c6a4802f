"""Short fuzz runs of the compiled switch walk against its oracle (see switchfwd_target.py).

GSN_FUZZ_RUNS sets the number of inputs (default 300 here; run longer by hand with
fuzz_switchfwd.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.fuzz.switchfwd_target import one_input, switch_input

RUNS = int(os.environ.get("GSN_FUZZ_RUNS", "300"))
ROOT = Path(__file__).resolve().parents[2]


@settings(max_examples=RUNS, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.binary(max_size=600))
def test_random_inputs_agree_with_the_oracle(data):
    one_input(data)


@pytest.mark.parametrize("seed", [b"", bytes(range(256)), b"\x01" * 300, b"\xff\x00\x13" * 100])
def test_seed_inputs(seed):
    one_input(seed)


def test_atheris_short_run(tmp_path):
    run = subprocess.run([sys.executable, "-m", "tests.fuzz.fuzz_switchfwd", f"-atheris_runs={RUNS}",
                          "-max_len=600"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]


@settings(max_examples=RUNS // 3, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.binary(max_size=600))
def test_whole_switch_agrees_with_the_python_walk(data):
    switch_input(data)
