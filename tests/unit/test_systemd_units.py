"""The shipped units (ExecStart pointed at this install): systemd-analyze verify accepts them,
every one carries the common hardening, and systemd-analyze security rates each exposure <= 2.5."""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[2] / "systemd"
INSTANCES = [("gsnd@.service", "gsnd@gsn0.service"), ("harpd.service", "harpd.service"), ("stpd.service", "stpd.service"),
             ("pktwayd@.service", "pktwayd@rab.service"), ("gsn-switch.service", "gsn-switch.service"),
             ("snetd@.service", "snetd@a.service"), ("snet-router@.service", "snet-router@x.service")]
MAX_EXPOSURE = 2.5
needs_analyze = pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed")


def installed(tmp_path: Path, unit: str, instance: str) -> Path:
    text = (UNITS / unit).read_text().replace("/usr/local/bin/", f"{Path(sys.executable).parent}/")
    (tmp_path / instance).write_text(text)
    return tmp_path / instance


def directives(unit: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in (UNITS / unit).read_text().splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";", "[")):
            key, value = line.split("=", 1)
            out.setdefault(key.strip(), []).append(value.strip())
    return out


@needs_analyze
@pytest.mark.parametrize("unit,instance", INSTANCES)
def test_units_verify(tmp_path, unit, instance):
    text = (UNITS / unit).read_text()
    assert "Type=notify" in text and "ProtectSystem=strict" in text and "RuntimeDirectory=" in text
    r = subprocess.run(["systemd-analyze", "verify", str(installed(tmp_path, unit, instance))], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert "Unknown" not in r.stderr and "Invalid" not in r.stderr, r.stderr


@pytest.mark.parametrize("unit,instance", INSTANCES)
def test_units_common_hardening(unit, instance):
    d = directives(unit)
    for key, value in {"UMask": "0077", "ProtectClock": "yes", "ProtectKernelLogs": "yes", "ProtectHostname": "yes",
                       "RestrictRealtime": "yes", "RestrictSUIDSGID": "yes", "ProtectProc": "invisible",
                       "NoNewPrivileges": "yes", "MemoryDenyWriteExecute": "yes", "RemoveIPC": "yes",
                       "SystemCallErrorNumber": "EPERM", "NotifyAccess": "main"}.items():
        assert d.get(key) == [value], f"{unit}: {key}={d.get(key)}"
    assert d["SystemCallFilter"] == ["@system-service", "~@privileged @resources"], unit
    assert re.fullmatch(r"\d+s", d["WatchdogSec"][0]), unit  # the daemons ping at half of it
    caps = d["CapabilityBoundingSet"][0].split()
    assert caps in ([], ["CAP_NET_ADMIN"]), unit
    if caps:  # a capability over the host's network: no private user namespace
        assert d.get("AmbientCapabilities") == ["CAP_NET_ADMIN"] and "PrivateUsers" not in d, unit
    else:
        assert d.get("PrivateUsers") == ["yes"] and "AmbientCapabilities" not in d, unit
    families = set(d["RestrictAddressFamilies"][0].split())
    if not families & {"AF_INET", "AF_INET6"}:  # no IP socket at all: deny every IP address too
        assert d.get("IPAddressDeny") == ["any"], unit


def exposure(path: Path) -> float:
    r = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager", str(path)], capture_output=True,
                       text=True)
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", r.stdout + r.stderr)
    assert m, r.stdout + r.stderr
    return float(m.group(1))


@needs_analyze
@pytest.mark.parametrize("unit,instance", INSTANCES)
def test_units_exposure(tmp_path, unit, instance):
    r = subprocess.run(["systemd-analyze", "security", "--help"], capture_output=True, text=True)
    if "--offline" not in r.stdout:
        pytest.skip("systemd-analyze security has no --offline (systemd < 250)")
    level = exposure(installed(tmp_path, unit, instance))
    assert level <= MAX_EXPOSURE, f"{instance}: exposure {level} > {MAX_EXPOSURE}"


CHILD = """
import signal, sys
signal.signal(signal.SIGHUP, lambda *a: (print("hup", flush=True), sys.exit(0)))
print("ready", flush=True)
signal.pause()
"""


@pytest.mark.parametrize("unit", [u for u, _ in INSTANCES if "ExecReload" in directives(u)])
def test_reload_needs_no_kill_binary(unit):
    """ExecReload= (gsnd's) delivers SIGHUP to $MAINPID with the shell's builtin kill: run as
    systemd would (${MAINPID} substituted), with an empty environment (no PATH: no kill(1))."""
    (reload,) = directives(unit)["ExecReload"]
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        argv = [w.replace("${MAINPID}", str(child.pid)) for w in shlex.split(reload)]
        assert argv[0] == "/bin/sh" and os.path.exists(argv[0])
        subprocess.run(argv, env={}, check=True, timeout=10)
        assert child.stdout.readline().strip() == "hup"
        assert child.wait(10) == 0
    finally:
        child.kill()
        child.wait()
