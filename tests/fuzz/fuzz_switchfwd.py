"""atheris harness for gsn-switch's compiled ingress walk, differential against the
Python oracle (see switchfwd_target.py).

    .venv/bin/python -m tests.fuzz.fuzz_switchfwd -atheris_runs=1000000 [corpus_dir]

Coverage feedback comes from the Python oracle and harness only.
"""

from __future__ import annotations

from tests.fuzz.harness import run


def main() -> None:
    run("tests.fuzz.switchfwd_target", ["daemons.switch.forward"])


if __name__ == "__main__":
    main()
