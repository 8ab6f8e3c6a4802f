"""Short fuzz runs of gsnd's compiled data plane (see dataplane_target.py).

GSN_FUZZ_RUNS sets the number of inputs (default 300 here; run longer by hand with
fuzz_dataplane.py)."""

from __future__ import annotations

from tests.fuzz.dataplane_target import one_input
from tests.fuzz.shortrun import atheris_short_run, random_inputs


@random_inputs(400)
def test_random_inputs(data):
    one_input(data)


def test_atheris_short_run():
    atheris_short_run("tests.fuzz.fuzz_dataplane", 400, timeout=300)
