"""atheris harness for the keyed cable's open in C, differential against CableAuth
(see cableauth_target.py).

    .venv/bin/python -m tests.fuzz.fuzz_cableauth -atheris_runs=1000000 [corpus_dir]

Coverage feedback comes from the Python oracle and harness only.
"""

from __future__ import annotations

import sys


def main() -> None:
    import atheris

    with atheris.instrument_imports(include=["tests.fuzz.cableauth_target", "daemons.wire.cableauth"]):
        from tests.fuzz.cableauth_target import one_input
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
