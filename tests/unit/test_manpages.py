"""Man pages: one per daemon (8), tool (1) and configuration file (5), generated from the
click definitions and etc/; the committed man/ is what the generator makes now, and groff
renders every page without a warning."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import click
import pytest

from daemons.manpages import CONFIGS, PROGRAMS, generate, load

ROOT = Path(__file__).resolve().parents[2]


def test_every_console_script_has_a_page():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(PROGRAMS) == set(scripts)
    for prog, (_section, spec) in PROGRAMS.items():
        assert scripts[prog] == spec, prog


def test_committed_pages_are_current(tmp_path):
    """Regenerate with `python -m daemons.manpages` after changing a command line or etc/."""
    written = generate(tmp_path, ROOT / "etc")
    assert len(written) == len(PROGRAMS) + len(CONFIGS)
    committed = sorted(p.relative_to(ROOT / "man") for p in (ROOT / "man").rglob("*.[158]"))
    assert committed == sorted(p.relative_to(tmp_path) for p in written)
    for p in written:
        assert (ROOT / "man" / p.relative_to(tmp_path)).read_text() == p.read_text(), p.name


@pytest.mark.parametrize("prog", sorted(PROGRAMS))
def test_every_option_is_documented(prog):
    section, spec = PROGRAMS[prog]
    page = (ROOT / "man" / f"man{section}" / f"{prog}.{section}").read_text()
    cmds = [load(spec)]
    if isinstance(cmds[0], click.Group):
        cmds += list(cmds[0].commands.values())
        for name in cmds[0].commands:
            assert ".SS \\fB" + f"{prog} {name}".replace("-", "\\-") + "\\fR" in page
    for cmd in cmds:
        for param in cmd.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("-"):
                    assert opt.replace("-", "\\-") in page, (prog, cmd.name, opt)


@pytest.mark.skipif(not shutil.which("groff"), reason="groff not installed")
@pytest.mark.parametrize("page", sorted(p.name for p in (ROOT / "man").rglob("*.[158]")))
def test_groff_renders_without_warnings(page):
    (path,) = list((ROOT / "man").rglob(page))
    r = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", str(path)], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == "", r.stderr
