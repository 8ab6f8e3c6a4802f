"""Short fuzz runs of the compiled switch walk against its oracle (see switchfwd_target.py).

GSN_FUZZ_RUNS sets the number of inputs (default 300 here; run longer by hand with
fuzz_switchfwd.py).
"""

from __future__ import annotations

import pytest

from tests.fuzz.shortrun import RUNS, atheris_short_run, random_inputs
from tests.fuzz.switchfwd_target import one_input, switch_input


@random_inputs(600)
def test_random_inputs_agree_with_the_oracle(data):
    one_input(data)


@pytest.mark.parametrize("seed", [b"", bytes(range(256)), b"\x01" * 300, b"\xff\x00\x13" * 100])
def test_seed_inputs(seed):
    one_input(seed)


def test_atheris_short_run():
    atheris_short_run("tests.fuzz.fuzz_switchfwd", 600)


@random_inputs(600, RUNS // 3)
def test_whole_switch_agrees_with_the_python_walk(data):
    switch_input(data)
