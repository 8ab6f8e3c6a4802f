"""Build daemons._fastpath, daemons._link and daemons._switchfwd with ASan+UBSan into a temp dir and
run the differential tests, the link tests (Link and CLink), the CLink differential test,
gsnd's data plane (C reassembly, pumps on real descriptors), the switch's forwarding walk
and the fuzz harnesses against them in a subprocess.

Fails on any sanitizer report.  Skipped when gcc or libasan is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
MODULES = ("_fastpath", "_link", "_switchfwd")
TESTS = ["tests/unit/test_fastpath.py", "tests/unit/test_link_lcrc.py", "tests/fuzz/test_fuzz_fastpath.py",
         "tests/unit/test_link.py", "tests/unit/test_packet_of_death.py", "tests/unit/test_clink_differential.py",
         "tests/unit/test_link_recovery.py",
         "tests/fuzz/test_fuzz_link.py", "tests/unit/test_reasm_differential.py", "tests/unit/test_dataplane.py",
         "tests/fuzz/test_fuzz_dataplane.py", "tests/unit/test_switchfwd_differential.py",
         "tests/fuzz/test_fuzz_switchfwd.py", "tests/sim/test_switch_sim.py",
         "tests/unit/test_switchloop_differential.py", "tests/fuzz/test_fuzz_switchloop.py",
         "tests/unit/test_dploop.py",
         # its bounds are wall-clock latencies, which the instrumented build stretches
         "--deselect", "tests/unit/test_dploop.py::test_control_socket_and_trio_timers_are_served_under_full_load",
         "tests/unit/test_ulp_send.py", "tests/unit/test_cableauth_compiled.py", "tests/fuzz/test_fuzz_cableauth.py",
         # atheris runs its own interpreter child, which would not carry the instrumented module
         "--deselect", "tests/fuzz/test_fuzz_fastpath.py::test_atheris_short_run",
         "--deselect", "tests/fuzz/test_fuzz_link.py::test_atheris_short_run",
         "--deselect", "tests/fuzz/test_fuzz_dataplane.py::test_atheris_short_run",
         "--deselect", "tests/fuzz/test_fuzz_switchfwd.py::test_atheris_short_run",
         "--deselect", "tests/fuzz/test_fuzz_switchloop.py::test_atheris_short_run",
         "--deselect", "tests/fuzz/test_fuzz_cableauth.py::test_atheris_short_run"]

# Load the instrumented modules as daemons._fastpath / _link / _switchfwd before anything imports them.
RUNNER = """
import importlib.util, sys
import daemons
for name, so in zip(("_fastpath", "_link", "_switchfwd"), sys.argv[1:4]):
    spec = importlib.util.spec_from_file_location("daemons." + name, so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules["daemons." + name] = mod
    setattr(daemons, name, mod)
from daemons import _fastpath, _link, _switchfwd
assert _fastpath.__file__ == sys.argv[1], _fastpath.__file__
assert _link.__file__ == sys.argv[2], _link.__file__
assert _switchfwd.__file__ == sys.argv[3], _switchfwd.__file__
import daemons.link.clink
assert daemons.link.clink._link is _link
assert "libasan" in open("/proc/self/maps").read(), "ASan runtime not loaded"
import pytest
sys.exit(pytest.main(["-q", "-x", "--capture=sys", "-p", "no:cacheprovider", *sys.argv[4:]]))  # reports reach fd 2
"""


def _libasan() -> str | None:
    gcc = shutil.which("gcc")
    if not gcc:
        return None
    path = subprocess.run([gcc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


def test_kernels_clean_under_asan_and_ubsan(tmp_path):
    assert _libasan(), "gcc with libasan is needed (./gsn installs gcc)"
    sos = []
    for name in MODULES:
        so = tmp_path / (name + sysconfig.get_config_var("EXT_SUFFIX"))
        build = subprocess.run(
            ["gcc", "-shared", "-fPIC", "-O1", "-g", "-std=c11", "-Wall",
             "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer",
             "-I", sysconfig.get_paths()["include"], str(ROOT / "daemons" / f"{name}.c"), "-o", str(so),
             *(["-lcrypto"] if name == "_link" else [])],  # keyed cables' HMAC (_cableauth.h)
            capture_output=True, text=True,
        )
        assert build.returncode == 0, build.stderr
        sos.append(str(so))
    env = dict(os.environ)
    env.update(
        LD_PRELOAD=_libasan(),
        ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:halt_on_error=1",  # CPython itself "leaks" at exit
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1",
        PYTHONDONTWRITEBYTECODE="1",
        GSN_FUZZ_RUNS=env.get("GSN_FUZZ_RUNS", "1500"),
    )
    run = subprocess.run([sys.executable, "-c", RUNNER, *sos, *TESTS], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    report = run.stdout[-4000:] + run.stderr[-4000:]
    assert "AddressSanitizer" not in run.stderr and "runtime error:" not in run.stderr, report
    assert run.returncode == 0, report
    assert " passed" in run.stdout, report
