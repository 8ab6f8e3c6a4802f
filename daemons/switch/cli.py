"""gsn-switch command line."""

from __future__ import annotations

import click

from ..runtime import daemon, log as logsetup
from ..runtime.config import ConfigError, fail
from . import config as sconfig


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("-c", "--config", "config_path", type=click.Path(dir_okay=False), default="/etc/gsn/gsn-switch.toml",
              show_default=True, help="TOML config: [switch], [[port]], [[static]] (see etc/gsn-switch.toml).")
@click.option("--broadcast/--no-broadcast", default=None, help="Override switch.broadcast.")
@click.option("--runtime-dir", help="Where control.sock lives. [/run/gsn-switch]")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]))
@click.option("--check", is_flag=True, help="Validate the configuration and exit.")
def main(config_path, broadcast, runtime_dir, log_level, check) -> None:
    """GSN switch: joins UDP cables (ports) into one HIPPI-6400 fabric.

    Forwards Messages by destination ULA, assigns ULAs 02:47:53:<id>:<port>:00 to
    endpoints over Admin, holds static ULA->port entries (e.g. the HARP server
    00:10:3b:ff:ff:e0), and copies broadcasts to every port when broadcast is on.
    `gsnctl -s RUNTIME_DIR/control.sock status` shows ports and counters.
    Exit status 78 means a bad configuration.
    """
    try:
        cfg = sconfig.load(config_path, dict(broadcast=broadcast, runtime_dir=runtime_dir, log_level=log_level))
    except ConfigError as exc:
        fail(exc)
    if check:
        click.echo(f"{config_path}: ok")
        return
    logsetup.setup(cfg.log_level)
    from .daemon import SwitchDaemon

    async def _main(nursery):
        await nursery.start(SwitchDaemon(cfg).run)

    daemon.run(_main)
