"""gsnctl: query gsnd and gsn-switch over their control sockets."""

from __future__ import annotations

import json
import sys

import click

from .constants import RUNTIME_DIR
from .runtime.cliutil import reach_daemon
from .runtime.control import request


def _ask(path: str, req: dict) -> dict:
    try:
        reply = reach_daemon("gsnctl", path, "the daemon", lambda: request(path, req))
    except (TimeoutError, OSError) as exc:
        raise click.ClickException(f"{path}: {exc}")
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
@click.pass_context
def main(ctx, interface, sock, runtime_dir) -> None:
    """Inspect GSN daemons: link state, ULAs, credits and drop counters.

    Exit status: 0 ok, 1 the daemon refused or failed, 69 it is not running.
    """
    ctx.obj = sock or f"{runtime_dir}/{interface}.ctl"


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
    else:
        click.echo(f"gsn-switch {st['switch_id']}   broadcast {'on' if st['broadcast'] else 'off'}")
        for n, p in sorted(st["ports"].items(), key=lambda kv: int(kv[0])):
            click.echo(f"port {n}:")
            _print_link(p["link"])
            for k, v in sorted({**p["counters"], **p.get("cable", {})}.items()):
                click.echo(f"    {k:<36} {v}")
        click.echo("ULA table:")
        for e in st["table"]:
            click.echo(f"  {e['ula']}  port {e['port']:<3} {e['kind']}")


@main.command()
@click.pass_obj
def ulas(path) -> None:
    """ULAs the neighbouring switch knows (Admin LIST_ULAS through gsnd)."""
    for e in _ask(path, {"cmd": "ulas"})["ulas"]:
        click.echo(f"{e['ula']}  port {e['port']}")


@main.command()
@click.argument("command")
@click.argument("args", default="")
@click.option("--hops", default=1, show_default=True)
@click.pass_obj
def admin(path, command, args, hops) -> None:
    """Send one Admin request (e.g. WHAT_ARE_YOU, GET_PORT <ula-hex>) and print the responses."""
    for r in _ask(path, {"cmd": "admin", "command": command, "args": args, "hops": hops})["responses"]:
        click.echo(f"{r['command']} status={r['status']} args={r['args']}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
