"""atheris harness for the decoder of gsn-switch's compiled data path (SwitchPlane.rx and
flush on hostile datagrams from a UDP socket; see switchrx_target.py).

    .venv/bin/python -m tests.fuzz.fuzz_switchrx -atheris_runs=1000000 -max_len=600 [corpus_dir]

Coverage feedback comes from the Python harness and codec (the attacker's datagrams).
"""

from __future__ import annotations

import sys


def main() -> None:
    import atheris

    with atheris.instrument_imports(include=["tests.fuzz.switchrx_target", "fuzz", "daemons.wire", "daemons.link"]):
        import fuzz.frames  # noqa: F401  (imported here so that they are instrumented)
        import fuzz.targets_cores  # noqa: F401
        from tests.fuzz.switchrx_target import one_input

    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
