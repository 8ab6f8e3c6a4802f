"""atheris harness for CLink.receive, differential against Link (see link_target.py).

    .venv/bin/python -m tests.fuzz.fuzz_link -atheris_runs=100000 [corpus_dir]

GSN_LINK_SO=/path/to/_link*.so loads another build (e.g. ASan) instead.  Coverage
feedback comes from the Python oracle and harness only.
"""

from __future__ import annotations

from tests.fuzz.harness import run


def main() -> None:
    run("tests.fuzz.link_target", ["daemons.link.link"], so_env="GSN_LINK_SO", extension="daemons._link")


if __name__ == "__main__":
    main()
