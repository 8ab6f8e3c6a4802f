"""Build ib._ibfast with ASan+UBSan into a temp dir and run its differential tests, its
pump tests on real descriptors and its fuzz target against it in a subprocess.

Fails on any sanitizer report (tests/unit/test_fastpath_sanitizers.py does the same for
the daemons' kernels)."""

from __future__ import annotations

from tests.unit.sanitize import ROOT, build, run_tests

TESTS = ["tests/unit/test_ib_fastpath_differential.py", "tests/unit/test_ib_fastpath_pumps.py",
         "tests/fuzz/test_fuzz_targets.py::test_target[ib.fastpath]", "tests/fuzz/test_fuzz_targets.py::test_target[ib.cswitch]"]


def test_ibfast_clean_under_asan_and_ubsan(tmp_path):
    so = build(ROOT / "ib" / "_ibfast.c", tmp_path)
    run_tests({"ib._ibfast": so}, TESTS, "import ib, ib.fastpath\n"
              "assert ib.fastpath.Port is ib._ibfast.Port, 'the instrumented module is not the one in use'")
