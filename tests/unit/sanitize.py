"""Run tests against C extensions built with ASan+UBSan (the suite's sanitizer tests).

``build(source, out, *libs)`` compiles one extension instrumented; ``run_tests(modules,
tests, checks)`` loads each instrumented ``package.module`` from its file before anything
imports it, runs pytest on ``tests`` in a subprocess with the ASan runtime preloaded,
and fails on any sanitizer report.  ``checks`` is Python run after the loading (to
prove the instrumented module is the one in use)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RUNNER = """
import importlib, importlib.util, sys
sep = sys.argv.index("--")
for arg in sys.argv[1:sep - 1]:
    name, path = arg.split("=", 1)
    package, _, attr = name.rpartition(".")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules[name] = mod
    setattr(importlib.import_module(package), attr, mod)
    assert importlib.import_module(name).__file__ == path, name
exec(sys.argv[sep - 1])
assert "libasan" in open("/proc/self/maps").read(), "ASan runtime not loaded"
import pytest
sys.exit(pytest.main(["-q", "-x", "--capture=sys", "-p", "no:cacheprovider", *sys.argv[sep + 1:]]))  # reports reach fd 2
"""


def libasan() -> str | None:
    gcc = shutil.which("gcc")
    if not gcc:
        return None
    path = subprocess.run([gcc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


def build(source: Path, out_dir: Path, *libs: str) -> str:
    """``source`` (a C extension) built with ASan+UBSan into ``out_dir``; its path."""
    so = out_dir / (source.stem + sysconfig.get_config_var("EXT_SUFFIX"))
    run = subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", "-g", "-std=c11", "-Wall",
         "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer",
         "-I", sysconfig.get_paths()["include"], "-I", str(ROOT / "daemons"),  # daemons/: headers ib/ shares
         str(source), "-o", str(so), *(f"-l{lib}" for lib in libs)],
        capture_output=True, text=True,
    )
    assert run.returncode == 0, run.stderr
    return str(so)


def run_tests(modules: dict[str, str], tests: list[str], checks: str = "", **env_extra: str) -> None:
    """pytest on ``tests`` with ``modules`` (``package.module`` -> instrumented .so)."""
    lib = libasan()
    assert lib, "gcc with libasan is needed (./gsn installs gcc)"
    env = dict(os.environ)
    env.update(
        LD_PRELOAD=lib,
        ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:halt_on_error=1",  # CPython itself "leaks" at exit
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1",
        PYTHONDONTWRITEBYTECODE="1",
        **env_extra,
    )
    args = [f"{name}={so}" for name, so in modules.items()]
    run = subprocess.run([sys.executable, "-c", RUNNER, *args, checks, "--", *tests], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    report = run.stdout[-4000:] + run.stderr[-4000:]
    assert "AddressSanitizer" not in run.stderr and "runtime error:" not in run.stderr, report
    assert run.returncode == 0, report
    assert " passed" in run.stdout and " 0 passed" not in run.stdout, report
