"""atheris harness for gsn-switch's compiled data path (SwitchPlane), differential
against the Python Switch (see switchloop_target.py).

    .venv/bin/python -m tests.fuzz.fuzz_switchloop -atheris_runs=100000 -max_len=600 [corpus_dir]

Coverage feedback comes from the Python oracle and harness only.
"""

from __future__ import annotations

import sys


def main() -> None:
    import atheris

    with atheris.instrument_imports(include=["tests.fuzz.switchloop_target", "daemons.switch.core"]):
        from tests.fuzz.switchloop_target import hostile_input, one_input

    def both(data: bytes) -> None:
        one_input(data)
        hostile_input(data)

    atheris.Setup(sys.argv, both)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
