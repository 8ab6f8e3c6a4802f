"""systemd-analyze verify accepts the shipped units (ExecStart pointed at this install)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[2] / "systemd"


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed")
@pytest.mark.parametrize("unit,instance", [("gsnd@.service", "gsnd@gsn0.service"), ("harpd.service", "harpd.service"), ("stpd.service", "stpd.service"), ("pktwayd@.service", "pktwayd@rab.service"),
                                           ("gsn-switch.service", "gsn-switch.service")])
def test_units_verify(tmp_path, unit, instance):
    text = (UNITS / unit).read_text()
    assert "Type=notify" in text and "ProtectSystem=strict" in text and "RuntimeDirectory=" in text
    bindir = Path(sys.executable).parent
    text = text.replace("/usr/local/bin/", f"{bindir}/")
    (tmp_path / instance).write_text(text)
    r = subprocess.run(["systemd-analyze", "verify", str(tmp_path / instance)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "Unknown" not in r.stderr and "Invalid" not in r.stderr, r.stderr
