"""The one atheris entry point the tests/fuzz/fuzz_*.py harnesses share.

``run(target, instrument, so_env=..., extension=...)`` instruments ``instrument`` (the
target module and the Python oracles it compares against: coverage feedback comes from
them only, the C extensions are built with gcc, without libFuzzer instrumentation),
then fuzzes ``target.one_input`` with the command line's atheris/libFuzzer flags.
With ``so_env`` set in the environment, the C extension ``extension`` is loaded from
that path instead (e.g. an ASan build).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys


def _load_override(so_env: str, extension: str) -> None:
    so = os.environ.get(so_env)
    if not so:
        return
    spec = importlib.util.spec_from_file_location(extension, so)
    if spec is None or spec.loader is None:
        sys.exit(f"{so_env}={so}: not a loadable extension module")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules[extension] = mod
    package, _, name = extension.rpartition(".")
    setattr(importlib.import_module(package), name, mod)


def run(target: str, instrument: list[str], *, so_env: str | None = None, extension: str | None = None) -> None:
    import atheris

    if so_env is not None and extension is not None:
        _load_override(so_env, extension)
    with atheris.instrument_imports(include=[target, *instrument]):
        one_input = importlib.import_module(target).one_input
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
