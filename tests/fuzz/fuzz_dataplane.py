"""atheris harness for gsnd's compiled data plane (see dataplane_target.py).

    .venv/bin/python -m tests.fuzz.fuzz_dataplane -atheris_runs=1000000 [corpus_dir]

Coverage feedback comes from the Python oracles and the harness only.
"""

from __future__ import annotations

import sys


def main() -> None:
    import atheris

    with atheris.instrument_imports(include=["tests.fuzz.dataplane_target", "daemons.link.reassembly",
                                             "daemons.wire.ether"]):
        from tests.fuzz.dataplane_target import one_input
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
