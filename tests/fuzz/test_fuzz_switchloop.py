"""Short fuzz runs of gsn-switch's compiled data path against the Python Switch (see
switchloop_target.py).

GSN_FUZZ_RUNS sets the number of inputs (default 100 here; run longer by hand with
fuzz_switchloop.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.fuzz.switchloop_target import hostile_input, one_input

RUNS = int(os.environ.get("GSN_FUZZ_RUNS", "100"))
ROOT = Path(__file__).resolve().parents[2]


@settings(max_examples=RUNS, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.binary(max_size=600))
def test_traffic_with_faults_agrees_with_the_python_switch(data):
    one_input(data)


@settings(max_examples=RUNS, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.binary(max_size=600))
def test_hostile_cable_through_the_c_receive_agrees(data):
    hostile_input(data)


@pytest.mark.parametrize("seed", [b"", bytes(range(256)), b"\x07\x02" * 100, b"\xff\x00\x13" * 100])
def test_seed_inputs(seed):
    one_input(seed)
    hostile_input(seed)


def test_atheris_short_run():
    run = subprocess.run([sys.executable, "-m", "tests.fuzz.fuzz_switchloop", f"-atheris_runs={RUNS}",
                          "-max_len=600"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
