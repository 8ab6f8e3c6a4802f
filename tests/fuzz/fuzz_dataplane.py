"""atheris harness for gsnd's compiled data plane (see dataplane_target.py).

    .venv/bin/python -m tests.fuzz.fuzz_dataplane -atheris_runs=1000000 [corpus_dir]

Coverage feedback comes from the Python oracles and the harness only.
"""

from __future__ import annotations

from tests.fuzz.harness import run


def main() -> None:
    run("tests.fuzz.dataplane_target", ["daemons.link.reassembly", "daemons.wire.ether"])


if __name__ == "__main__":
    main()
