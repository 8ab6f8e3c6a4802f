"""pktway-san: a generic datagram SAN emulated by one UDP switch process (spec
pktway.md §3.8), so that pktwayd can join GSN fabrics to a SAN of another kind.
(ServerNet and InfiniBand-style fabrics have their own emulations: servernet/ and ib/.)"""

from __future__ import annotations

import os
import socket
from collections import Counter
from dataclasses import dataclass, field
from functools import partial

import click
import structlog
import trio

from daemons.io.udp import port_map, resolve
from daemons.runtime import daemon
from daemons.runtime.cliutil import metrics_option, version_option
from daemons.runtime.config import ConfigError
from daemons.runtime.control import serve_control
from daemons.runtime.schema import Schema
from daemons.runtime.log import CounterLog
from daemons.runtime.metrics import Family, counter_families
from daemons.runtime.notify import sd_notify
from daemons.runtime.oserrors import count_udp_error

from .udpsan import MAX_DATAGRAM, SanSwitch

log = structlog.get_logger("pktway-san")

# The control socket's requests.
CONTROL_SCHEMA = Schema({"status": {}})
CTX = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@dataclass
class SanConfig:
    listen: tuple
    ports: dict[int, tuple] = field(default_factory=dict)
    mtu: int = 0
    kind: str = "datagram"
    control: str | None = None
    log_level: str = "info"


def parse(listen: str, ports, mtu: int, kind: str, control: str | None, level: str) -> SanConfig:
    try:
        cfg = SanConfig(resolve(listen), mtu=mtu, kind=kind, control=control, log_level=level)
    except ValueError as exc:
        raise ConfigError(f"--listen: {exc}") from None
    if not 0 <= mtu <= MAX_DATAGRAM - 3:
        raise ConfigError(f"--mtu: {mtu} is not 0..{MAX_DATAGRAM - 3} bytes")
    try:
        cfg.ports = port_map(ports, 255, "switch")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return cfg


class SanSwitchd:
    def __init__(self, cfg: SanConfig) -> None:
        self.cfg = cfg
        self.core = SanSwitch(cfg.ports, cfg.mtu)
        self.drops = CounterLog(log)
        self.control_counters: Counter[str] = Counter()
        self.sock = socket.socket(socket.AF_INET6 if ":" in cfg.listen[0] else socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(cfg.listen)
        self.sock.setblocking(False)

    def metrics(self) -> list[Family]:
        return [Family("gsn_san_ports", "gauge", "Ports of the emulated SAN switch.")
                .add(len(self.cfg.ports), kind=self.cfg.kind),
                *counter_families(self.core.counters, "san", kind=self.cfg.kind),
                *counter_families(self.control_counters, "control")]

    async def _control(self, req: dict) -> dict:
        return {"ok": True, "kind": self.cfg.kind, "ports": {p: f"{a[0]}:{a[1]}" for p, a in self.cfg.ports.items()},
                "counters": dict(self.core.counters), "control": dict(self.control_counters)}

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            if self.cfg.control:
                os.makedirs(os.path.dirname(self.cfg.control) or ".", exist_ok=True)
                await nursery.start(partial(serve_control, self.cfg.control, self._control, CONTROL_SCHEMA,
                                            counters=self.control_counters))
            log.info("pktway-san.started", kind=self.cfg.kind, listen=self.cfg.listen, ports=len(self.cfg.ports))
            sd_notify("READY=1")
            sd_notify(f"STATUS={self.cfg.kind} SAN, {len(self.cfg.ports)} ports")
            task_status.started()
            while True:
                await trio.lowlevel.wait_readable(self.sock)
                for _ in range(256):
                    try:
                        data, src = self.sock.recvfrom(MAX_DATAGRAM + 1)
                    except BlockingIOError:
                        break
                    except OSError as exc:
                        count_udp_error(self.core.counters, exc, prefix="rx_error_")
                        continue
                    for dst, out in self.core.receive(src[:2], data):
                        try:
                            self.sock.sendto(out, dst)
                        except OSError as exc:
                            count_udp_error(self.core.counters, exc)
                self.drops.update("switch", self.core.counters, trio.current_time())
                await trio.lowlevel.checkpoint()


@click.command(context_settings=CTX)
@click.option("--listen", required=True, help="The switch's UDP address, HOST:PORT (its ports send here).")
@click.option("--port", "ports", multiple=True, metavar="N=HOST:PORT",
              help="Port N (0..255) is the node or half-router at that UDP address. Repeat for each port.")
@click.option("--mtu", default=0, show_default=True, help="Largest packet in bytes; bigger ones are dropped, counted "
              "(0 = what one datagram holds).")
@click.option("--kind", type=click.Choice(["datagram"]), default="datagram", show_default=True,
              help="What the SAN stands for (logs and status only: the framing is the same).")
@click.option("--control", help="Control socket answering {\"cmd\": \"status\"} with the per-port counters.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True)
@metrics_option
@click.option("--check", is_flag=True, help="Validate the options and exit.")
@version_option
def main(listen, ports, mtu, kind, control, log_level, metrics, check) -> None:
    """An emulated datagram SAN: one switch, numbered ports, source-routed.

    A node sends [out port, 0x03, 0x00] + packet to the switch; the switch delivers
    [in port, 0x03, 0x00] + packet to that port (the route back).  In pktwayd, a half on
    such a SAN has kind = "udp", and its LRT names nodes by port.

    (A real ServerNet SAN, X and Y fabrics, is snet-router + snetd: pktwayd half kind "servernet".)

    Example, a three-port datagram SAN on loopback:

      pktway-san --listen 127.0.0.1:7400 --port 1=127.0.0.1:7401 --port 2=127.0.0.1:7402 --port 3=127.0.0.1:7403
    """
    daemon.serve(lambda: parse(listen, ports, mtu, kind, control, log_level), "pktway-san", SanSwitchd, check=check,
                 metrics=metrics)
