"""What every tests/fuzz/test_fuzz_*.py runs: its target on Hypothesis inputs and a short
atheris run of its harness.  GSN_FUZZ_RUNS sets the number of inputs (default 300;
run a million by hand with the harness, ``python -m tests.fuzz.fuzz_<name>``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

ROOT = Path(__file__).resolve().parents[2]


def runs(default: int = 300) -> int:
    """GSN_FUZZ_RUNS, or a test file's own default."""
    return int(os.environ.get("GSN_FUZZ_RUNS", str(default)))


RUNS = runs()


def random_inputs(max_size: int, examples: int = RUNS):
    """Decorates ``test(data)``: ``examples`` Hypothesis inputs of up to max_size bytes."""
    def wrap(test):
        return settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck),
                        database=None)(given(st.binary(max_size=max_size))(test))
    return wrap


def atheris_short_run(harness: str, max_len: int, runs: int = RUNS, timeout: float = 120) -> None:
    """``runs`` inputs through the harness module (tests.fuzz.fuzz_*) under atheris: it must exit 0."""
    run = subprocess.run([sys.executable, "-m", harness, f"-atheris_runs={runs}", f"-max_len={max_len}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-3000:]
