"""harpd and gsnarp command lines."""

from __future__ import annotations

import sys

import click

from daemons.runtime import daemon, log as logsetup
from daemons.runtime.config import ConfigError, fail
from daemons.runtime.cliutil import reach_daemon, version_option
from daemons.runtime.control import request

from . import options as hoptions

CTX = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.command(context_settings=CTX)
@click.option("-f", "--options", "options_path", default="/etc/gsn/harpd.options", show_default=True,
              type=click.Path(dir_okay=False), help="IRIX-style harpd.options (see etc/harpd.options).")
@click.option("--runtime-dir", default="/run/harpd", show_default=True, help="Where control.sock lives.")
@click.option("--state-dir", default="/var/lib/harpd", show_default=True,
              help="Where static entries added with gsnarp -s are kept across restarts.")
@click.option("--gsnd-runtime", default="/run/gsnd", show_default=True, help="gsnd's runtime dir (IFACE.ulp).")
@click.option("--timer-scale", type=float, default=1.0, show_default=True,
              help="Multiply every HARP timer (e.g. 0.01 for a test fabric).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info")
@click.option("--check", is_flag=True, help="Validate harpd.options and exit.")
@version_option
def harpd_main(options_path, runtime_dir, state_dir, gsnd_runtime, timer_scale, log_level, check) -> None:
    """HARP daemon (RFC 2835): address resolution for IP on GSN interfaces.

    On every host harpd is a HARP client: it detects whether the fabric
    broadcasts, registers with the LIS's HARP servers (every 15 minutes), and
    answers the kernel's neighbour requests for gsnN through them. Where
    configured (or self-detected) it is also the LIS's server: registrations,
    20-minute expiry, NAK for unknown addresses, static entries. Inspect and edit
    the table with gsnarp. Exit status 78 means a bad harpd.options.
    """
    try:
        opts = hoptions.load(options_path)
        if timer_scale != 1.0:
            opts.timers = opts.timers.scaled(timer_scale)
    except ConfigError as exc:
        fail(exc)
    if check:
        click.echo(f"{options_path}: ok")
        return
    logsetup.setup(log_level)
    from .daemon import Harpd

    async def _main(nursery):
        await nursery.start(Harpd(opts, runtime_dir=runtime_dir, state_dir=state_dir,
                                  gsnd_runtime=gsnd_runtime).run)

    daemon.run(_main)


def _ask(sock: str, req: dict) -> dict:
    reply = reach_daemon("gsnarp", sock, "harpd", lambda: request(sock, req))
    if not reply.get("ok"):
        click.echo(f"gsnarp: {reply.get('error', 'failed')}", err=True)
        sys.exit(reply.get("code", 1))
    return reply


@click.command(context_settings=CTX)
@click.option("-a", "show_all", is_flag=True, help="List every entry: IP, ULA, LIS, static/dynamic, age.")
@click.option("-s", "set_entry", nargs=2, metavar="IP ULA", help="Add a static entry (kept across restarts).")
@click.option("-d", "delete_ip", metavar="IP", help="Delete an entry.")
@click.option("-f", "file", type=click.File(), help="Add static entries from FILE: 'IP ULA' or "
              "'static IFACE IP ULA' per line, # comments.")
@click.option("-i", "--interface", help="Limit -s/-d to this interface.")
@click.option("--socket", "sock", default="/run/harpd/control.sock", show_default=True)
@version_option
def gsnarp_main(show_all, set_entry, delete_ip, file, interface, sock) -> None:
    """Inspect and edit the HARP table (like arp(8), for GSN).

    \b
    gsnarp -a                          list all entries
    gsnarp -s 192.0.2.30 02:47:53:00:07:00   add a static entry
    gsnarp -d 192.0.2.30               delete an entry
    gsnarp -f entries.txt              add static entries from a file
    Exit status: 0 ok, 1 no such entry or refused, 2 usage, 69 harpd not running.
    """
    if not (show_all or set_entry or delete_ip or file):
        show_all = True
    if set_entry:
        _ask(sock, {"cmd": "set", "ip": set_entry[0], "ula": set_entry[1], "interface": interface})
    if delete_ip:
        _ask(sock, {"cmd": "delete", "ip": delete_ip, "interface": interface})
    if file:
        for n, line in enumerate(file, 1):
            w = line.split("#", 1)[0].split()
            if not w:
                continue
            if len(w) == 4 and w[0] == "static":
                iface, ip, ula = w[1:]
            elif len(w) == 2:
                iface, (ip, ula) = interface, w
            else:
                click.echo(f"gsnarp: {file.name}:{n}: expected 'IP ULA' or 'static IFACE IP ULA'", err=True)
                sys.exit(1)
            _ask(sock, {"cmd": "set", "ip": ip, "ula": ula, "interface": iface})
    if show_all:
        rows = _ask(sock, {"cmd": "table"})["table"]
        click.echo(f"{'IP address':<16} {'ULA':<18} {'LIS':<18} {'type':<8} {'age':>7}  iface")
        for r in rows:
            age = "-" if r["age"] is None else f"{r['age']:.0f}s"
            click.echo(f"{r['ip']:<16} {r['ula']:<18} {r['lis']:<18} {r['kind']:<8} {age:>7}  {r['interface']}")
