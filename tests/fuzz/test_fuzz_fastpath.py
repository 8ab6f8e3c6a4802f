"""Short fuzz runs of every daemons._fastpath entry (see fastpath_target.py).

GSN_FUZZ_RUNS sets the number of inputs (default 300 here; run longer by hand with
fuzz_fastpath.py).
"""

from __future__ import annotations

import pytest

from tests.fuzz.fastpath_target import one_input
from tests.fuzz.shortrun import RUNS, atheris_short_run, random_inputs


@random_inputs(600)
def test_random_inputs_agree_with_oracles_or_are_rejected(data):
    one_input(data)


@pytest.mark.parametrize("seed", [bytes([op]) + bytes(range(7)) * 30 for op in range(6)])
def test_seed_inputs(seed):
    one_input(seed)
    one_input(seed[:5])
    one_input(bytes([seed[0], 1, 0, 3]) + seed[1:])


def test_atheris_short_run():
    atheris_short_run("tests.fuzz.fuzz_fastpath", 600, RUNS * 5)
