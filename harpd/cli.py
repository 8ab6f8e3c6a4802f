"""harpd and gsnarp command lines."""

from __future__ import annotations

import socket
import sys
from ipaddress import ip_address
from typing import NoReturn

import click

from daemons.runtime import daemon, log as logsetup
from daemons.runtime.config import ConfigError, fail
from daemons.runtime.cliutil import metrics_option, reach_daemon, version_option
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
@metrics_option
@click.option("--check", is_flag=True, help="Validate harpd.options and exit.")
@version_option
def harpd_main(options_path, runtime_dir, state_dir, gsnd_runtime, timer_scale, log_level, metrics, check) -> None:
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
        listen = daemon.metrics_address(metrics)
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
        harpd = Harpd(opts, runtime_dir=runtime_dir, state_dir=state_dir, gsnd_runtime=gsnd_runtime)
        await nursery.start(harpd.run)
        await daemon.start_metrics(nursery, listen, harpd)

    daemon.run(_main, daemon.level_reloader(log_level))


def _ask(sock: str, req: dict, fatal: bool = True) -> dict:
    reply = reach_daemon("gsnarp", sock, "harpd", lambda: request(sock, req))
    if not reply.get("ok") and fatal:
        click.echo(f"gsnarp: {reply.get('error', 'failed')}", err=True)
        sys.exit(reply.get("code", 1))
    return reply


def _die(msg: str, code: int = 1) -> NoReturn:
    click.echo(f"gsnarp: {msg}", err=True)
    sys.exit(code)


def lookup(host: str) -> list[str]:
    """HOST as address strings: an IPv4/IPv6 literal (``%IFACE`` scope kept) as it is,
    a name through getaddrinfo (every address, in its order, once each)."""
    text, _, scope = host.partition("%")
    try:
        ip_address(text)
        return [host]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        _die(f"{host}: unknown host ({getattr(exc, 'strerror', None) or exc})")
    out: list[str] = []
    for family, _t, _p, _c, addr in infos:
        if family in (socket.AF_INET, socket.AF_INET6) and str(addr[0]) not in out:
            out.append(str(addr[0]))
    if not out:
        _die(f"{host}: unknown host (no IPv4 or IPv6 address)")
    return out


class Names:
    """Reverse lookups for printing, once per address; none with -n."""

    def __init__(self, numeric: bool) -> None:
        self.numeric = numeric
        self.cache: dict[str, str] = {}

    def __call__(self, ip: str) -> str:
        if self.numeric:
            return ip
        if ip not in self.cache:
            sockaddr = (ip, 0) if ":" not in ip else (ip, 0, 0, 0)
            try:
                self.cache[ip] = socket.getnameinfo(sockaddr, socket.NI_NAMEREQD)[0]
            except (socket.gaierror, socket.herror, OSError):
                self.cache[ip] = ip
        return self.cache[ip]


def _same(row_ip: str, addrs: list[str]) -> bool:
    a = ip_address(row_ip)
    return any(ip_address(x.partition("%")[0]) == a for x in addrs)


def _rows(sock: str, interface: str | None) -> list[dict]:
    """harpd's table, then the kernel's neighbours on the gsn interfaces that harpd's
    table does not hold (what the kernel learnt by itself on a broadcast fabric)."""
    rows = _ask(sock, {"cmd": "table"})["table"]
    seen = {(r["interface"], ip_address(r["ip"])) for r in rows}
    kernel = _ask(sock, {"cmd": "neighbours"}, fatal=False)  # an older harpd lacks it: harpd's table only
    for n in kernel.get("neighbours", []) if kernel.get("ok") else []:
        if (n["interface"], ip_address(n["ip"])) not in seen:
            rows.append({"ip": n["ip"], "ula": n["ula"], "lis": n.get("lis") or "-", "kind": "kernel",
                         "age": None, "state": n.get("state"), "interface": n["interface"]})
    return [r for r in rows if interface in (None, r["interface"])]


def _print(rows: list[dict], names: Names) -> None:
    shown = [names(r["ip"]) for r in rows]
    if names.numeric:
        first = shown
    else:
        first = [s if s == r["ip"] else f"{s} ({r['ip']})" for s, r in zip(shown, rows)]
    w = max([16, *map(len, first)])
    lw = max([18, *(len(r["lis"]) for r in rows)])
    click.echo(f"{'Address':<{w}} {'ULA':<18} {'LIS':<{lw}} {'type':<8} {'age':>7}  iface")
    for f, r in zip(first, rows):
        age = "-" if r["age"] is None else f"{r['age']:.0f}s"
        click.echo(f"{f:<{w}} {r['ula']:<18} {r['lis']:<{lw}} {r['kind']:<8} {age:>7}  {r['interface']}")


def _set(sock: str, host: str, ula: str, interface: str | None) -> None:
    """Static entry for the first of HOST's addresses that harpd takes (in a LIS it serves)."""
    reply: dict = {}
    for ip in lookup(host):
        reply = _ask(sock, {"cmd": "set", "ip": ip, "ula": ula, "interface": interface}, fatal=False)
        if reply.get("ok"):
            return
    _die(reply.get("error", "failed"), reply.get("code", 1))


def _delete(sock: str, host: str, interface: str | None) -> None:
    """Delete the entries of every address of HOST; exit 1 if none had one."""
    replies = [_ask(sock, {"cmd": "delete", "ip": ip, "interface": interface}, fatal=False) for ip in lookup(host)]
    if not any(r.get("ok") for r in replies):
        _die(replies[-1].get("error", "failed"), replies[-1].get("code", 1))


@click.command(context_settings=CTX)
@click.argument("host", required=False)
@click.option("-a", "show_all", is_flag=True,
              help="List every entry: harpd's table and the kernel's neighbours on the gsn interfaces.")
@click.option("-n", "numeric", is_flag=True, help="Show numeric addresses: no reverse name lookups.")
@click.option("-s", "set_entry", nargs=2, metavar="HOST ULA", help="Add a static entry (kept across restarts).")
@click.option("-d", "delete_host", metavar="HOST", help="Delete the entries of HOST.")
@click.option("-f", "file", type=click.File(), metavar="FILE", help="Add static entries from FILE: 'HOST ULA' or "
              "'static IFACE HOST ULA' per line, # comments.")
@click.option("-i", "--interface", metavar="IFACE", help="Only this interface (gsn0, ...), for every option.")
@click.option("--socket", "sock", metavar="PATH", default="/run/harpd/control.sock", show_default=True,
              help="harpd's control socket.")
@version_option
def gsnarp_main(host, show_all, numeric, set_entry, delete_host, file, interface, sock) -> None:
    """Show and edit the HARP table of harpd, like arp(8) for GSN interfaces.

    HOST is a host name, an IPv4 address or an IPv6 address (link-local ones
    as fe80::1%gsn0). Names are looked up with the system resolver; a name
    with several addresses shows all of them, -d deletes all of them and -s
    sets the first one that lies in a LIS harpd serves.

    \b
    Examples:
      gsnarp                            list every entry (as -a)
      gsnarp node3                      show node3's entries; exit 1 if it has none
      gsnarp -n 192.0.2.3               the same, without reverse name lookups
      gsnarp -a -n                      all entries, numeric
      gsnarp -s node7 02:47:53:00:07:00 static entry for a host without HARP
      gsnarp -s 2001:db8::7 02:47:53:00:07:00
      gsnarp -d node7                   delete node7's entries
      gsnarp -f statics.txt             static entries from a file
      gsnarp -i gsn1 -a                 only gsn1

    \b
    Columns: Address (name (IP), or IP with -n or when the lookup fails),
    ULA, LIS, type, age (seconds since last validated), iface.
      type dynamic  learnt through HARP (registration, resolution)
      type static   added with -s/-f or in harpd.options; never expires
      type kernel   in the kernel's neighbour table only: what the kernel
                    learnt by itself with ARP/ND on a broadcast fabric

    \b
    Exit status: 0 ok, 1 no such entry, unknown host or refused,
    2 usage, 69 harpd not running, 77 permission denied.
    """
    if host and (set_entry or delete_host or file):
        raise click.UsageError("HOST shows entries; it does not go with -s, -d or -f")
    if not (host or show_all or set_entry or delete_host or file):
        show_all = True
    if set_entry:
        _set(sock, set_entry[0], set_entry[1], interface)
    if delete_host:
        _delete(sock, delete_host, interface)
    if file:
        for n, line in enumerate(file, 1):
            w = line.split("#", 1)[0].split()
            if not w:
                continue
            if len(w) == 4 and w[0] == "static":
                iface, name, ula = w[1:]
            elif len(w) == 2:
                iface, (name, ula) = interface, w
            else:
                _die(f"{file.name}:{n}: expected 'HOST ULA' or 'static IFACE HOST ULA'")
            _set(sock, name, ula, iface)
    names = Names(numeric)
    if host:
        addrs = lookup(host)
        scoped = {x.partition("%")[2] for x in addrs} - {""}
        rows = [r for r in _rows(sock, interface) if _same(r["ip"], addrs)
                and (not scoped or r["interface"] in scoped)]
        if not rows:
            shown = host if addrs == [host] else f"{host} ({', '.join(addrs)})"
            _die(f"{shown}: no entry")
        _print(rows, names)
    elif show_all:
        _print(_rows(sock, interface), names)
