"""`gsnctl install-units`: put the shipped systemd units, the sysusers file, the example
configurations (and optionally the systemd-networkd example) where systemd looks.

The files come from the installed package's data (``<prefix>/share/gsn-revival``, which the
wheel carries) or, for a checkout installed with ``pip install -e``, from the checkout itself.
The units name ``/usr/local/bin/PROG``; that is rewritten to the directory that really holds
the console scripts (a venv's bin/), so one set of units serves both layouts.  Existing
configuration files are never overwritten; units and the sysusers file are (they are ours).
``--root`` stages everything under another directory (packaging: DESTDIR).
"""

from __future__ import annotations

import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

DATA = "share/gsn-revival"  # under the installation prefix (pyproject data-files)
TEMPLATE_BIN = "/usr/local/bin/"
# Unit sandboxing hides these trees from the daemons (ProtectHome=yes): scripts there cannot run.
HIDDEN = ("/home/", "/root/", "/run/user/")


class InstallError(Exception):
    """One line for the operator."""


@dataclass
class Layout:
    unit_dir: Path = Path("/etc/systemd/system")
    sysusers_dir: Path = Path("/etc/sysusers.d")
    config_dir: Path = Path("/etc/gsn")
    network_dir: Path = Path("/etc/systemd/network")


def data_dir() -> Path:
    """Where the shipped systemd/ and etc/ are: the installed data, else the checkout."""
    for base in (Path(sys.prefix) / DATA, Path(__file__).resolve().parents[1]):
        if (base / "systemd" / "gsnd@.service").exists() and (base / "etc" / "gsnd.toml").exists():
            return base
    raise InstallError(f"no shipped units found (looked in {Path(sys.prefix) / DATA} and the source checkout)")


def scripts_dir() -> Path:
    return Path(sysconfig.get_path("scripts"))


def install(root: Path = Path("/"), layout: Layout = Layout(), bin_dir: Path | None = None,
            network: bool = False) -> list[tuple[Path, str]]:
    """Copy the files; returns [(path, "installed" | "kept")]."""
    bin_dir = (bin_dir or scripts_dir()).resolve()
    if any(str(bin_dir).startswith(h) for h in HIDDEN):
        raise InstallError(f"{bin_dir}: the units' ProtectHome=yes hides this directory from the daemons; install "
                           f"gsn-revival system-wide or into a venv outside /home and /root (e.g. /opt/gsn-revival)")
    if not (bin_dir / "gsnd").exists():
        raise InstallError(f"{bin_dir}: no gsnd there (--bin-dir names the directory holding the console scripts)")
    src = data_dir()
    done: list[tuple[Path, str]] = []

    def put(dest: Path, text: str, overwrite: bool) -> None:
        target = root / dest.relative_to("/")
        if target.exists() and not overwrite:
            done.append((target, "kept"))
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        done.append((target, "installed"))

    for unit in sorted((src / "systemd").glob("*.service")):
        text = unit.read_text().replace(TEMPLATE_BIN, f"{bin_dir}/")
        put(layout.unit_dir / unit.name, text, overwrite=True)
    put(layout.sysusers_dir / "gsn.conf", (src / "systemd" / "gsn.sysusers.conf").read_text(), overwrite=True)
    configs = {"gsnd.toml": "gsnd-gsn0.toml", "gsn-switch.toml": "gsn-switch.toml",
               "harpd.options": "harpd.options", "pktwayd.toml": "pktwayd-rab.toml"}
    for name, dest in configs.items():
        put(layout.config_dir / dest, (src / "etc" / name).read_text(), overwrite=False)
    if network:
        put(layout.network_dir / "50-gsn0.network", (src / "etc" / "systemd-networkd" / "gsn0.network").read_text(),
            overwrite=False)
    return done
