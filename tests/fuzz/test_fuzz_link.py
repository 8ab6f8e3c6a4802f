"""Short fuzz runs of CLink.receive against Link (see link_target.py).

GSN_FUZZ_RUNS sets the number of inputs (default 300 here; run longer by hand with
fuzz_link.py).
"""

from __future__ import annotations

import pytest

from tests.fuzz.link_target import one_input
from tests.fuzz.shortrun import atheris_short_run, random_inputs


@random_inputs(600)
def test_random_inputs_agree_with_link(data):
    one_input(data)


@pytest.mark.parametrize("seed", [bytes([op, 1, 0, 200, 2, 7, 0, 0, 0, 0]) * 8 for op in range(5)]
                         + [bytes([1, 1, 5, 220, 2, 0, 0, 9, 3, 3, 1, 7, 4, 30, 3, 0]),
                            # a replayed datagram with bit 63 of its shim seq flipped: CLink took
                            # the distance as signed, buffered it (out_of_order) and SACKed it
                            b"\x01\x004\xc5\x03\x00\xa7\x00\x01\xe4"])
def test_seed_inputs(seed):
    one_input(seed)
    one_input(seed[:5])


def test_atheris_short_run():
    atheris_short_run("tests.fuzz.fuzz_link", 600)
