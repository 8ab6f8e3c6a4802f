"""Short fuzz runs of the link's receive check lcrc_scan under every block CRC, against
the pure-Python LCRC (see lcrc_target.py); the ASan+UBSan build runs them too
(tests/unit/test_fastpath_sanitizers.py)."""

from __future__ import annotations

from tests.fuzz.lcrc_target import one_input
from tests.fuzz.shortrun import RUNS, atheris_short_run, random_inputs


@random_inputs(max_size=64)
def test_random_inputs_agree_with_the_python_lcrc(data):
    one_input(data)


def test_seed_inputs():
    for impl in range(3):
        for how in range(4):
            one_input(bytes([impl, 200, 1]) + b"\x5a" * 8 + bytes([4, how, 0, 7, 0x20, 0x01]) * 4)
            one_input(bytes([impl, 5, 0]) + bytes(range(200)))  # raw bytes


def test_atheris_short_run():
    atheris_short_run("tests.fuzz.fuzz_lcrc", 64, RUNS * 5)
