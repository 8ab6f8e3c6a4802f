"""atheris harness for daemons._fastpath (every decoder/checker entry, differential).

    .venv/bin/pip install atheris
    .venv/bin/python -m tests.fuzz.fuzz_fastpath -atheris_runs=100000 [corpus_dir]

GSN_FASTPATH_SO=/path/to/_fastpath*.so loads another build (e.g. ASan) instead.
Coverage feedback comes from the Python oracle and harness only: the extension is
built with gcc, without libFuzzer instrumentation.
"""

from __future__ import annotations

import importlib.util
import os
import sys


def _load_override() -> None:
    so = os.environ.get("GSN_FASTPATH_SO")
    if so:
        spec = importlib.util.spec_from_file_location("daemons._fastpath", so)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        sys.modules["daemons._fastpath"] = mod
        import daemons

        daemons._fastpath = mod


def main() -> None:
    import atheris

    _load_override()
    with atheris.instrument_imports(include=["tests.fuzz.fastpath_target"]):
        from tests.fuzz.fastpath_target import one_input
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
