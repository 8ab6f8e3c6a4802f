"""Man pages generated from one source each: the click definitions of every daemon (8) and
command-line tool (1), and the commented example configuration files in etc/ (5).

``python -m daemons.manpages DIR`` writes DIR/man1, DIR/man5 and DIR/man8; the pages in
the repository's man/ are made so (tests/unit/test_manpages.py keeps them current), and the
wheel installs them under share/man.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import click

from .runtime.cliutil import installed_version

# console script -> (section, "module:attribute")
PROGRAMS = {
    "gsnd": (8, "daemons.gsnd.cli:main"),
    "gsn-switch": (8, "daemons.switch.cli:main"),
    "harpd": (8, "harpd.cli:harpd_main"),
    "stpd": (8, "stpd.cli:stpd_main"),
    "pktwayd": (8, "pktwayd.cli:pktwayd_main"),
    "pktway-san": (8, "pktwayd.sanswitch:main"),
    "ib-sm": (8, "ib.cli:sm_main"),
    "ib-switch": (8, "ib.cli:switch_main"),
    "ipoibd": (8, "ib.cli:ipoibd_main"),
    "snetd": (8, "servernet.noded:main"),
    "snet-router": (8, "servernet.routerd:main"),
    "gsnctl": (1, "daemons.gsnctl:main"),
    "gsnarp": (1, "harpd.cli:gsnarp_main"),
    "stp": (1, "stpd.cli:stp_main"),
    "pktway": (1, "pktwayd.cli:pktway_main"),
    "ibctl": (1, "ib.cli:ibctl_main"),
    "snetctl": (1, "servernet.ctl:main"),
}
# configuration file -> (what reads it, where the units expect it)
CONFIGS = {
    "gsnd.toml": ("gsnd", "/etc/gsn/gsnd-IFACE.toml (gsnd@IFACE.service)"),
    "gsn-switch.toml": ("gsn-switch", "/etc/gsn/gsn-switch.toml"),
    "harpd.options": ("harpd", "/etc/gsn/harpd.options"),
    "pktwayd.toml": ("pktwayd", "/etc/gsn/pktwayd-NAME.toml (pktwayd@NAME.service)"),
}
SOURCE = "gsn-revival"


def esc(text: str) -> str:
    """roff-safe text: backslashes and hyphens escaped, no line starting with a control character."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join("\\&" + line if line.startswith((".", "'")) else line for line in text.split("\n"))


def _paragraphs(help_text: str) -> list[str]:
    """click's help: paragraphs; one starting with \\b is kept as written (a literal block)."""
    out = []
    for para in re.split(r"\n\s*\n", help_text.strip()):
        lines = para.split("\n")
        if lines[0].strip() == "\b":
            body = "\n".join(lines[1:])
            out.append(".PP\n.nf\n" + esc(_dedent(body)) + "\n.fi")
        else:
            out.append(".PP\n" + esc(" ".join(line.strip() for line in lines)))
    return out


def _dedent(text: str) -> str:
    lines = text.split("\n")
    indent = min((len(x) - len(x.lstrip()) for x in lines if x.strip()), default=0)
    return "\n".join(x[indent:] for x in lines)


def _options(cmd: click.Command, ctx: click.Context) -> list[str]:
    out = []
    for param in cmd.get_params(ctx):
        if isinstance(param, click.Argument):  # named in the synopsis
            continue
        rec = param.get_help_record(ctx)
        if rec is None:
            continue
        names, text = rec
        out.append(".TP\n" + "\\fB" + esc(names) + "\\fR\n" + esc(text or ""))
    return out


def _usage(cmd: click.Command, ctx: click.Context) -> str:
    return " ".join(cmd.collect_usage_pieces(ctx))


def command_page(prog: str, section: int, cmd: click.Command) -> str:
    ctx = click.Context(cmd, info_name=prog, **cmd.context_settings)  # -h as well as --help, as when run
    help_text = cmd.help or ""
    first = help_text.strip().split("\n")[0].rstrip(".")
    lines = [f'.TH "{prog.upper()}" "{section}" "" "{SOURCE} {installed_version()}" '
             f'"{"System Manager" if section == 8 else "User Commands"}\'s Manual"',
             ".SH NAME", f"{esc(prog)} \\- {esc(first)}",
             ".SH SYNOPSIS", f"\\fB{esc(prog)}\\fR {esc(_usage(cmd, ctx))}",
             ".SH DESCRIPTION", *_paragraphs(help_text)]
    options = _options(cmd, ctx)
    if options:
        lines += [".SH OPTIONS", *options]
    if isinstance(cmd, click.Group):
        lines.append(".SH COMMANDS")
        for name, sub in sorted(cmd.commands.items()):
            sctx = click.Context(sub, info_name=name, parent=ctx)
            lines += [f".SS \\fB{esc(prog)} {esc(name)}\\fR {esc(_usage(sub, sctx))}", *_paragraphs(sub.help or ""),
                      *_options(sub, sctx)]
    configs = [f for f, (reader, _where) in CONFIGS.items() if reader == prog]
    if configs:
        lines += [".SH FILES", *(f".TP\n{esc(CONFIGS[f][1])}\nsee \\fB{esc(f)}\\fR(5)" for f in configs)]
    lines += [".SH SHELL COMPLETION",
              f".PP\nbash: \\fBeval \"$(_{_env(prog)}_COMPLETE=bash_source {esc(prog)})\"\\fR in ~/.bashrc; "
              f"zsh: \\fBzsh_source\\fR; fish: \\fB_{_env(prog)}_COMPLETE=fish_source {esc(prog)} | source\\fR.",
              ".SH SEE ALSO", ", ".join(f"\\fB{esc(p)}\\fR({s})" for p, (s, _m) in sorted(PROGRAMS.items())
                                        if p != prog)]
    return "\n".join(lines) + "\n"


def _env(prog: str) -> str:
    return prog.replace("-", "_").upper()


def config_page(name: str, text: str) -> str:
    reader, where = CONFIGS[name]
    fmt = "IRIX\\-style option lines" if name.endswith(".options") else "TOML"
    return "\n".join([
        f'.TH "{name.upper()}" "5" "" "{SOURCE} {installed_version()}" "File Formats Manual"',
        ".SH NAME", f"{esc(name)} \\- configuration of {esc(reader)}",
        ".SH SYNOPSIS", esc(where),
        ".SH DESCRIPTION",
        f".PP\n{fmt}, read by \\fB{esc(reader)}\\fR(8) at start and checked with \\fB{esc(reader)} \\-\\-check\\fR. "
        f"A bad file or value is reported in one line naming the file, the line or key and the problem; the "
        f"daemon then exits with status 78. A reload (\\fBsystemctl reload\\fR, SIGHUP) re-reads the log level.",
        ".PP\nThe shipped example below is the reference: every key, its default and its meaning, as comments.",
        ".SH EXAMPLE", ".nf", esc(text.rstrip("\n")), ".fi",
        ".SH SEE ALSO", f"\\fB{esc(reader)}\\fR(8), \\fBgsnctl\\fR(1)"]) + "\n"


def load(spec: str) -> click.Command:
    module, attr = spec.split(":")
    return getattr(importlib.import_module(module), attr)


def generate(out: Path, etc: Path) -> list[Path]:
    written = []
    for prog, (section, spec) in PROGRAMS.items():
        path = out / f"man{section}" / f"{prog}.{section}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(command_page(prog, section, load(spec)))
        written.append(path)
    for name in CONFIGS:
        path = out / "man5" / f"{name}.5"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(config_page(name, (etc / name).read_text()))
        written.append(path)
    return written


if __name__ == "__main__":  # pragma: no cover
    root = Path(__file__).resolve().parents[1]
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else root / "man"
    for p in generate(target, root / "etc"):
        print(p)
