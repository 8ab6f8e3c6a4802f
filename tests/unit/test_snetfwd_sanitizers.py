"""Build servernet._snetfwd (snet-router's compiled loop) with ASan+UBSan into a temp dir
and run its differential and socket tests and its fuzz target against it in a
subprocess, as test_fastpath_sanitizers.py does for the daemons' kernels.

Fails on any sanitizer report.
"""

from __future__ import annotations

import os

from tests.unit.sanitize import ROOT, build, run_tests

TESTS = ["tests/unit/test_snetfwd_differential.py", "tests/fuzz/test_fuzz_targets.py", "-k",
         "snetfwd or crouter or compiled or forwarding or fabric_socket or crc or constants or route_table or bad_arguments"]


def test_router_loop_clean_under_asan_and_ubsan(tmp_path):
    so = build(ROOT / "servernet" / "_snetfwd.c", tmp_path)
    run_tests({"servernet._snetfwd": so}, TESTS,
              GSN_FUZZ_TARGET_RUNS=os.environ.get("GSN_FUZZ_TARGET_RUNS", "1500"))
