"""stpd and stp command lines."""

from __future__ import annotations

import json
import os
import sys
import time
from ipaddress import IPv4Address

import click

from daemons.runtime import daemon, log as logsetup
from daemons.runtime.cliutil import metrics_option, reach_daemon, version_option
from daemons.runtime.config import ConfigError, fail
from daemons.wire.ula import parse_ula

from .client import DEFAULT_SOCKET, StClient, StError
from .constants import STP_PORT, STP_SERVE_PORT
from .core import Params, Timers

CTX = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
DEFAULT_PORT = STP_PORT
META_MAX = 4096  # the small JSON {"name", "size"} that precedes a file


@click.command(context_settings=CTX)
@click.option("--ulp", "ulp_path", default="/run/gsnd/gsn0.ulp", show_default=True, help="gsnd's ULP socket.")
@click.option("--api", "api_path", default=DEFAULT_SOCKET, show_default=True, help="The local API socket.")
@click.option("--harpd-socket", default="/run/harpd/control.sock", show_default=True,
              help="harpd's control socket, for IP->ULA resolution.")
@click.option("--peer", "peers", multiple=True, metavar="IP=ULA", help="Static IP->ULA entry (repeatable).")
@click.option("--data-vc", type=click.IntRange(1, 3), default=3, show_default=True, help="Default DATA VC.")
@click.option("--timer-scale", type=float, default=1.0, show_default=True, help="Multiply every ST timer.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info")
@metrics_option
@version_option
def stpd_main(ulp_path, api_path, harpd_socket, peers, data_vc, timer_scale, log_level, metrics) -> None:
    """Scheduled Transfer (ST) connection manager over GSN.

    Speaks ST (EtherType 0x8181; control on VC0, data on VC1-3) through gsnd's ULP
    socket, names peers by IP address (resolved by harpd or --peer), and offers
    local applications an API socket (see stpd/api.py; client: stpd.client, CLI: stp).
    """
    table = {}
    try:
        for p in peers:
            ip, _, ula = p.partition("=")
            table[IPv4Address(ip)] = parse_ula(ula)
    except ValueError as exc:
        fail(ConfigError(f"--peer {p!r}: {exc}"))
    try:
        listen = daemon.metrics_address(metrics)
    except ConfigError as exc:
        fail(exc)
    logsetup.setup(log_level)
    from .daemon import Stpd, StpdConfig

    timers = Timers(**{k: v * timer_scale if isinstance(v, float) else v for k, v in Timers().__dict__.items()})
    cfg = StpdConfig(ulp_path, api_path, harpd_socket, table, Params(data_vc=data_vc), timers)

    async def _main(nursery):
        stpd = Stpd(cfg)
        await nursery.start(stpd.run)
        await daemon.start_metrics(nursery, listen, stpd)

    daemon.run(_main, daemon.level_reloader(log_level))


def _client(sock: str) -> StClient:
    return reach_daemon("stp", sock, "stpd", lambda: StClient(sock))


def _target(spec: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    host, _, port = spec.partition(":")
    try:
        IPv4Address(host)
        return host, int(port) if port else default_port
    except ValueError:
        raise click.BadParameter(f"{spec!r} is not HOST[:PORT] with an IPv4 HOST") from None


class Bar:
    """A progress bar on stderr for transfers that take more than a moment."""

    def __init__(self, total: int, label: str, enabled: bool) -> None:
        self.total, self.label, self.enabled = max(total, 1), label, enabled
        self.t0 = time.monotonic()
        self.shown = False

    def __call__(self, done: int) -> None:
        dt = time.monotonic() - self.t0
        if not self.enabled or dt < 0.5:
            return
        frac = min(1.0, done / self.total)
        bar = "#" * int(frac * 30)
        rate = done / dt / 1e6
        click.echo(f"\r{self.label} [{bar:<30}] {frac * 100:5.1f}% {rate:8.1f} MB/s", err=True, nl=False)
        self.shown = True

    def finish(self, done: int) -> float:
        """Seconds since the start (the bar, if shown, completed)."""
        dt = time.monotonic() - self.t0
        if self.shown:
            self(done)
            click.echo("", err=True)
        return dt


@click.group(context_settings=CTX)
@click.option("--socket", "sock", default=DEFAULT_SOCKET, show_default=True, help="stpd's API socket.")
@version_option
@click.pass_context
def stp_main(ctx, sock) -> None:
    """Scheduled Transfer from the command line (talks to stpd).

    Exit status: 0 ok, 1 transfer or connection failed, 2 usage, 69 stpd not running.
    """
    ctx.obj = sock


@stp_main.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.argument("target")
@click.option("--vc", "dc", type=click.IntRange(1, 3), help="GSN VC for the data (default: stpd's).")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a terminal).")
@click.pass_obj
def send(sock, file, target, dc, progress) -> None:
    """Send FILE to HOST[:PORT] (default port 5001), where `stp recv` waits."""
    host, port = _target(target)
    size = os.path.getsize(file)
    with _client(sock) as st:
        try:
            vc = st.connect(host, port)
            st.send_bytes(vc, json.dumps({"name": os.path.basename(file), "size": size}).encode())
            bar = Bar(size, os.path.basename(file), sys.stderr.isatty() if progress is None else progress)
            with open(file, "rb") as f:
                n = st.send(vc, f, size, dc=dc, progress=bar)
            dt = bar.finish(n)
            st.close(vc)
        except StError as exc:
            click.echo(f"stp: send to {target}: {exc}", err=True)
            sys.exit(1)
    click.echo(f"sent {n} bytes to {host}:{port} in {dt:.2f} s ({n * 8 / max(dt, 1e-9) / 1e9:.2f} Gbit/s)")


@stp_main.command()
@click.argument("directory", type=click.Path(file_okay=False, exists=True, writable=True))
@click.option("--port", default=DEFAULT_PORT, show_default=True)
@click.option("--count", default=1, show_default=True, help="How many files to receive (0: for ever).")
@click.option("--progress/--no-progress", default=None)
@click.pass_obj
def recv(sock, directory, port, count, progress) -> None:
    """Receive files sent with `stp send` into DIRECTORY."""
    with _client(sock) as st:
        k = 0
        while count == 0 or k < count:
            try:
                vc, peer = st.accept(port)
                meta = json.loads(st.recv_bytes(vc, 4096))
                name = os.path.basename(str(meta["name"])) or "unnamed"
                size = int(meta["size"])
                bar = Bar(size, name, sys.stderr.isatty() if progress is None else progress)
                with open(os.path.join(directory, name), "w+b") as f:  # stpd writes it through the fd: read/write
                    n = st.recv(vc, f, size, progress=bar)
                dt = bar.finish(n)
            except (StError, ValueError, KeyError) as exc:
                click.echo(f"stp: receive: {exc}", err=True)
                sys.exit(1)
            if n != size:
                click.echo(f"stp: {name}: got {n} of {size} bytes", err=True)
                sys.exit(1)
            click.echo(f"received {name} ({n} bytes) from {peer} in {dt:.2f} s")
            k += 1


@stp_main.command()
@click.argument("target")
@click.option("-c", "--count", default=4, show_default=True)
@click.pass_obj
def ping(sock, target, count) -> None:
    """Connect to HOST[:PORT] and time RS/RSR status round trips."""
    host, port = _target(target)
    with _client(sock) as st:
        try:
            t0 = time.monotonic()
            vc = st.connect(host, port)
            click.echo(f"connected to {host}:{port} in {(time.monotonic() - t0) * 1000:.2f} ms (RC/CA)")
            for i in range(count):
                t = time.monotonic()
                slots = st.status(vc)["slots"]
                click.echo(f"RS/RSR from {host}: seq={i} time={(time.monotonic() - t) * 1000:.3f} ms slots={slots}")
            st.close(vc)
        except StError as exc:
            click.echo(f"stp: ping {target}: {exc}", err=True)
            sys.exit(1)


@stp_main.command()
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def status(sock, as_json) -> None:
    """Connections, slots, transfers and counters."""
    with _client(sock) as st:
        r = st.status()
    if as_json:
        click.echo(json.dumps(r, indent=2))
        return
    click.echo(f"stpd on ULA {r['ula'] or 'none (gsnd down?)'}")
    if r.get("scope") == "own":
        click.echo("(this client's connections only: every client's are shown to root)")
    click.echo(f"{'vc':>4} {'peer':<18} {'state':<10} {'uport':>6} {'slots':>6} {'tx':>3} {'rx':>3} {'regions':>7}")
    for v in r["vcs"]:
        click.echo(f"{v['vc']:>4} {v['peer']:<18} {v['state']:<10} {v['uport']:>6} {v['peer_slots']:>6} "
                   f"{v['sending']:>3} {v['receiving']:>3} {v['regions']:>7}")
    for v in r["vcs"]:
        for x in v.get("transfers", []):
            click.echo(f"  vc {v['vc']} transfer {x['xid']} {x['dir']} {x['done']}/{x['t_len']} bytes")
        for rid in v.get("region_ids", []):
            click.echo(f"  vc {v['vc']} peer region {rid}")
    for k, v in sorted({**r["counters"], **r["api"]}.items()):
        click.echo(f"  {k:<32} {v}")


@stp_main.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, readable=True))
@click.option("--port", default=STP_SERVE_PORT, show_default=True, help="ULP port to accept readers on.")
@click.option("--count", default=1, show_default=True, help="How many readers to serve (0: for ever).")
@click.pass_obj
def serve(sock, file, port, count) -> None:
    """Let `stp read` fetch FILE with RTR reads.

    Each reader connects, reads a small header (name and size), then the file; stpd
    answers both RTRs from FILE through its descriptor.
    """
    size = os.path.getsize(file)
    meta = json.dumps({"name": os.path.basename(file), "size": size}).encode()
    with _client(sock) as st:
        k = 0
        while count == 0 or k < count:
            try:
                vc, peer = st.accept(port)
                st.serve_bytes(vc, meta)
                with open(file, "rb") as f:
                    n = st.serve(vc, f, size)
            except StError as exc:
                click.echo(f"stp: serve: {exc}", err=True)
                sys.exit(1)
            click.echo(f"served {os.path.basename(file)} ({n} bytes) to {peer}")
            k += 1


@stp_main.command()
@click.argument("target")
@click.argument("directory", type=click.Path(file_okay=False, exists=True, writable=True))
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a terminal).")
@click.pass_obj
def read(sock, target, directory, progress) -> None:
    """Fetch the file that `stp serve` offers at HOST[:PORT] (default port 5002) into
    DIRECTORY, with RTR reads (the data still flows as RTS/CTS/DATA from the server)."""
    host, port = _target(target, STP_SERVE_PORT)
    with _client(sock) as st:
        try:
            vc = st.connect(host, port)
            meta = json.loads(st.read_bytes(vc, META_MAX))
            name = os.path.basename(str(meta["name"])) or "unnamed"
            size = int(meta["size"])
            bar = Bar(size, name, sys.stderr.isatty() if progress is None else progress)
            with open(os.path.join(directory, name), "w+b") as f:  # stpd writes it: read/write
                n = st.read(vc, f, size, progress=bar)
            dt = bar.finish(n)
            st.close(vc)
        except (StError, ValueError, KeyError, TypeError) as exc:
            click.echo(f"stp: read from {target}: {exc}", err=True)
            sys.exit(1)
    if n != size:
        click.echo(f"stp: {name}: got {n} of {size} bytes", err=True)
        sys.exit(1)
    click.echo(f"read {name} ({n} bytes) from {host}:{port} in {dt:.2f} s")


@stp_main.command()
@click.argument("vc", type=click.IntRange(1, 0xFFFFFFFE))
@click.argument("xid", type=click.IntRange(1, 0xFFFFFFFE))
@click.pass_obj
def abort(sock, vc, xid) -> None:
    """End transfer XID on connection VC (END): it fails at both ends, the
    connection stays.  The ids are in `stp status`."""
    with _client(sock) as st:
        try:
            st.abort(vc, xid)
        except StError as exc:
            click.echo(f"stp: abort: {exc}", err=True)
            sys.exit(1)
    click.echo(f"ended transfer {xid} on connection {vc}")


@stp_main.command()
@click.argument("vc", type=click.IntRange(1, 0xFFFFFFFE))
@click.argument("rid", type=click.IntRange(1, 0xFFFFFFFE))
@click.pass_obj
def release(sock, vc, rid) -> None:
    """Give the peer's region RID on connection VC back (END); later PUT/GET/FETCHOP
    on it fail.  The ids are in `stp status`."""
    with _client(sock) as st:
        try:
            st.release(vc, rid)
        except StError as exc:
            click.echo(f"stp: release: {exc}", err=True)
            sys.exit(1)
    click.echo(f"released region {rid} on connection {vc}")
