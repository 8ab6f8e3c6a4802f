"""gsnd command line."""

from __future__ import annotations

import click

from ..runtime import daemon
from ..runtime.cliutil import metrics_option, version_option
from . import config as gconfig


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("-c", "--config", "config_path", type=click.Path(dir_okay=False),
              help="TOML config file (see etc/gsnd.toml). Flags below override it.")
@click.option("-i", "--interface", help="Port/interface name; names the sockets gsnN.ulp/.ctl. [gsn0]")
@click.option("--local", help="Local UDP address of the cable, host:port. [0.0.0.0:6400]")
@click.option("--peer", help="UDP address of the switch port or the peer endpoint, host:port.")
@click.option("--cable-id", type=int, help="Cable id; both ends must agree. [1]")
@click.option("--cable-mtu", type=int, help="MTU of the underlay path to the peer: bounds the cable's datagrams "
              "(Don't Fragment). [the kernel's path MTU to the peer]")
@click.option("--key-file", help="The cable's key (`gsnctl genkey`; the peer holds the same one, mode 0600): "
              "every datagram is authenticated, replays dropped. [none: an unauthenticated cable]")
@click.option("--ula", help="This port's ULA for back-to-back cables (a switch assigns one otherwise).")
@click.option("--runtime-dir", help="Where the ULP and control sockets live. [/run/gsnd]")
@click.option("--tap", help="TAP interface for IP over GSN (created, or attached if it exists). [= --interface]")
@click.option("--no-tap", is_flag=True, help="No TAP: ULP socket only.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), help="[info]")
@metrics_option
@click.option("--check", is_flag=True, help="Validate the configuration and exit.")
@version_option
def main(config_path, interface, local, peer, cable_id, cable_mtu, key_file, ula, runtime_dir, tap, no_tap, log_level,
         metrics,
         check) -> None:
    """GSN endpoint daemon: one HIPPI-6400 port over a UDP cable.

    gsnd brings the link up (RESET/RESET_ACK), learns its ULA from the switch
    (or uses --ula back-to-back), carries IP over GSN on a TAP interface (MAC =
    ULA, MTU 65280, carrier = link state; address it with `ip addr`), and offers
    local daemons a ULP socket (RUNTIME_DIR/IFACE.ulp) to send and receive GSN
    Messages by EtherType, plus a control socket for `gsnctl status`.

    \b
    Example (back-to-back on loopback):
      gsnd --peer 127.0.0.1:6401 --local 127.0.0.1:6400 --ula 02:00:00:00:00:01 --runtime-dir /tmp/a
    Authenticated (the other end gives the same --key-file):
      gsnctl genkey -o /tmp/cable.key
      gsnd --peer 127.0.0.1:6401 --local 127.0.0.1:6400 --ula 02:00:00:00:00:01 --runtime-dir /tmp/a \\
           --key-file /tmp/cable.key
    Exit status 78 means a bad configuration.
    """
    overrides = dict(interface=interface, local=local, peer=peer, cable_id=cable_id, cable_mtu=cable_mtu,
                     key_file=key_file, ula=ula, runtime_dir=runtime_dir, log_level=log_level, tap=tap,
                     no_tap=no_tap or None)

    def _gsnd(cfg):
        from .daemon import Gsnd

        return Gsnd(cfg)

    daemon.serve(lambda: gconfig.load(config_path, overrides), config_path or "command line", _gsnd, check=check,
                 metrics=metrics)
