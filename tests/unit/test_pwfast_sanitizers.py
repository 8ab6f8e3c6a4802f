"""Build pktwayd._pwfast (IP across the PacketWay router, compiled) with ASan+UBSan into a
temp dir and run its differential and socket tests and its fuzz target against it in a
subprocess, as the other extensions' sanitizer tests do.

Fails on any sanitizer report.
"""

from __future__ import annotations

import os

from tests.unit.sanitize import ROOT, build, run_tests

TESTS = ["tests/unit/test_pwfast_differential.py", "tests/unit/test_pwfast_sockets.py", "tests/fuzz/test_fuzz_targets.py", "-k",
         "pwfast or exactly or burst or room or shape or bad_arguments or pktwayd.fastpath"]


def test_pwfast_clean_under_asan_and_ubsan(tmp_path):
    so = build(ROOT / "pktwayd" / "_pwfast.c", tmp_path)
    run_tests({"pktwayd._pwfast": so}, TESTS, GSN_FUZZ_TARGET_RUNS=os.environ.get("GSN_FUZZ_TARGET_RUNS", "1500"))
