"""Short fuzz runs of the keyed cable's open in C against CableAuth (see
cableauth_target.py).  GSN_FUZZ_RUNS sets the number of inputs (default 300 here; run
longer by hand with fuzz_cableauth.py)."""

from __future__ import annotations

from tests.fuzz.cableauth_target import one_input
from tests.fuzz.shortrun import atheris_short_run, random_inputs


@random_inputs(2000)
def test_random_inputs_agree_with_the_oracle(data):
    one_input(data)


def test_atheris_short_run():
    atheris_short_run("tests.fuzz.fuzz_cableauth", 2000)
