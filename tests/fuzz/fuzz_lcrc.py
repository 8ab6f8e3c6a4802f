"""atheris harness for the link's receive check lcrc_scan, differential against the
pure-Python LCRC and block CRC (see lcrc_target.py).

    .venv/bin/python -m tests.fuzz.fuzz_lcrc -atheris_runs=1000000 -max_len=64 [corpus_dir]

Coverage feedback comes from the target and its oracle only.
"""

from __future__ import annotations

from tests.fuzz.harness import run


def main() -> None:
    run("tests.fuzz.lcrc_target", ["daemons.wire.micropacket"])


if __name__ == "__main__":
    main()
