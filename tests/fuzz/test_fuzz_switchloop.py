"""Short fuzz runs of gsn-switch's compiled data path against the Python Switch (see
switchloop_target.py).

GSN_FUZZ_RUNS sets the number of inputs (default 100 here; run longer by hand with
fuzz_switchloop.py).
"""

from __future__ import annotations

import pytest

from tests.fuzz.shortrun import atheris_short_run, random_inputs, runs
from tests.fuzz.switchloop_target import hostile_input, one_input

RUNS = runs(100)


@random_inputs(600, RUNS)
def test_traffic_with_faults_agrees_with_the_python_switch(data):
    one_input(data)


@random_inputs(600, RUNS)
def test_hostile_cable_through_the_c_receive_agrees(data):
    hostile_input(data)


@pytest.mark.parametrize("seed", [b"", bytes(range(256)), b"\x07\x02" * 100, b"\xff\x00\x13" * 100])
def test_seed_inputs(seed):
    one_input(seed)
    hostile_input(seed)


def test_atheris_short_run():
    atheris_short_run("tests.fuzz.fuzz_switchloop", 600, RUNS, timeout=300)
