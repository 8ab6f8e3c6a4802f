"""The shipped units (ExecStart pointed at this install): systemd-analyze verify accepts them,
every one carries the common hardening, and systemd-analyze security rates each exposure <= 2.5."""

import json
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[2] / "systemd"
INSTANCES = [("gsnd@.service", "gsnd@gsn0.service"), ("harpd.service", "harpd.service"), ("stpd.service", "stpd.service"),
             ("pktwayd@.service", "pktwayd@rab.service"), ("gsn-switch.service", "gsn-switch.service"),
             ("ib-sm.service", "ib-sm.service"), ("ib-switch@.service", "ib-switch@a.service"),
             ("ipoibd@.service", "ipoibd@ib0.service"),
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
BIN = Path(sys.executable).parent


def reload_argv(unit: str, **subst: str) -> list[str]:
    """The unit's ExecReload= as systemd would run it: ${MAINPID} and the socket path
    substituted, the program taken from this install."""
    (reload,) = directives(unit)["ExecReload"]
    argv = shlex.split(reload)
    assert argv[0] == "/usr/local/bin/gsnctl", unit  # gsnctl install-units points it at the install
    argv[0] = str(BIN / "gsnctl")
    return [subst.get(w, w.replace("${MAINPID}", subst.get("MAINPID", "${MAINPID}"))) for w in argv]


@pytest.mark.parametrize("unit", [u for u, _ in INSTANCES if "--pid" in directives(u)["ExecReload"][0]])
def test_reload_by_pid_needs_no_kill_binary(unit):
    """gsnctl reload --pid sends SIGHUP itself: run with an empty environment (no PATH, no kill(1))."""
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        subprocess.run(reload_argv(unit, MAINPID=str(child.pid)), env={}, check=True, timeout=30)
        assert child.stdout.readline().strip() == "hup"
        assert child.wait(10) == 0
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("unit", [u for u, _ in INSTANCES if "--pid" not in directives(u)["ExecReload"][0]])
def test_reload_by_control_socket_waits_for_the_daemon(unit, tmp_path):
    """gsnctl -s SOCK reload asks a running daemon (here pktway-san: every control socket answers
    "reload" alike) and returns once it reloaded; the daemon logs one line acknowledging it."""
    (reload,) = directives(unit)["ExecReload"]
    sock_path = next(w for w in shlex.split(reload) if w.startswith("/run/"))
    ctl = tmp_path / "ctl.sock"
    log = open(tmp_path / "log", "w+")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # a free UDP port for its listen address
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    daemon = subprocess.Popen([str(BIN / "pktway-san"), "--listen", f"127.0.0.1:{port}", "--port", "1=127.0.0.1:9",
                               "--control", str(ctl)], stderr=log)
    try:
        deadline = time.monotonic() + 20
        while not ctl.exists():
            assert daemon.poll() is None and time.monotonic() < deadline, (tmp_path / "log").read_text()
            time.sleep(0.05)
        r = subprocess.run(reload_argv(unit, **{sock_path: str(ctl)}), env={}, capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 0, r.stderr
        assert r.stdout == "reloaded: log level info (from pktway-san)\n"
        lines = [json.loads(x) for x in (tmp_path / "log").read_text().splitlines()]
        assert [x["event"] for x in lines].count("reload.done") == 1
    finally:
        daemon.terminate()
        daemon.wait(10)
        log.close()
