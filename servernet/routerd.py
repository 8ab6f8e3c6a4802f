"""snet-router: one ServerNet router process serving one fabric (X or Y) over UDP;
servernet.router.RouterCore is the oracle of its compiled forwarding loop."""

from __future__ import annotations

import os
import socket
import threading
from collections import Counter
from dataclasses import dataclass, field
from functools import partial

import click
import structlog
import trio

from daemons.io.udp import port_map, resolve
from daemons.runtime import daemon
from daemons.runtime.cliutil import version_option
from daemons.runtime.config import ConfigError
from daemons.runtime.control import serve_control
from daemons.runtime.log import CounterLog
from daemons.runtime.notify import sd_notify
from daemons.runtime.schema import Schema

from ._snetfwd import Router
from .constants import DROP_LOG_S, FORWARD_POLL_MS, ROUTER_PORTS, SOCKET_BUFFER_BYTES, Fabric
from .router import Route, parse_route, route_table

log = structlog.get_logger("snet-router")
CONTROL_SCHEMA = Schema({"status": {}})
CTX = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@dataclass
class RouterConfig:
    fabric: int
    listen: tuple
    ports: dict[int, tuple] = field(default_factory=dict)
    routes: list[Route] = field(default_factory=list)
    enables: dict[int, frozenset[int]] = field(default_factory=dict)
    control: str | None = None
    log_level: str = "info"


def parse(fabric: str, listen: str, ports, routes, enables, control: str | None, level: str) -> RouterConfig:
    try:
        cfg = RouterConfig(Fabric[fabric.upper()], resolve(listen), control=control, log_level=level)
    except ValueError as exc:
        raise ConfigError(f"--listen: {exc}") from None
    try:
        cfg.ports = port_map(ports, ROUTER_PORTS - 1, "router")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    for spec in routes:
        try:
            r = parse_route(spec)
        except ValueError as exc:
            raise ConfigError(f"--route: {exc}") from None
        if r.port not in cfg.ports:
            raise ConfigError(f"--route {spec!r}: port {r.port} is not cabled (no --port {r.port}=...)")
        if any((o.did, o.bits) == (r.did, r.bits) for o in cfg.routes):
            raise ConfigError(f"--route {spec!r}: that DID/prefix is routed twice")
        cfg.routes.append(r)
    for spec in enables:
        inp, sep, outs = spec.partition("=")
        try:
            i, allowed = int(inp), frozenset(int(o) for o in outs.split(",") if o)
        except ValueError:
            raise ConfigError(f"--enable {spec!r}: expected IN=OUT,OUT,...") from None
        if not sep or i not in cfg.ports or not allowed <= set(cfg.ports):
            raise ConfigError(f"--enable {spec!r}: ports must be cabled ones")
        cfg.enables[i] = allowed
    return cfg


class Routerd:
    """The forwarding loop is compiled (servernet/_snetfwd.c) and runs in a thread of its
    own that stays in C without the GIL (Router.serve, on a socket it makes blocking);
    trio serves the control socket and logs the drops."""

    def __init__(self, cfg: RouterConfig) -> None:
        self.cfg = cfg
        self.routes = sorted(cfg.routes, key=lambda r: -r.bits)
        self.control_counters: Counter[str] = Counter()
        self.drops = CounterLog(log)
        self.sock = socket.socket(socket.AF_INET6 if ":" in cfg.listen[0] else socket.AF_INET, socket.SOCK_DGRAM)
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            self.sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER_BYTES)
        self.sock.bind(cfg.listen)
        self.fwd = Router(self.sock.fileno(), cfg.fabric, cfg.ports, route_table(cfg.routes), cfg.enables)
        self.thread = threading.Thread(target=self._forward, name="snet-forward", daemon=True)

    async def _control(self, req: dict) -> dict:
        host, port = self.cfg.listen
        return {"ok": True, "fabric": Fabric(self.cfg.fabric).name, "listen": f"{host}:{port}",
                "ports": {p: f"{a[0]}:{a[1]}" for p, a in self.cfg.ports.items()},
                "routes": [f"{r.did:#07x}/{r.bits}={r.port}" for r in self.routes],
                "counters": self.fwd.counters(), "control": dict(self.control_counters)}

    def _forward(self) -> None:
        self.fwd.serve(FORWARD_POLL_MS)  # in C until stop(): no Python per wake-up

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        thread = self.thread
        try:
            async with trio.open_nursery() as nursery:
                if self.cfg.control:
                    os.makedirs(os.path.dirname(self.cfg.control) or ".", exist_ok=True)
                    await nursery.start(partial(serve_control, self.cfg.control, self._control, CONTROL_SCHEMA,
                                                counters=self.control_counters))
                thread.start()
                log.info("snet-router.started", fabric=Fabric(self.cfg.fabric).name, listen=self.cfg.listen,
                         ports=len(self.cfg.ports), routes=len(self.cfg.routes))
                sd_notify("READY=1")
                task_status.started()
                while True:
                    await trio.sleep(DROP_LOG_S)
                    self.drops.update("router", self.fwd.counters(), trio.current_time())
                    if not thread.is_alive():  # it never ends on its own: stop, so that systemd restarts us
                        raise RuntimeError("snet-router: the forwarding thread ended")
        finally:
            self.fwd.stop()
            if thread.is_alive():
                thread.join()  # at most FORWARD_POLL_MS: the socket outlives the loop using its fd
            self.sock.close()


@click.command(context_settings=CTX)
@click.option("--fabric", type=click.Choice(["x", "y"], case_sensitive=False), required=True,
              help="The fabric this router belongs to; packets sent on the other one are dropped.")
@click.option("--listen", required=True, help="This router's UDP address, HOST:PORT (every cabled port sends here).")
@click.option("--port", "ports", multiple=True, metavar="N=HOST:PORT",
              help=f"Port N (0..{ROUTER_PORTS - 1}) is cabled to the node or router at that UDP address. Repeat.")
@click.option("--route", "routes", multiple=True, metavar="DID[/BITS]=N",
              help="Packets for DID (20-bit), or for every DID sharing its upper BITS bits, leave by port N. "
                   "The longest prefix wins. Repeat.")
@click.option("--enable", "enables", multiple=True, metavar="IN=OUT,...",
              help="Packets entering on port IN may leave only by these ports (deadlock masks). Repeat.")
@click.option("--control", help="Control socket answering {\"cmd\": \"status\"} (counters per port and drop reason).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True)
@click.option("--check", is_flag=True, help="Validate the options and exit.")
@version_option
def main(fabric, listen, ports, routes, enables, control, log_level, check) -> None:
    """A ServerNet router for one fabric (X or Y), emulated over UDP.

    It reads the 20-bit DID from the first 3 bytes of each packet and forwards the
    datagram by its routing table.  A packet with a bad CRC goes on tagged TPB (the
    end node drops and counts it).  Run one router per fabric (X and Y on separate
    ports); routers of one fabric can be cabled to each other by a --port.

    Example, fabric X joining nodes 0x04001 and 0x08001 on loopback:

    \b
      snet-router --fabric x --listen 127.0.0.1:7500 \\
        --port 0=127.0.0.1:7510 --port 1=127.0.0.1:7520 \\
        --route 0x04001=0 --route 0x08001=1 --control /run/servernet/x.sock
    """
    daemon.serve(lambda: parse(fabric, listen, ports, routes, enables, control, log_level), "snet-router", Routerd,
                 check=check)
