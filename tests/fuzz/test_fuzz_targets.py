"""A short deterministic run of every fuzz target (fuzz/, ``./gsn fuzz``): its seed
corpus, every saved crash reproducer (each must now be handled), and a few hundred
Hypothesis inputs.  GSN_FUZZ_TARGET_RUNS sets the number (default 300)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz.draw import Draw
from fuzz.registry import load

ROOT = Path(__file__).resolve().parents[2]
TARGETS = load()
RUNS = int(os.environ.get("GSN_FUZZ_TARGET_RUNS", "300"))
CRASHES = sorted((ROOT / "fuzz" / "crashes").glob("*.bin"))


def test_every_decoder_and_handler_has_a_target():
    assert set(TARGETS) >= {
        "wire.micropacket", "wire.message", "wire.admin", "wire.shim", "wire.ulp", "harpd.wire", "stpd.wire",
        "pktwayd.eep", "pktwayd.rrp", "pktwayd.messages", "harpd.kernel", "link", "gsnd.core", "switch.core", "switch.fabric",
        "harpd.core", "stpd.core", "pktwayd.engine", "pktway-san.switch", "ulp.server", "control", "stpd.api",
        "fastpath", "wire.cableauth", "ib.packet", "ib.sm", "ib.port", "ib.switch",
        "servernet.codec", "servernet.router", "servernet.crouter", "servernet.crouter.sock", "servernet.node", "servernet.cnode",
        "servernet.cengine", "servernet.cengine.sock", "gsnd.dataplane", "switchfwd",
        "ib.fastpath", "ib.cswitch", "ib.pump", "ib.port.pump", "switchloop", "switchloop.rx", "switchloop.run",
        "pktwayd.fastpath", "pktwayd.fastburst",
        "lcrc_scan", "txfast"}


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_target(name):
    t = TARGETS[name]
    for seed in t.seeds:
        t.one_input(seed)

    @settings(max_examples=RUNS, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.binary(max_size=400))
    def run(data):
        t.one_input(data)

    run()


@pytest.mark.parametrize("path", CRASHES, ids=[p.name for p in CRASHES])
def test_saved_crashes_are_fixed(path):
    name = path.name.rsplit("-", 1)[0]
    TARGETS[name].one_input(path.read_bytes())


def test_draw_is_total():
    d = Draw(b"\x05")
    assert d.below(3) == 2 and d.int(4) == 0 and d.take(9) == b"" and d.choice("ab") == "a" and d.left == 0


def _gsn_fuzz(*args, env=None):
    return subprocess.run([sys.executable, "-m", "fuzz", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "GSN_FUZZ_SELFTEST": "1", **(env or {})})


@pytest.mark.parametrize("engine", ["random", "atheris"])
def test_runner_minimises_saves_and_replays_a_crash(engine):
    run = _gsn_fuzz("--minutes", "1", "--engine", engine, "--seed", "1", "selftest")  # stops at the crash
    assert run.returncode == 1, run.stdout + run.stderr
    saved = [ROOT / line.split()[-1] for line in run.stdout.splitlines()
             if line.strip().startswith("./gsn fuzz --replay")]
    assert saved, run.stdout
    try:
        assert saved[0].read_bytes() == b"\xde\xad"  # minimised to the two bytes that matter
        replay = _gsn_fuzz("--replay", str(saved[0]))
        assert replay.returncode == 1 and "KeyError" in replay.stderr
    finally:
        for p in saved:
            p.unlink(missing_ok=True)


def test_list_names_every_target():
    run = _gsn_fuzz("--list")
    assert run.returncode == 0 and all(name in run.stdout for name in TARGETS)


def test_control_targets_portal_is_quiet_while_idle():
    """The control target's daemons live in a trio run on a mock clock in a thread for the
    rest of the process; idle, that thread must sleep, not poll (with an autojump threshold
    of 0 it spun a core beside every later test)."""
    import resource
    import time

    TARGETS["control"].one_input(b"")

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    c0, w0 = cpu(), time.monotonic()
    time.sleep(1.0)  # the main thread sleeps: what the process spends now is the portal's
    used, wall = cpu() - c0, time.monotonic() - w0
    assert used < 0.3 * wall, f"the idle portal used {used:.2f} s of CPU in {wall:.2f} s"
