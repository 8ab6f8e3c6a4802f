"""Build servernet._snetfwd (snet-router's compiled loop) with ASan+UBSan into a temp dir
and run its differential and socket tests and its fuzz target against it in a
subprocess, as test_fastpath_sanitizers.py does for the daemons' kernels.

Fails on any sanitizer report.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ["tests/unit/test_snetfwd_differential.py", "tests/fuzz/test_fuzz_targets.py", "-k",
         "snetfwd or crouter or compiled or forwarding or fabric_socket or crc or constants or route_table or bad_arguments"]

# Load the instrumented module as servernet._snetfwd before anything imports it.
RUNNER = """
import importlib.util, sys
import servernet
spec = importlib.util.spec_from_file_location("servernet._snetfwd", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
sys.modules["servernet._snetfwd"] = mod
servernet._snetfwd = mod
from servernet import _snetfwd
assert _snetfwd.__file__ == sys.argv[1], _snetfwd.__file__
assert "libasan" in open("/proc/self/maps").read(), "ASan runtime not loaded"
import pytest
sys.exit(pytest.main(["-q", "-x", "--capture=sys", "-p", "no:cacheprovider", *sys.argv[2:]]))  # reports reach fd 2
"""


def _libasan() -> str | None:
    gcc = shutil.which("gcc")
    if not gcc:
        return None
    path = subprocess.run([gcc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


def test_router_loop_clean_under_asan_and_ubsan(tmp_path):
    assert _libasan(), "gcc with libasan is needed (./gsn installs gcc)"
    so = tmp_path / ("_snetfwd" + sysconfig.get_config_var("EXT_SUFFIX"))
    build = subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", "-g", "-std=c11", "-Wall",
         "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer",
         "-I", sysconfig.get_paths()["include"], str(ROOT / "servernet" / "_snetfwd.c"), "-o", str(so)],
        capture_output=True, text=True,
    )
    assert build.returncode == 0, build.stderr
    env = dict(os.environ)
    env.update(
        LD_PRELOAD=_libasan(),
        ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:halt_on_error=1",  # CPython itself "leaks" at exit
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1",
        PYTHONDONTWRITEBYTECODE="1",
        GSN_FUZZ_TARGET_RUNS=env.get("GSN_FUZZ_TARGET_RUNS", "1500"),
    )
    run = subprocess.run([sys.executable, "-c", RUNNER, str(so), *TESTS], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    report = run.stdout[-4000:] + run.stderr[-4000:]
    assert "AddressSanitizer" not in run.stderr and "runtime error:" not in run.stderr, report
    assert run.returncode == 0, report
    assert " passed" in run.stdout and " 0 passed" not in run.stdout, report
