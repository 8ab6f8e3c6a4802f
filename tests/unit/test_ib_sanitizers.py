"""Build ib._ibfast with ASan+UBSan into a temp dir and run its differential tests, its
pump tests on real descriptors and its fuzz target against it in a subprocess.

Fails on any sanitizer report (tests/unit/test_fastpath_sanitizers.py does the same for
the daemons' kernels)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from tests.unit.test_fastpath_sanitizers import _libasan

ROOT = Path(__file__).resolve().parents[2]
TESTS = ["tests/unit/test_ib_fastpath_differential.py", "tests/unit/test_ib_fastpath_pumps.py",
         "tests/fuzz/test_fuzz_targets.py::test_target[ib.fastpath]"]

RUNNER = """
import importlib.util, sys
import ib
spec = importlib.util.spec_from_file_location("ib._ibfast", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
sys.modules["ib._ibfast"] = mod
ib._ibfast = mod
import ib.fastpath
assert ib.fastpath.Port is mod.Port, "the instrumented module is not the one in use"
assert "libasan" in open("/proc/self/maps").read(), "ASan runtime not loaded"
import pytest
sys.exit(pytest.main(["-q", "-x", "--capture=sys", "-p", "no:cacheprovider", *sys.argv[2:]]))
"""


def test_ibfast_clean_under_asan_and_ubsan(tmp_path):
    assert _libasan(), "gcc with libasan is needed (./gsn installs gcc)"
    so = tmp_path / ("_ibfast" + sysconfig.get_config_var("EXT_SUFFIX"))
    build = subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", "-g", "-std=c11", "-Wall", "-fsanitize=address,undefined",
         "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-I", sysconfig.get_paths()["include"],
         str(ROOT / "ib" / "_ibfast.c"), "-o", str(so)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    env = dict(os.environ, LD_PRELOAD=_libasan(), ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:halt_on_error=1",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1", PYTHONDONTWRITEBYTECODE="1")
    run = subprocess.run([sys.executable, "-c", RUNNER, str(so), *TESTS], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    report = run.stdout[-4000:] + run.stderr[-4000:]
    assert "AddressSanitizer" not in run.stderr and "runtime error:" not in run.stderr, report
    assert run.returncode == 0, report
    assert " passed" in run.stdout, report
