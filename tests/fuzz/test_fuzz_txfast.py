"""Short fuzz runs of the link's send path (daemons/_txfast.h: TAP frames encoded into
the datagrams, Messages copied and stamped) against the Python Link (see
txfast_target.py); the ASan+UBSan build runs them too (tests/unit/test_fastpath_sanitizers.py)."""

from __future__ import annotations

from tests.fuzz.shortrun import atheris_short_run, random_inputs
from tests.fuzz.txfast_target import one_input


@random_inputs(max_size=200)
def test_random_inputs_send_what_link_sends(data):
    one_input(data)


def test_seed_inputs():
    big = bytes([0, 0, 1, 3, 0x23, 0x00, 1, 2, 3, 4, 1])  # a 8960-byte IPv6 frame: raw, over many datagrams
    for impl in range(3):
        one_input(bytes([impl, 9]) + big + bytes([2, 7]) + big + bytes([3, 0, 4, 1, 1, 2, 0, 9, 9, 3, 1, 255]))


def test_atheris_short_run():
    atheris_short_run("tests.fuzz.fuzz_txfast", 200, timeout=300)
