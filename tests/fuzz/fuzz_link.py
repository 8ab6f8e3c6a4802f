"""atheris harness for CLink.receive, differential against Link (see link_target.py).

    .venv/bin/python -m tests.fuzz.fuzz_link -atheris_runs=100000 [corpus_dir]

GSN_LINK_SO=/path/to/_link*.so loads another build (e.g. ASan) instead.  Coverage
feedback comes from the Python oracle and harness only.
"""

from __future__ import annotations

import importlib.util
import os
import sys


def _load_override() -> None:
    so = os.environ.get("GSN_LINK_SO")
    if so:
        spec = importlib.util.spec_from_file_location("daemons._link", so)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        sys.modules["daemons._link"] = mod
        import daemons

        daemons._link = mod


def main() -> None:
    import atheris

    _load_override()
    with atheris.instrument_imports(include=["tests.fuzz.link_target", "daemons.link.link"]):
        from tests.fuzz.link_target import one_input
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
