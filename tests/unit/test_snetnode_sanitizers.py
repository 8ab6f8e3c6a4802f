"""Build servernet._snetnode (snetd's compiled per-packet path) with ASan+UBSan into a
temp dir and run its differential tests and fuzz targets against it in a subprocess.

Fails on any sanitizer report.
"""

from __future__ import annotations

import os

from tests.unit.sanitize import ROOT, build, run_tests

TESTS = ["tests/unit/test_snetnode_differential.py", "tests/fuzz/test_fuzz_targets.py", "-k",
         "constants or engine or compiled or cnode or snetnode or bad_arguments"]


def test_node_engine_clean_under_asan_and_ubsan(tmp_path):
    so = build(ROOT / "servernet" / "_snetnode.c", tmp_path)
    run_tests({"servernet._snetnode": so}, TESTS,
              GSN_FUZZ_TARGET_RUNS=os.environ.get("GSN_FUZZ_TARGET_RUNS", "1500"))
