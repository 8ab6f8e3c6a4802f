"""Command lines: ib-sm, ib-switch, ipoibd (daemons) and ibctl (operators)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator

import click

from daemons.runtime import daemon
from daemons.runtime.cliutil import reach_daemon, version_option
from daemons.runtime.control import request

CTX = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
LEVEL = click.Choice(["debug", "info", "warning", "error"])


@click.command(context_settings=CTX)
@click.option("-c", "--config", "config_path", type=click.Path(dir_okay=False),
              help="TOML file with an [sm] table (see etc/ib-sm.toml). Flags override it.")
@click.option("--listen", help="UDP host:port of the management socket. [0.0.0.0:4791]")
@click.option("--state-file", help="Where GUID -> LID assignments are kept across restarts. "
              "[/var/lib/ib-sm/lids.json]")
@click.option("--partitions", help="Partitions file (TOML, see etc/ib-partitions.toml). [every port a full "
              "member of the default partition 0x7fff]")
@click.option("--runtime-dir", help="Where control.sock lives. [/run/ib-sm]")
@click.option("--log-level", type=LEVEL, help="[info]")
@click.option("--check", is_flag=True, help="Validate the configuration (and partitions file) and exit.")
@version_option
def sm_main(config_path, listen, state_file, partitions, runtime_dir, log_level, check) -> None:
    """Subnet manager and subnet administration of an InfiniBand-style emulated fabric.

    Ports register with it (GUID -> LID, kept in the state file so LIDs survive a
    restart; GID = fe80::/64 prefix + GUID) and get their P_Key table from the
    partitions file; switches report their neighbours and get unicast (by LID) and
    multicast (by MLID) forwarding tables.  The SA answers PathRecord queries and
    MCMemberRecord joins/leaves; each ipoib partition has its IPoIB broadcast group
    (Q_Key 0x0b1b, IB MTU 2048 -> IPoIB MTU 2044, rate 10 Gb/s).

    \b
    Example:
      ib-sm --listen 198.18.0.1:4791 --state-file /tmp/sm/lids.json --runtime-dir /tmp/sm
    Exit status 78 means a bad configuration.
    """
    from . import config

    ov = dict(listen=listen, state_file=state_file, partitions=partitions, runtime_dir=runtime_dir, log_level=log_level)

    def make(cfg):
        from .smd import SmDaemon

        return SmDaemon(cfg)

    daemon.serve(lambda: config.load_sm(config_path, ov), config_path or "command line", make, check=check)


@click.command(context_settings=CTX)
@click.option("-c", "--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="TOML file: [switch] guid, sm, runtime_dir; [[port]] number, local, peer (see etc/ib-switch.toml).")
@click.option("--runtime-dir", help="Where control.sock lives. [/run/ib-switch]")
@click.option("--log-level", type=LEVEL, help="[info]")
@click.option("--check", is_flag=True, help="Validate the configuration and exit.")
@version_option
def switch_main(config_path, runtime_dir, log_level, check) -> None:
    """Switch of an InfiniBand-style emulated fabric: forwards UD packets between its
    UDP cables, unicast by destination LID and multicast by MLID, through the tables
    the subnet manager (ib-sm) programs; tells the SM who is on each port.

    Exit status 78 means a bad configuration.
    """
    from . import config

    def make(cfg):
        from .switchd import SwitchDaemon

        return SwitchDaemon(cfg)

    daemon.serve(lambda: config.load_switch(config_path, dict(runtime_dir=runtime_dir, log_level=log_level)), config_path,
                 make, check=check)


@click.command(context_settings=CTX)
@click.option("-c", "--config", "config_path", type=click.Path(dir_okay=False),
              help="TOML file with a [port] table (see etc/ipoibd.toml). Flags override it.")
@click.option("--guid", help="Port GUID, hex (the GID is fe80::/64 + GUID; the MAC is GUID bytes 0-2,5-7).")
@click.option("--local", help="Local UDP host:port of the cable.")
@click.option("--peer", help="UDP host:port of the switch port at the other end of the cable.")
@click.option("--sm", help="UDP host:port of the subnet manager (ib-sm).")
@click.option("-i", "--interface", help="Parent interface (its P_Key is index 0 of the port's table). [ib0]")
@click.option("--child", "children", multiple=True, help="P_Key of a child interface, e.g. 0x8001 makes ib0.8001. "
              "Repeatable.")
@click.option("--runtime-dir", help="Where IFACE.ctl lives. [/run/ipoibd]")
@click.option("--log-level", type=LEVEL, help="[info]")
@click.option("--check", is_flag=True, help="Validate the configuration and exit.")
@version_option
def ipoibd_main(config_path, guid, local, peer, sm, interface, children, runtime_dir, log_level, check) -> None:
    """IPoIB endpoint of an InfiniBand-style emulated fabric: one port, presented to
    Linux as TAP interfaces (ib0 and P_Key children such as ib0.8001) the eIPoIB way.

    On the fabric everything is IPoIB (RFC 4391 framing as Linux does it): a 4-byte
    header, 20-byte hardware addresses (QPN + GID), ARP with hardware type 32, ND
    options of 24 bytes, multicast groups as MGIDs per P_Key.  To Linux the TAP is
    Ethernet: our MAC stands for our 20-byte address and a remote port shows as
    02:QP:QP:QP:LID:LID; ARP and ND are rewritten on the way out and in.  Carrier
    comes up after the broadcast-group join, with its MTU (2044).  Address it with
    ip(8) like any interface.

    \b
    Example:
      ipoibd --guid 0x0002c90300000001 --local 198.18.1.2:4800 --peer 198.18.1.1:4700 \\
             --sm 198.18.1.1:4791 --child 0x8001 --runtime-dir /tmp/h1
    Exit status 78 means a bad configuration.
    """
    from . import config

    ov = dict(guid=guid, local=local, peer=peer, sm=sm, interface=interface,
              children=list(children) if children else None, runtime_dir=runtime_dir, log_level=log_level)

    def make(cfg):
        from .ipoibd import IpoibDaemon

        return IpoibDaemon(cfg)

    daemon.serve(lambda: config.load_ipoib(config_path, ov), config_path or "command line", make, check=check)


# --- ibctl -----------------------------------------------------------------------------------------
@click.group(context_settings=CTX)
@click.option("-s", "--socket", "sock", default="/run/ipoibd/ib0.ctl", show_default=True,
              help="Control socket of ipoibd (IFACE.ctl), ib-sm or ib-switch (control.sock).")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON answer.")
@version_option
@click.pass_context
def ibctl_main(ctx, sock, as_json) -> None:
    """Look at an InfiniBand-style emulated fabric: an IPoIB port's interfaces,
    neighbours (20-byte address, LID, shadow-ARP state), multicast groups, counters,
    path information for an IP address; or the SM's / a switch's state.

    \b
    Examples:
      ibctl -s /run/ipoibd/ib0.ctl neighbours
      ibctl -s /run/ipoibd/ib0.ctl path 192.0.2.2
      ibctl -s /run/ib-sm/control.sock status --json
    """
    ctx.obj = (sock, as_json)


def json_option(f):
    """``--json`` after the command too (``ibctl neighbours --json``)."""

    def _set(ctx, _param, value):
        if value:
            ctx.obj = (ctx.obj[0], True)

    return click.option("--json", "as_json", is_flag=True, expose_value=False, callback=_set,
                        help="Print the daemon's JSON answer.")(f)


def _ask(ctx, req: dict) -> dict:
    sock, _ = ctx.obj
    r = reach_daemon("ibctl", sock, "the daemon", lambda: request(sock, req))
    if not r.get("ok"):
        click.echo(f"ibctl: {r.get('error')}", err=True)
        sys.exit(1)
    r.pop("ok")
    return r


def _show(ctx, r: dict, lines: Callable[[dict], Iterable[str]]) -> None:
    """``r`` as JSON (--json) or as the command's ``lines``."""
    if ctx.obj[1]:
        click.echo(json.dumps(r, indent=1, sort_keys=True))
    else:
        for line in lines(r):
            click.echo(line)


@ibctl_main.command()
@json_option
@click.pass_context
def status(ctx) -> None:
    """Interfaces (P_Key, QPN, carrier, MTU, 20-byte address) of a port, or the SM's/switch's state."""
    def text(r: dict) -> Iterator[str]:
        if "interfaces" in r:
            yield f"port {r['port_guid']}  LID {r['lid']}  GID {r['gid']}  P_Keys {' '.join(r['pkeys'])}"
            for i in r["interfaces"]:
                yield (f"  {i['name']:<12} pkey {i['pkey']} qpn {i['qpn']} carrier {'up' if i['carrier'] else 'down'}"
                       f" mtu {i['mtu']} qkey {i['qkey']}\n    hwaddr {i['hwaddr']}  mac {i['mac']}")
        elif "ports" in r and "partitions" in r:
            yield f"SM epoch {r['epoch']}  tables v{r['version']}"
            for p in r["ports"]:
                yield f"  LID {p['lid']:<5} {p['guid']}  {p['gid']}  {' '.join(p['pkeys'])}"
            for g in r["groups"]:
                yield f"  group {g['mgid']} MLID {g['mlid']} P_Key {g['pkey']} members {g['members']}"
        else:
            yield json.dumps(r, indent=1, sort_keys=True)
    _show(ctx, _ask(ctx, {"cmd": "status"}), text)


@ibctl_main.command()
@json_option
@click.pass_context
def counters(ctx) -> None:
    """Every counter of the daemon (drops carry their reason in the name)."""
    r = _ask(ctx, {"cmd": "status"})
    _show(ctx, {"counters": r.get("counters", {})},
          lambda r: [f"{k:<40} {v}" for k, v in sorted(r["counters"].items())])


@ibctl_main.command()
@json_option
@click.pass_context
def neighbours(ctx) -> None:
    """Shadow-ARP entries: 20-byte address, LID, state, frames queued."""
    _show(ctx, _ask(ctx, {"cmd": "neighbours"}), lambda r: [
        f"{n['interface']:<10} {n['hwaddr']}  LID {n['lid']}  {n['state']}  queued {n['queued']}"
        for n in r["neighbours"]])


@ibctl_main.command()
@json_option
@click.pass_context
def groups(ctx) -> None:
    """Multicast groups of the port: MGID, MLID, JoinState joined/wanted."""
    _show(ctx, _ask(ctx, {"cmd": "groups"}), lambda r: [
        f"{g['interface']:<10} {g['mgid']:<40} MLID {g['mlid']} joined {g['joined']} wanted {g['wanted']}"
        for g in r["groups"]])


@ibctl_main.command()
@click.argument("ip")
@json_option
@click.pass_context
def path(ctx, ip) -> None:
    """Path information for IP (the seed's ipoib_path_info): GIDs, LIDs, P_Key, SL, MTU, rate."""
    _show(ctx, _ask(ctx, {"cmd": "path", "ip": ip}), lambda r: [f"{k:<16} {v}" for k, v in r.items()])
