"""atheris harness for daemons._fastpath (every decoder/checker entry, differential).

    .venv/bin/pip install atheris
    .venv/bin/python -m tests.fuzz.fuzz_fastpath -atheris_runs=100000 [corpus_dir]

GSN_FASTPATH_SO=/path/to/_fastpath*.so loads another build (e.g. ASan) instead.
Coverage feedback comes from the Python oracle and harness only: the extension is
built with gcc, without libFuzzer instrumentation.
"""

from __future__ import annotations

from tests.fuzz.harness import run


def main() -> None:
    run("tests.fuzz.fastpath_target", [], so_env="GSN_FASTPATH_SO", extension="daemons._fastpath")


if __name__ == "__main__":
    main()
