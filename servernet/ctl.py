"""snetctl: talk to a ServerNet node (snetd) or router (snet-router) on its control socket."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from daemons.runtime.cliutil import reach_daemon, version_option
from daemons.runtime.control import request

from .constants import CONTROL_INLINE_BYTES, MAX_BLOCK_BYTES

CTX = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
RUN_DIR = "/run/snetd"
BLOCK_TIMEOUT_S = 600.0
EXPLAIN = {
    "nak": "nak: the peer refused the access (address outside its windows, permission, source or fabric)",
    "timeout": "timeout: no answer on either fabric",
    "no_path": "no_path: both paths to the peer are down",
    "queue_full": "queue_full: too many transactions waiting for a TID",
    "length": "length: the packet format cannot carry that (ServerNet II mode: whole 8-byte units at 8-byte "
              "aligned addresses; nothing past 0xffffffff)",
}


def _socket(value: str) -> str:
    return value if "/" in value else f"{RUN_DIR}/{value}.sock"


def _int(_ctx, param, value):
    if value is None:
        return None
    try:
        n = int(value, 0)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a number (decimal or 0x...)") from None
    if not 0 <= n <= 0xFFFFFFFF:
        raise click.BadParameter(f"{value} is not 0..0xffffffff")
    return n


def _call(ctx, req: dict, timeout: float = 10.0) -> dict:
    sock = ctx.obj
    try:
        reply = reach_daemon("snetctl", sock, "snetd", lambda: request(sock, req, timeout))
    except TimeoutError:
        click.echo(f"snetctl: {sock}: no answer within {timeout:g} s", err=True)
        sys.exit(1)
    if not reply.get("ok"):
        error = reply.get("error", "failed")
        click.echo(f"snetctl: {EXPLAIN.get(error, error)}", err=True)
        sys.exit(1)
    return reply


@click.group(context_settings=CTX)
@click.option("-s", "--socket", "sock", default="snetd", show_default=True,
              help=f"The daemon's control socket: a path, or a node name for {RUN_DIR}/NAME.sock.")
@version_option
@click.pass_context
def main(ctx, sock) -> None:
    """Inspect and drive a ServerNet end node (snetd) or router (snet-router).

    \b
      snetctl -s a status                      paths per peer and fabric, counters
      snetctl -s a counters                    drops and NAKs by reason
      snetctl -s a write b 0x100000 --hex 00ff  write a peer's window
      snetctl -s a read b 0x100000 64          read it back (hex)
      snetctl -s a block b 0x100000 --file f   a block, doorbell after every ACK
      snetctl -s /run/servernet/x.sock router  a router's ports and drop counters
    """
    ctx.obj = _socket(sock)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="The daemon's full answer as JSON.")
@click.pass_context
def status(ctx, as_json) -> None:
    """The state of every path (per peer, per fabric), TIDs in use, counters."""
    r = _call(ctx, {"cmd": "status"})
    if as_json:
        click.echo(json.dumps(r, indent=2))
        return
    click.echo(f"node {r['name']} ({r['id']})  TIDs in use {r['tids_in_use']}/16  pending {r['pending_ops']}  "
               f"interrupts queued {r['interrupts_queued']}")
    click.echo(f"{'peer':<16}{'fabric':<8}{'state':<11}{'for s':>9}{'timeouts':>10}")
    for peer, fabrics in r["paths"].items():
        label = f"{r['peers'].get(peer, '')} ({peer})"
        for fabric, st in fabrics.items():
            click.echo(f"{label:<16}{fabric:<8}{st['state']:<11}{st['for_s']:>9.1f}{st['timeouts']:>10}")


@main.command()
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def counters(ctx, as_json) -> None:
    """Every counter: drops by reason (drop_*), NAKs sent by reason (nak_*), traffic."""
    r = _call(ctx, {"cmd": "status"})
    if as_json:
        click.echo(json.dumps(r["counters"], indent=2))
        return
    for part, values in r["counters"].items():
        for key, value in sorted(values.items()):
            click.echo(f"{part}.{key} {value}")


@main.command()
@click.pass_context
def router(ctx) -> None:
    """A router's fabric, ports, routes and counters (JSON)."""
    click.echo(json.dumps(_call(ctx, {"cmd": "status"}), indent=2))


@main.command()
@click.argument("peer")
@click.argument("address", callback=_int)
@click.argument("length", type=click.IntRange(1, CONTROL_INLINE_BYTES))
@click.option("--out", type=click.Path(dir_okay=False, writable=True), help="Write the bytes to this file, not hex.")
@click.pass_context
def read(ctx, peer, address, length, out) -> None:
    """Read LENGTH bytes at ADDRESS of PEER's exposed window (<= 64-byte READs)."""
    r = _call(ctx, {"cmd": "read", "peer": peer, "address": address, "length": length})
    if out:
        Path(out).write_bytes(bytes.fromhex(r["data"]))
    else:
        click.echo(r["data"])


@main.command()
@click.argument("peer")
@click.argument("address", callback=_int)
@click.option("--hex", "hexdata", help="The bytes, in hex.")
@click.option("--file", "path", type=click.Path(exists=True, dir_okay=False), help="The bytes, from a file.")
@click.option("--fabric", type=click.Choice(["x", "y"]), help="Prefer this fabric while its path is UP "
              "(default: alternate X and Y).")
@click.pass_context
def write(ctx, peer, address, hexdata, path, fabric) -> None:
    """Write bytes (at most 16 KiB) at ADDRESS of PEER's exposed window (<= 64-byte WRITEs)."""
    data = _data(hexdata, path, CONTROL_INLINE_BYTES)
    req = {"cmd": "write", "peer": peer, "address": address, "data": data.hex()}
    r = _call(ctx, req | ({"fabric": fabric} if fabric else {}))
    click.echo(f"wrote {r['length']} bytes in {r['elapsed_s'] * 1e3:.2f} ms")


@main.command()
@click.argument("peer")
@click.argument("address", callback=_int)
@click.option("--file", "path", type=click.Path(exists=True, dir_okay=False),
              help=f"The block's bytes, from a file (at most {CONTROL_INLINE_BYTES}; use --random beyond).")
@click.option("--random", "length", type=click.IntRange(1, MAX_BLOCK_BYTES),
              help="A block of this many pseudo-random bytes made by the daemon from --seed.")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True)
@click.option("--doorbell", callback=_int, help="The doorbell address on PEER (default: the peer's in the config).")
@click.option("--fabric", type=click.Choice(["x", "y"]), help="Prefer this fabric while its path is UP "
              "(default: alternate X and Y).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def block(ctx, peer, address, path, length, seed, doorbell, fabric, as_json) -> None:
    """Send a block of any length to ADDRESS on PEER: <= 64-byte WRITEs over both
    fabrics, then the doorbell once every one is ACKed."""
    if (path is None) == (length is None):
        raise click.UsageError("give one of --file or --random")
    req = {"cmd": "block", "peer": peer, "address": address}
    if path:
        req["data"] = _data(None, path, CONTROL_INLINE_BYTES).hex()
    else:
        req |= {"length": length, "seed": seed}
    if doorbell is not None:
        req["doorbell"] = doorbell
    if fabric:
        req["fabric"] = fabric
    r = _call(ctx, req, timeout=BLOCK_TIMEOUT_S)
    if as_json:
        click.echo(json.dumps(r, indent=2))
    else:
        click.echo(f"block seq {r['seq']}: {r['length']} bytes in {r['elapsed_s']:.3f} s "
                   f"({r['goodput_MBps']:.2f} MB/s), packets {r['packets']}")


@main.command()
@click.option("--max", "limit", type=click.IntRange(1, 4096), default=64, show_default=True)
@click.pass_context
def interrupts(ctx, limit) -> None:
    """Take entries off the node's interrupt queue; show the blocks checked (JSON)."""
    click.echo(json.dumps(_call(ctx, {"cmd": "interrupts", "max": limit}), indent=2))


def _data(hexdata: str | None, path: str | None, limit: int) -> bytes:
    if hexdata is not None and path is None:
        try:
            data = bytes.fromhex(hexdata)
        except ValueError:
            raise click.BadParameter(f"{hexdata[:20]!r}... is not hex", param_hint="--hex") from None
    elif path is not None and hexdata is None:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise click.BadParameter(f"{path!r}: {exc.strerror}", param_hint="--file") from None
    else:
        raise click.UsageError("give one of --hex or --file")
    if not 0 < len(data) <= limit:
        raise click.BadParameter(f"{len(data)} bytes: give 1..{limit}")
    return data
