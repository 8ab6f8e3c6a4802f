"""Packaging: every console script answers --version with the installed version."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SCRIPTS = sorted(PYPROJECT["project"]["scripts"])


def test_every_cli_is_covered():
    assert SCRIPTS == sorted(["gsnd", "gsn-switch", "gsnctl", "harpd", "gsnarp", "stpd", "stp", "pktwayd", "pktway",
                              "pktway-san", "ib-sm", "ib-switch", "ipoibd", "ibctl", "snetd", "snet-router", "snetctl"])


@pytest.mark.parametrize("script", SCRIPTS)
def test_version(script):
    r = subprocess.run([str(BIN / script), "--version"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{script} {version('gsn-revival')}\n"
    assert version("gsn-revival") == PYPROJECT["project"]["version"]


def test_build_backend_understands_the_spdx_license():
    """license = "MIT" (PEP 639) is an error before setuptools 77."""
    assert PYPROJECT["project"]["license"] == "MIT"
    (req,) = PYPROJECT["build-system"]["requires"]
    name, _, minimum = req.partition(">=")
    assert name == "setuptools" and tuple(int(x) for x in minimum.split(".")) >= (77,)
