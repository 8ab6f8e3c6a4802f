"""gsnctl: query gsnd and gsn-switch over their control sockets."""

from __future__ import annotations

import json
import string
import sys

import click

from .constants import ADMIN_MAX_HOPS, ADMIN_ROUTE_SLOTS, ADMIN_ROUTE_UNUSED, RUNTIME_DIR
from .runtime.cliutil import reach_daemon, version_option
from .runtime.control import request
from .runtime.keyfile import encode_key, new_key, write_key
from .wire.admin import ARGS_BYTES


def _ask(path: str, req: dict) -> dict:
    try:
        reply = reach_daemon("gsnctl", path, "the daemon", lambda: request(path, req))
    except (TimeoutError, OSError) as exc:
        raise click.ClickException(f"{path}: {exc}") from None
    if not reply.get("ok"):
        raise click.ClickException(reply.get("error", "failed"))
    return reply


def _print_link(link: dict, indent: str = "  ") -> None:
    click.echo(f"{indent}link: {link['state']}   inflight {link['inflight_mps']} mps")
    click.echo(f"{indent}credits held (tx) per VC:     {link['credits_tx']}")
    click.echo(f"{indent}credits in use (rx) per VC:   {link['credits_in_use']}")
    click.echo(f"{indent}queued per VC (mps):          {link['queued_mps']}")
    for k, v in sorted(link["counters"].items()):
        click.echo(f"{indent}  {k:<36} {v}")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-i", "--interface", default="gsn0", show_default=True, help="gsnd instance to ask.")
@click.option("-s", "--socket", "sock", help="Control socket path (default RUNTIME/IFACE.ctl; a switch's "
              "is /run/gsn-switch/control.sock).")
@click.option("--runtime-dir", default=RUNTIME_DIR, show_default=True)
@version_option
@click.pass_context
def main(ctx, interface, sock, runtime_dir) -> None:
    """Inspect GSN daemons: link state, ULAs, credits and drop counters.

    Exit status: 0 ok, 1 the daemon refused or failed, 69 it is not running.
    """
    ctx.obj = sock or f"{runtime_dir}/{interface}.ctl"


def _print_cable(cable: dict, indent: str = "  ") -> None:
    click.echo(f"{indent}cable: auth {cable.get('auth', 'off')}   mtu {cable['mtu']} ({cable['mtu_source']})   "
               f"max_mps {cable['max_mps']}   max_datagram {cable['max_datagram']}")


def _print_control(st: dict) -> None:
    if st.get("control"):
        click.echo("control socket:")
        for k, v in sorted(st["control"].items()):
            click.echo(f"    {k:<36} {v}")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Raw JSON.")
@click.pass_obj
def status(path, as_json) -> None:
    """Link state, ULA, per-VC credits and every counter."""
    st = _ask(path, {"cmd": "status"})["status"]
    if as_json:
        click.echo(json.dumps(st, indent=2))
        return
    if st["kind"] == "gsnd":
        click.echo(f"{st['interface']}: ULA {st['ula'] or 'none'}   neighbour {st['neighbour']}   "
                   f"ULP clients {st['ulp']['clients']}")
        _print_cable(st["cable"])
        _print_link(st["link"])
        for section in ("counters", "reassembly"):
            for k, v in sorted(st[section].items()):
                click.echo(f"    {k:<36} {v}")
        for k, v in sorted({**st["cable"]["transport"], **st["ulp"]["counters"]}.items()):
            click.echo(f"    {k:<36} {v}")
        delivery = dict(st["ulp"].get("delivery", {}))
        held, withheld = delivery.pop("held_vcs", None), delivery.pop("withheld_mps", None)
        if held is not None:
            click.echo(f"  ULP delivery: VCs held {[vc for vc, on in enumerate(held) if on] or 'none'}   "
                       f"credits withheld per VC {withheld}")
        for k, v in sorted(delivery.items()):
            click.echo(f"    {k:<36} {v}")
        _print_control(st)
    else:
        click.echo(f"gsn-switch {st['switch_id']}   broadcast {'on' if st['broadcast'] else 'off'}")
        for n, p in sorted(st["ports"].items(), key=lambda kv: int(kv[0])):
            role = (f" (to another switch; broadcast {'tree' if p.get('tree') else 'blocked'})"
                    if p.get("switch") else "")
            click.echo(f"port {n}{role}:")
            if "cable" in p:
                _print_cable(p["cable"])
            _print_link(p["link"])
            for k, v in sorted({**p["counters"], **{k: v for k, v in p.get("cable", {}).items()
                                                    if k not in ("local", "peer")}}.items()):
                click.echo(f"    {k:<36} {v}")
        click.echo("ULA table:")
        for e in st["table"]:
            click.echo(f"  {e['ula']}  port {e['port']:<3} {e['kind']}")
        _print_control(st)


def _print_fabric(f: dict, switch_id: int) -> None:
    if not f.get("switches"):
        click.echo(f"switch {switch_id}: no fabric map yet (phase {f.get('phase')}); it walks when an inter-switch "
                   f"port comes up or a host gets a ULA")
        return
    run = f.get("last_run", {})
    nl = len(f["links"])
    click.echo(f"fabric seen from switch {f['walker']}: {len(f['switches'])} switches, {nl} link{'s' * (nl != 1)}, "
               f"manager {f['manager']}   (map {f['generation']}, walked in {run.get('seconds')} s with "
               f"{run.get('requests')} Admin requests{', partial' if run.get('partial') else ''})")
    click.echo("switches:")
    click.echo(f"  {'id':>3}  {'serial':<12}  {'hops':>4}  {'admin route':<12}  {'ports up':<16}  tree ports")
    for s in f["switches"]:
        route = ",".join(map(str, s["route"])) or "-"
        click.echo(f"  {s['id']:>3}  {s['serial']:<12}  {s['hops'] if s['hops'] is not None else '?':>4}  "
                   f"{route:<12}  {','.join(map(str, s['ports_up'])) or '-':<16}  "
                   f"{','.join(map(str, s['tree_ports'])) or '-'}")
    click.echo("links (switch:port -- switch:port):")
    for ln in f["links"]:
        click.echo(f"  {ln['a'][0]}:{ln['a'][1]} -- {ln['b'][0]}:{ln['b'][1]}"
                   f"{'   spanning tree' if ln['tree'] else '   (broadcast blocked)'}")
    costs = "  ".join(f"{s}={c}" for s, c in f["path_costs"].items() if c)
    click.echo(f"path costs (hops) from switch {f['walker']}: {costs or '-'}")
    if f.get("endpoints") is None:
        click.echo(f"endpoints: the manager holds them: gsnctl -s <switch {f['manager']}'s control.sock> fabric")
    else:
        click.echo(f"endpoints ({len(f['endpoints'])}):")
        for e in f["endpoints"]:
            click.echo(f"  {e['ula']}  switch {e['switch']} port {e['port']}")
    for c in f.get("conflicts", []):
        click.echo(f"CONFLICT: switch id {c['id']} used by serials {', '.join(c['serials'])}")
    for c in f.get("collisions", []):
        click.echo(f"COLLISION: ULA {c['ula']} on switch {c['ignored'][0]} port {c['ignored'][1]} ignored "
                   f"(kept switch {c['kept'][0]} port {c['kept'][1]})")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Raw JSON.")
@click.pass_obj
def fabric(path, as_json) -> None:
    """The fabric map a switch built (ask its control socket with -s).

    \b
    Switches (id, serial, hops and the Admin route from this switch, inter-switch
    ports up, spanning-tree ports), links (the tree's and those blocked for
    broadcast), path costs in hops, and on the fabric manager (the lowest switch
    id) every endpoint's ULA with its switch and port.
      gsnctl -s /run/gsn-switch/control.sock fabric [--json]
    """
    reply = _ask(path, {"cmd": "fabric"})
    if as_json:
        click.echo(json.dumps(reply["fabric"], indent=2))
        return
    _print_fabric(reply["fabric"], reply["switch_id"])


@main.command()
@click.option("-o", "--output", "out", metavar="FILE", type=click.Path(dir_okay=False),
              help="Write the key to FILE (created with mode 0600) instead of standard output.")
@click.option("--force", is_flag=True, help="Replace FILE if it exists (its cable's other end then needs the new key).")
def genkey(out, force) -> None:
    """A new cable key: 32 random bytes in base64, one line (like `wg genkey`).

    Both ends of a cable use the same key: give the file to gsnd (`[cable] key_file`
    or --key-file) and to the switch port or peer across the cable (`[[port]]
    key_file`; pktwayd `[twin] key_file`).  The daemons refuse a key file that group
    or others can read.

    \b
    gsnctl genkey -o /etc/gsn/cable-gsn0.key && chown gsn: /etc/gsn/cable-gsn0.key
    (umask 077; gsnctl genkey) > host1.key
    """
    key = new_key()
    if out is None:
        click.echo(encode_key(key))
        return
    try:
        write_key(out, key, force=force)
    except FileExistsError:
        raise click.ClickException(f"{out}: exists (--force replaces it)") from None
    except OSError as exc:
        raise click.ClickException(f"{out}: {exc.strerror}") from None


@main.command()
@click.pass_obj
def ulas(path) -> None:
    """ULAs the neighbouring switch knows (Admin LIST_ULAS through gsnd)."""
    for e in _ask(path, {"cmd": "ulas"})["ulas"]:
        click.echo(f"{e['ula']}  port {e['port']}")


def _usage(msg: str) -> None:
    click.echo(f"gsnctl admin: {msg}", err=True)
    sys.exit(2)


def _route(text: str | None) -> list[int]:
    if not text:
        return []
    try:
        ports = [int(p, 0) for p in text.split(",")]
    except ValueError:
        _usage(f"--route {text!r}: expected port numbers separated by commas, e.g. 3,1")
    if len(ports) > ADMIN_ROUTE_SLOTS:
        _usage(f"--route: at most {ADMIN_ROUTE_SLOTS} ports (the ROUTE field's slots), got {len(ports)}")
    bad = [p for p in ports if not 0 <= p < ADMIN_ROUTE_UNUSED]
    if bad:
        _usage(f"--route: port {bad[0]} is outside 0..{ADMIN_ROUTE_UNUSED - 1}")
    return ports


@main.command()
@click.argument("command")
@click.argument("args", default="")
@click.option("--hops", "hops_text", metavar="N", help="Hop count: 0 = this host's own adapter (gsnd answers), 1 = the element "
              "across the cable, N = N-1 elements further.  [1, or one more than the --route ports]")
@click.option("--route", "route_text", metavar="P1,P2,...", help="Output port at each multi-port switch the "
              "request passes (at most 7), e.g. --route 3 asks what is on port 3 of the neighbouring switch.")
@click.pass_obj
def admin(path, command, args, hops_text, route_text) -> None:
    """Send one Admin request (e.g. WHAT_ARE_YOU, GET_PORT <ula-hex>) and print the responses.

    \b
    gsnctl admin WHAT_ARE_YOU                  the element across the cable
    gsnctl admin WHAT_ARE_YOU --route 3        the element on port 3 of that switch (hops 2)
    gsnctl admin GET_PORT 02:47:53:01:03:00    which port of the switch reaches that ULA
    """
    route = _route(route_text)
    if hops_text is None:
        hops = len(route) + 1
    else:
        try:
            hops = int(hops_text)
        except ValueError:
            _usage(f"--hops {hops_text!r}: expected a whole number 0..{ADMIN_MAX_HOPS}")
    if not 0 <= hops <= ADMIN_MAX_HOPS:
        _usage(f"--hops {hops}: outside 0..{ADMIN_MAX_HOPS} (0 = this host's adapter, 1 = the element across "
               f"the cable)")
    if len(route) > max(hops - 1, 0):
        _usage(f"--route has {len(route)} ports but --hops {hops} passes {max(hops - 1, 0)} switches; "
               f"use --hops {len(route) + 1} or leave it out")
    hexargs = "".join(ch for ch in args if ch not in ": .-")
    if len(hexargs) % 2 or any(ch not in string.hexdigits for ch in hexargs) or len(hexargs) > 2 * ARGS_BYTES:
        _usage(f"ARGS {args!r}: expected up to {ARGS_BYTES} bytes of hex (':' between bytes allowed)")
    req = {"cmd": "admin", "command": command, "args": hexargs, "hops": hops}
    if route:
        req["route"] = route
    for r in _ask(path, req)["responses"]:
        click.echo(f"{r['command']} status={r['status']} args={r['args']}")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Everything as one JSON object.")
@click.option("--run-dir", default="/run", show_default=True, help="Runtime root holding gsnd/, gsn-switch/, harpd/, "
              "stpd/ and pktwayd/ (the units' RuntimeDirectory=).")
@click.option("--interval", type=click.FloatRange(0, 60), default=1.0, show_default=True,
              help="Seconds between the two readings rates are computed from (0: no rates, at once).")
def show(as_json, run_dir, interval) -> None:
    """One screen for this host: every gsnd's link, cable peer, last-heard age, rates, per-VC
    traffic and drops, the fabric's ULAs with harpd's IPs, the switch's ports, and the
    harpd, stpd and pktwayd above them (those whose sockets exist).

    \b
    gsnctl show
    gsnctl show --json | jq '.gsnd.gsn0.peers'
    """
    from .show import gather, render

    data = gather(run_dir, interval)
    click.echo(json.dumps(data, indent=2) if as_json else render(data), nl=as_json)


@main.command("install-units")
@click.option("--root", type=click.Path(file_okay=False), default="/", show_default=True,
              help="Install under this directory instead (packaging, DESTDIR).")
@click.option("--bin-dir", type=click.Path(file_okay=False),
              help="Directory holding gsnd and the other console scripts.  [this installation's]")
@click.option("--network", is_flag=True, help="Also install the systemd-networkd example as "
              "/etc/systemd/network/50-gsn0.network (edit its Address= first).")
def install_units(root, bin_dir, network) -> None:
    """Install the systemd units, the sysusers file and example configurations.

    Units go to /etc/systemd/system with ExecStart= pointing at this installation's
    scripts (system-wide, or a venv outside /home and /root, which the units' sandbox
    hides); the sysusers file to /etc/sysusers.d/gsn.conf; the example configs to /etc/gsn
    (gsnd-gsn0.toml, gsn-switch.toml, harpd.options, pktwayd-rab.toml), never over
    existing files.  Then: systemd-sysusers; systemctl daemon-reload; edit /etc/gsn;
    systemctl enable --now gsn-switch gsnd@gsn0 harpd stpd.
    """
    from pathlib import Path

    from .install import InstallError, install

    try:
        done = install(Path(root), bin_dir=Path(bin_dir) if bin_dir else None, network=network)
    except (InstallError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    for path, what in done:
        click.echo(f"{what:<10} {path}")
    if root == "/":
        click.echo("next: systemd-sysusers && systemctl daemon-reload; edit /etc/gsn/*; "
                   "systemctl enable --now gsn-switch gsnd@gsn0 harpd stpd")


@main.command()
@click.option("--pid", type=int, metavar="PID", help="Send SIGHUP to this process instead (a daemon without a control "
              "socket, e.g. stpd: ExecReload=gsnctl reload --pid $MAINPID).")
@click.pass_obj
def reload(path, pid) -> None:
    """Reload a daemon: re-read its configuration's log level, one log line says so.

    Through the control socket (-s, or -i for a gsnd) the reload is done when this
    returns, and a bad configuration file fails it (exit 1, nothing changed); the
    units' ExecReload= run this, so no kill(1) binary is needed.

    \b
    gsnctl -i gsn0 reload
    gsnctl -s /run/gsn-switch/control.sock reload
    """
    if pid is not None:
        import os
        import signal

        try:
            os.kill(pid, signal.SIGHUP)
        except OSError as exc:
            raise click.ClickException(f"pid {pid}: {exc.strerror}") from None
        return
    reply = _ask(path, {"cmd": "reload"})
    if reply.get("reloaded"):
        click.echo(f"reloaded: log level {reply.get('log_level')} (from {reply.get('source')})")
    else:
        click.echo("nothing to reload")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
