"""atheris harness for the link's send path (daemons/_txfast.h), differential against
the Python Link (see txfast_target.py).

    .venv/bin/python -m tests.fuzz.fuzz_txfast -atheris_runs=1000000 -max_len=200 [corpus_dir]

Coverage feedback comes from the target and wire/ether.py only (an instrumented Link costs
more than half the rate).
"""

from __future__ import annotations

from tests.fuzz.harness import run


def main() -> None:
    run("tests.fuzz.txfast_target", ["daemons.wire.ether"])


if __name__ == "__main__":
    main()
