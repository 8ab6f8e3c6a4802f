"""Packaging that installs like a system service: `gsnctl install-units` puts the units
(ExecStart= at this installation's scripts), the sysusers file and the example configs
where systemd looks, never over an edited config; the wheel carries units, sysusers file,
configs, the networkd example and the man pages."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from daemons.install import InstallError, install

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
UNITS = sorted(p.name for p in (ROOT / "systemd").glob("*.service"))


def gsnctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "gsnctl"), *args], capture_output=True, text=True, timeout=60)


def test_install_units_into_a_root(tmp_path):
    r = gsnctl("install-units", "--root", str(tmp_path), "--network")
    assert r.returncode == 0, r.stderr
    for unit in UNITS:
        text = (tmp_path / "etc/systemd/system" / unit).read_text()
        assert "/usr/local/bin" not in text
        for line in text.splitlines():
            if line.startswith(("ExecStart=", "ExecReload=")):
                prog = Path(line.split("=", 1)[1].split()[0])
                assert prog.parent == BIN.resolve() and prog.exists(), line
    assert (tmp_path / "etc/sysusers.d/gsn.conf").read_text() == (ROOT / "systemd/gsn.sysusers.conf").read_text()
    for dest, src in {"gsnd-gsn0.toml": "gsnd.toml", "gsn-switch.toml": "gsn-switch.toml",
                      "harpd.options": "harpd.options", "pktwayd-rab.toml": "pktwayd.toml"}.items():
        assert (tmp_path / "etc/gsn" / dest).read_text() == (ROOT / "etc" / src).read_text()
    assert (tmp_path / "etc/systemd/network/50-gsn0.network").exists()
    assert r.stdout.count("installed ") == len(UNITS) + 1 + 4 + 1


def test_reinstall_keeps_edited_configs(tmp_path):
    install(tmp_path)
    cfg = tmp_path / "etc/gsn/gsnd-gsn0.toml"
    cfg.write_text("# mine\n")
    unit = tmp_path / "etc/systemd/system/gsnd@.service"
    unit.write_text("stale")
    done = dict((p, what) for p, what in install(tmp_path))
    assert done[cfg] == "kept" and cfg.read_text() == "# mine\n"
    assert done[unit] == "installed" and "ExecStart=" in unit.read_text()


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed")
def test_installed_units_verify(tmp_path):
    install(tmp_path)
    for unit in UNITS:
        path = tmp_path / "etc/systemd/system" / unit
        if unit.endswith("@.service"):
            path = path.rename(path.with_name(unit.replace("@", "@gsn0")))
        r = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True)
        assert r.returncode == 0 and "Unknown" not in r.stderr, r.stderr


def test_scripts_under_home_are_refused(tmp_path):
    r = gsnctl("install-units", "--root", str(tmp_path), "--bin-dir", "/root/venv/bin")
    assert r.returncode == 1
    assert r.stderr.startswith("Error: /root/venv/bin: the units' ProtectHome=yes hides this directory")
    with pytest.raises(InstallError, match="no gsnd there"):
        install(tmp_path, bin_dir=tmp_path)


def test_networkd_example_leaves_mac_and_mtu_to_gsnd():
    ini = configparser.ConfigParser(strict=True, inline_comment_prefixes=("#",))
    ini.optionxform = str
    ini.read_string((ROOT / "etc/systemd-networkd/gsn0.network").read_text())
    assert ini["Match"]["Name"] == "gsn0"
    assert "MTUBytes" not in ini["Link"] and "MACAddress" not in ini["Link"]
    assert ini["Network"]["ConfigureWithoutCarrier"] == "yes" and ini["Network"]["Address"] == "192.0.2.1/24"


def test_wheel_carries_units_configs_and_man_pages(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    (whl,) = tmp_path.glob("gsn_revival-*.whl")
    names = set(zipfile.ZipFile(whl).namelist())
    data = "gsn_revival-0.1.0.data/data/share/"
    expected = {f"{data}gsn-revival/systemd/{p.name}" for p in (ROOT / "systemd").iterdir()
                if p.suffix in (".service", ".conf")}  # not nspawn-check.sh, a tool of the checkout
    expected |= {f"{data}gsn-revival/etc/{p.relative_to(ROOT / 'etc')}" for p in (ROOT / "etc").rglob("*")
                 if p.is_file()}
    expected |= {f"{data}man/{p.relative_to(ROOT / 'man')}" for p in (ROOT / "man").rglob("*.[158]")}
    assert expected <= names, sorted(expected - names)
