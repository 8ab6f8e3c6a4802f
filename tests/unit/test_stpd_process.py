"""stpd as a process: a second stpd must not steal a live daemon's API socket."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from stpd.client import StClient

BIN = Path(sys.executable).parent


def start(tmp, api):
    return subprocess.Popen([str(BIN / "stpd"), "--ulp", str(tmp / "no-gsnd.ulp"), "--api", str(api),
                             "--harpd-socket", str(tmp / "no-harpd.sock")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_api(api, timeout=20):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with StClient(str(api)) as st:
                return st.status()
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"no stpd answers on {api}")


def test_second_stpd_refuses_a_live_socket_and_replaces_a_stale_one(tmp_path):
    api = tmp_path / "api.sock"
    first = start(tmp_path, api)
    try:
        wait_api(api)
        with StClient(str(api)) as st:
            st.listen(77)  # state that only the first daemon has (while this client stays)
            second = start(tmp_path, api)
            out, err = second.communicate(timeout=30)
            assert second.returncode != 0
            lines = [ln for ln in err.splitlines() if ln.strip()]
            assert len(lines) == 1 and "address already in use" in lines[0].lower() and "already running" in lines[0], err
            assert 77 in wait_api(api)["listeners"]  # the first one still owns the socket
    finally:
        first.send_signal(signal.SIGKILL)  # leaves its socket file behind: stale
        first.wait(10)
    assert api.exists()
    third = start(tmp_path, api)
    try:
        assert wait_api(api)["listeners"] == []
    finally:
        third.terminate()
        third.wait(10)


def test_stpd_leaves_a_non_socket_alone(tmp_path):
    api = tmp_path / "api.sock"
    api.write_text("not a socket")
    proc = start(tmp_path, api)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode != 0 and "is not a socket" in err and len(err.strip().splitlines()) == 1
    assert api.read_text() == "not a socket"


def test_in_process_second_claim_is_refused(tmp_path):
    from stpd.daemon import claim_api_path

    path = str(tmp_path / "a.sock")
    first = claim_api_path(path)
    try:
        try:
            claim_api_path(path)
        except OSError as exc:
            assert "already running" in str(exc)
        else:
            raise AssertionError("second claim succeeded")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        probe.connect(path)  # still the first one's
        probe.close()
    finally:
        first.close()
    os.unlink(path)
