"""gsn-switch command line."""

from __future__ import annotations

import click

from ..runtime import daemon
from ..runtime.cliutil import metrics_option, version_option
from . import config as sconfig


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("-c", "--config", "config_path", type=click.Path(dir_okay=False), default="/etc/gsn/gsn-switch.toml",
              show_default=True, help="TOML config: [switch], [[port]], [[static]] (see etc/gsn-switch.toml).")
@click.option("--broadcast/--no-broadcast", default=None, help="Override switch.broadcast.")
@click.option("--runtime-dir", help="Where control.sock lives. [/run/gsn-switch]")
@click.option("--cable-mtu", type=int, help="Override [cable] mtu: the underlay MTU bounding every port's "
              "datagrams (a port's own mtu still wins). [each port's kernel path MTU]")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]))
@metrics_option
@click.option("--check", is_flag=True, help="Validate the configuration and exit.")
@version_option
def main(config_path, broadcast, runtime_dir, cable_mtu, log_level, metrics, check) -> None:
    """GSN switch: joins UDP cables (ports) into one HIPPI-6400 fabric.

    Forwards Messages by destination ULA, assigns ULAs 02:47:53:<id>:<port>:00 to
    endpoints over Admin, holds static ULA->port entries (e.g. the HARP server
    00:10:3b:ff:ff:e0), and copies broadcasts to every port when broadcast is on.
    CHANGE_ROUTE and other configuration Admin are obeyed only from ports marked
    `management = true` (or `switch = true`); a Message whose source ULA is not its ingress port's is
    dropped unless the port is marked `trust_source = true` (an uplink).
    A port marked `switch = true` is cabled to another gsn-switch: the switches
    map the fabric over Admin, the lowest id programs every switch's routes, and
    broadcast follows a spanning tree.
    A port with `key_file` (`gsnctl genkey -o FILE`; the other end holds the same
    key) authenticates its cable: unsealed, forged and replayed datagrams are
    dropped and counted (rx_auth_*).
    `gsnctl -s RUNTIME_DIR/control.sock status` shows ports and counters,
    `gsnctl -s RUNTIME_DIR/control.sock fabric` the fabric map.
    Exit status 78 means a bad configuration.
    """
    def _switch(cfg):
        from .daemon import SwitchDaemon

        return SwitchDaemon(cfg)

    overrides = dict(broadcast=broadcast, runtime_dir=runtime_dir, log_level=log_level, cable_mtu=cable_mtu)
    daemon.serve(lambda: sconfig.load(config_path, overrides), config_path, _switch, check=check, metrics=metrics)
