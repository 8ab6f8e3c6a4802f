"""One target under atheris (libFuzzer), coverage-guided; run by ``python -m fuzz``.

    python -m fuzz.worker TARGET [libFuzzer flags] [corpus_dir]
"""

from __future__ import annotations

import sys


def main() -> None:
    import atheris

    name, argv = sys.argv[1], [sys.argv[0], *sys.argv[2:]]
    covered = ["daemons", "harpd", "stpd", "pktwayd", "fuzz", "tests.fuzz", "tests.unit.fastpath_oracle"]
    with atheris.instrument_imports(include=covered):
        from fuzz.registry import load

        target = load()[name]
        target.one_input(b"")  # builds the target's rig (and imports) before the fuzzing starts
    atheris.Setup(argv, target.one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
