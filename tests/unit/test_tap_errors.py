"""gsnd names the real reason it cannot get its TAP: /dev/net/tun's mode and owner, or
the missing CAP_NET_ADMIN (run as an unprivileged user against real tun device nodes)."""

from __future__ import annotations

import encodings.idna  # noqa: F401  (gsnd resolves its addresses; the child cannot read the stdlib)
import os
import socket
import stat
import sys
import tempfile

import pytest

from daemons.gsnd import daemon as _gsnd_daemon  # noqa: F401  (main imports it late: see _run_main)
from daemons.gsnd.cli import main as gsnd_main
from daemons.io.tap import Tap
from tests.asuser import NOBODY, as_user, shared_dir

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/net/tun"),
                                reason="needs root (mknod, another uid) and the tun driver")
TUN = os.makedev(10, 200)  # /dev/net/tun's device number


def _open(device: str) -> str:
    try:
        Tap("gsnerr0", device=device)
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "opened"


def test_device_mode_is_named_not_the_capability():
    with shared_dir() as d:
        dev = d / "tun"
        os.mknod(dev, 0o600 | stat.S_IFCHR, TUN)
        os.chmod(dev, 0o600)
        out = as_user(lambda: _open(str(dev)))
    assert out.startswith("PermissionError: ")
    assert f"{dev}: mode 0600 owner 0:0 does not let uid {NOBODY} gid {NOBODY} read and write it" in out
    assert "CAP_NET_ADMIN does not override file permissions" in out


def test_missing_capability_is_named():
    with shared_dir() as d:
        dev = d / "tun"
        os.mknod(dev, 0o666 | stat.S_IFCHR, TUN)
        os.chmod(dev, 0o666)  # opening works: TUNSETIFF is what needs the capability
        out = as_user(lambda: _open(str(dev)))
    assert out == (f"PermissionError: TAP gsnerr0: creating or attaching it needs CAP_NET_ADMIN, which this "
                   f"process (uid {NOBODY} gid {NOBODY}) lacks: run as root or with AmbientCapabilities=CAP_NET_ADMIN")


def test_missing_device_is_named(tmp_path):
    assert _open(str(tmp_path / "nope")) == f"FileNotFoundError: {tmp_path / 'nope'}: no such device (load the tun " \
                                             f"module: modprobe tun)"


def test_gsnd_prints_the_cause_in_one_line():
    """The daemon's own exit: one line naming the cause Tap finds for the real /dev/net/tun
    (its mode, or the missing capability), exit 77, as the unprivileged user."""
    cause = as_user(lambda: _open("/dev/net/tun").replace("gsnerr0", "gsnerr1"))
    assert cause.startswith("PermissionError: ") and ("mode 0" in cause or "CAP_NET_ADMIN, which" in cause)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with shared_dir() as d:
        argv = ["gsnd", "--peer", "127.0.0.1:9", "--local", f"127.0.0.1:{port}", "--ula", "02:00:00:00:00:01",
                "--runtime-dir", str(d), "--tap", "gsnerr1"]
        code, stderr = as_user(lambda: _run_main(argv), timeout=60)
    assert code == 77, stderr
    errors = [line for line in stderr.splitlines() if not line.startswith("{")]  # JSON log lines aside
    assert errors == ["error: " + cause.removeprefix("PermissionError: ")]


def _run_main(argv: list[str]) -> tuple[int, str]:
    """gsnd's main() in this (forked, unprivileged) process: its exit status and stderr.
    Forked rather than exec'd: the checkout may sit in a directory (mktemp -d: 0700)
    and the interpreter's stdlib under /root, neither of which the other user can read,
    so what main() imports late is imported by this module, as root."""
    with tempfile.TemporaryFile() as out:
        os.dup2(out.fileno(), 2)
        sys.stderr = open(2, "w", closefd=False)
        sys.argv = argv
        try:
            gsnd_main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        sys.stderr.flush()
        out.seek(0)
        return code, out.read().decode(errors="replace")
