"""Short fuzz runs of gsn-switch's compiled receive (SwitchPlane.rx/flush from a UDP
socket) on hostile datagrams (see switchrx_target.py); the ASan+UBSan build runs them
too (tests/unit/test_fastpath_sanitizers.py).

GSN_FUZZ_RUNS sets the number of inputs (default 300 here; run a million by hand with
fuzz_switchrx.py).
"""

from __future__ import annotations

from tests.fuzz.shortrun import atheris_short_run, random_inputs
from tests.fuzz.switchrx_target import one_input


@random_inputs(600)
def test_hostile_datagrams_through_the_c_receive(data):
    one_input(data)


def test_seed_inputs():
    for seed in (b"", bytes(range(256)), b"\x06\x01" * 100, b"\xff" * 600, b"\x07" * 300):
        one_input(seed)


def test_atheris_short_run():
    atheris_short_run("tests.fuzz.fuzz_switchrx", 600, timeout=300)
