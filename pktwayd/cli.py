"""pktwayd and pktway command lines."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TypeVar

import click

from daemons.runtime import daemon
from daemons.runtime.cliutil import metrics_option, reach_daemon, version_option
from daemons.runtime.control import request
from daemons.wire.ula import parse_ula

from .constants import IP_MTU_RECHECK_S as K_IP_MTU_RECHECK_S
from .constants import MEMORY_BOARD_MAX, MEMORY_READ_MAX

T = TypeVar("T")

CTX = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.command(context_settings=CTX)
@click.option("-c", "--config", "path", default="/etc/gsn/pktwayd.toml", show_default=True,
              help="Router config: [router] and two [[half]] tables (see etc/pktwayd.toml).")
@metrics_option
@click.option("--check", is_flag=True, help="Validate the configuration and exit.")
@version_option
def pktwayd_main(path, metrics, check) -> None:
    """PacketWay router: two half-routers joining two GSN fabrics (EEP + RRP level D)."""
    from .config import load

    def _router(cfg):
        from .daemon import Pktwayd

        return Pktwayd(cfg)

    daemon.serve(lambda: load(path), path, _router, check=check, metrics=metrics)


def hops_text(hops) -> str:
    """An SR as the router sent it: L2RHs (route bytes in hex) and symbols (spec §2.5)."""
    from .eep import L2RH

    return " ".join(h.route.hex() if isinstance(h, L2RH) else f"symbol:{h.stype:05x}" for h in hops)


def _int(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a number (0x.. hex or decimal)") from None


@click.group(context_settings=CTX)
@version_option
def pktway_main() -> None:
    """PacketWay from a node: send, listen, plan routes, find nodes, read router tables.

    Exit status: 0 ok, 1 no answer or unknown destination, 2 usage, 69 daemon not running.
    """


def _snet_config(path: str, router: str):
    """(the node's ServerNet config, the half-router's route) of --servernet and --router."""
    from daemons.runtime.config import ConfigError
    from servernet.config import load
    from servernet.ring import ring_windows, route

    try:
        cfg = load(path)
        ring_windows(cfg.windows)
    except (ConfigError, ValueError) as exc:
        raise click.BadParameter(str(exc), param_hint="--servernet") from None
    did = _int(router)
    if cfg.peer(str(did)) is None:
        raise click.BadParameter(f"{did:#x} is not a [[peer]] in {path}", param_hint="--router")
    try:
        return cfg, route(did)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--router") from None


def _snet_node(path: str, addr: str, router: str, dialect: str, **kw):
    from servernet.pwport import BlockingSnetPort

    from .node import Node

    cfg, hr = _snet_config(path, router)
    try:
        return Node(BlockingSnetPort(cfg), _int(addr), hr, dialect=dialect, **kw)
    except OSError as exc:
        click.echo(f"pktway: {path}: {exc.strerror or exc}", err=True)
        sys.exit(71)


def _capability(text: str) -> tuple[int, bytes]:
    """CC[:p1,p2,...] -> (CC, params)."""
    cc, _, params = text.partition(":")
    try:
        return _int(cc), bytes(_int(x) for x in params.split(",") if x)
    except ValueError:
        raise click.BadParameter(f"{text!r}: parameters are bytes 0..255", param_hint="--capability") from None


def _node(ulp: str | None, san: str | None, ib: str | None, addr: str, router: str, dialect: str,
          name: str | None = None, servernet: str | None = None, caps=(), groups=(), memory: int = 0):
    from daemons.io.udp import resolve

    from .node import Node
    from .udpsan import UdpSanPort, native

    kw = {"name": name.encode() if name else None, "caps": caps, "groups": groups, "memory": memory}
    if sum(x is not None for x in (ulp, san, ib, servernet)) != 1:
        raise click.UsageError("give one of --ulp (a GSN fabric), --san (a datagram SAN), --ib (an InfiniBand-style "
                               "fabric) or --servernet (a ServerNet SAN)")
    if ib is not None:
        return _ib_node(ib, _int(addr), router, dialect, **kw)
    if servernet is not None:
        return _snet_node(servernet, addr, router, dialect, **kw)
    if ulp is not None:
        return reach_daemon("pktway", ulp, "gsnd", lambda: Node(ulp, _int(addr), parse_ula(router), dialect=dialect,
                                                                **kw))
    assert san is not None  # exactly one of the four, checked above
    try:
        switch, local, port = resolve(san.split(",")[0]), resolve(san.split(",")[1]), _int(san.split(",")[2])
        return Node(UdpSanPort(switch, local, port), _int(addr), native(_int(router)), dialect=dialect, **kw)
    except (IndexError, ValueError) as exc:
        raise click.BadParameter(f"{san!r}: {exc}; expected SWITCH_HOST:PORT,LOCAL_HOST:PORT,MY_PORT",
                                 param_hint="--san") from None
    except OSError as exc:
        click.echo(f"pktway: {san}: {exc.strerror or exc}", err=True)
        sys.exit(71)


def _ib_args(ib: str, router: str):
    """((GUID, local, switch, SM, P_Key), the half-router's L2RH) of --ib and --router."""
    from daemons.io.udp import resolve
    from ib.constants import QPN_PACKETWAY
    from ib.udport import route

    try:
        parts = ib.split(",")
        guid, local, switch, sm = int(parts[0], 16), resolve(parts[1]), resolve(parts[2]), resolve(parts[3])
        pkey = _int(parts[4]) if len(parts) > 4 else 0xFFFF
        lid, _, qpn = router.partition(":")
        return (guid, local, switch, sm, pkey), route(_int(lid), _int(qpn) if qpn else QPN_PACKETWAY)
    except (IndexError, ValueError) as exc:
        raise click.BadParameter(f"{ib!r} / --router {router!r}: {exc}; expected GUID,LOCAL_HOST:PORT,"
                                 "SWITCH_HOST:PORT,SM_HOST:PORT[,PKEY] and --router LID[:QPN]", param_hint="--ib") from None


def _ib_node(ib: str, addr: int, router: str, dialect: str, **kw):
    from ib.udport import BlockingIbPort

    from .node import Node

    args, hr = _ib_args(ib, router)
    try:
        return Node(BlockingIbPort(*args), addr, hr, dialect=dialect, **kw)
    except OSError as exc:
        click.echo(f"pktway: {ib}: {exc.strerror or exc}", err=True)
        sys.exit(71)
    except TimeoutError as exc:
        click.echo(f"pktway: {ib}: {exc}", err=True)
        sys.exit(69)


NODE_OPTS = [
    click.option("--ulp", help="This host's gsnd ULP socket (a node on a GSN fabric)."),
    click.option("--san", help="A node on a datagram SAN (pktway-san): SWITCH_HOST:PORT,LOCAL_HOST:PORT,MY_PORT."),
    click.option("--ib", help="A node on an InfiniBand-style fabric (ib-sm, ib-switch): "
                 "GUID,LOCAL_HOST:PORT,SWITCH_HOST:PORT,SM_HOST:PORT[,PKEY]."),
    click.option("--servernet", type=click.Path(exists=True, dir_okay=False),
                 help="A node on a ServerNet SAN: its snetd-style TOML (ID, fabric X and Y sockets, [[peer]]s, "
                      "and windows pktway-ring (16 pages, per_source = true) and pktway-bell "
                      "(the next page, interrupt = true))."),
    click.option("--addr", required=True, help="This node's PacketWay address (e.g. 0x40)."),
    click.option("--router", required=True, help="The half-router on this SAN: its ULA (GSN), port number (--san), "
                 "LID[:QPN] (--ib) or ServerNet ID (--servernet)."),
    click.option("--dialect", type=click.Choice(["pw0", "mw5"]), default="pw0", show_default=True,
                 help="pw0 = PacketWay EEP, mw5 = MessageWay v5, as the SAN's router half is configured."),
]


def node_options(f):
    for opt in reversed(NODE_OPTS):
        f = opt(f)
    return f


@pktway_main.command()
@node_options
@click.argument("dest")
@click.argument("text")
@click.option("--l2", is_flag=True, help="Plan an L2 route first (GVL2) and send along it.")
def send(ulp, san, ib, servernet, addr, router, dialect, dest, text, l2) -> None:
    """Send TEXT to DEST (L3 through the router, or L2 along a planned route)."""
    from .node import PktwayError

    with _node(ulp, san, ib, addr, router, dialect, servernet=servernet) as node:
        route = ()
        if l2:
            try:
                routes = node.route(_int(dest))
            except (PktwayError, TimeoutError) as exc:
                click.echo(f"pktway: {exc}", err=True)
                sys.exit(1)
            if not isinstance(routes, list) or not routes:
                click.echo(f"pktway: no L2 route from this router: {routes}", err=True)
                sys.exit(1)
            route = routes[0][1]
        node.send(_int(dest), text.encode(), route=route)


@pktway_main.command()
@node_options
@click.option("--count", default=1, show_default=True, help="Stop after this many packets (0 = never).")
@click.option("--timeout", default=10.0, show_default=True, help="Give up after this many quiet seconds.")
@click.option("--name", help="Announce this node under a name (answers to TELL --name).")
@click.option("--capability", "caps", multiple=True, metavar="CC[:p1,...]",
              help="A capability to announce and answer TELL with (repeatable), e.g. 7:4,8.")
@click.option("--group", "groups", multiple=True, metavar="ADDR",
              help="Also listen to this logical address, 0xE00000-0xEFFFFF (repeatable; announced to the router).")
@click.option("--memory", type=click.IntRange(0, MEMORY_BOARD_MAX), default=0, metavar="BYTES",
              help=f"Serve a memory board of this many bytes (0..{MEMORY_BOARD_MAX}) to memory READ/WRITE packets "
                   "(pktway memory-read / memory-write) while listening.")
def listen(ulp, san, ib, servernet, addr, router, dialect, count, timeout, name, caps, groups, memory) -> None:
    """Print packets addressed to this node.

    At start the node announces itself (INFO to Hey-You), so the router registers it
    without configuration; while listening it answers "who are you" (WRU) and queries
    about itself (TELL by its address, name or a capability, level C)."""
    logical = [_int(g) for g in groups]
    if any(g & 0xF00000 != 0xE00000 for g in logical):
        raise click.BadParameter("logical addresses are 0xE00000-0xEFFFFF", param_hint="--group")
    with _node(ulp, san, ib, addr, router, dialect, name, servernet=servernet,
               caps=[_capability(c) for c in caps], groups=logical, memory=memory) as node:
        node.announce()
        received = 0
        while count == 0 or received < count:
            received += 1
            try:
                pkt = node.recv(timeout)
            except TimeoutError:
                click.echo("pktway: nothing received", err=True)
                sys.exit(1)
            to = f" to {pkt.dt:#08x}" if pkt.dt != node.addr else ""
            click.echo(f"from {pkt.sa:#08x}{to} pt={pkt.pt:#06x} te={pkt.te}: {pkt.data.rstrip(bytes(1))!r}")


def _answer(ask: Callable[[], T]) -> T:
    """What ``ask`` (a query to the router, or a node) got; no answer or one that cannot be
    read is one line and exit 1."""
    from .node import PktwayError

    try:
        return ask()
    except TimeoutError:
        click.echo("pktway: no answer", err=True)
    except PktwayError as exc:
        click.echo(f"pktway: {exc}", err=True)
    sys.exit(1)


@pktway_main.command()
@node_options
@click.argument("dest")
def route(ulp, san, ib, servernet, addr, router, dialect, dest) -> None:
    """L2 routes to DEST with Q and MTU (GVL2), or the redirect."""
    with _node(ulp, san, ib, addr, router, dialect, servernet=servernet) as node:
        routes = _answer(lambda: node.route(_int(dest)))
    if isinstance(routes, tuple):
        click.echo(f"redirect: use half-router {routes[1]:#08x}")
        return
    for q, hops, mtu in routes:
        click.echo(f"Q={q} MTU={mtu} words  SR=" + hops_text(hops))


@pktway_main.command()
@node_options
@click.option("--name", help="Node name to look for.")
@click.option("--capability", help="CC[:p1,p2,...], e.g. 7:8 = floating-point DSP with 64-bit IEEE words.")
@click.option("--address", help="A node's PacketWay address to look up.")
@click.option("--ask-node", is_flag=True, help="With --address: ask that node itself (TELL by L3), not the router.")
def find(ulp, san, ib, servernet, addr, router, dialect, name, capability, address, ask_node) -> None:
    """Find nodes by name, capability or address (TELL -> INFO)."""
    if sum(x is not None for x in (name, capability, address)) != 1:
        raise click.UsageError("give exactly one of --name, --capability and --address")
    if ask_node and address is None:
        raise click.UsageError("--ask-node asks the node at --address")
    cap = _capability(capability) if capability is not None else None
    with _node(ulp, san, ib, addr, router, dialect, servernet=servernet) as node:
        found = _answer(lambda: node.find(name=name.encode() if name else None, capability=cap,
                                          address=_int(address) if address is not None else None, ask_node=ask_node))
    if not found:
        click.echo("pktway: no such node", err=True)
        sys.exit(1)
    for n in found:
        caps = " ".join(f"CC{cc}{params}" for cc, params in n["caps"])
        click.echo(f"{n['addr']:#08x}  {n['name'] or '-':<12} {caps}")


@pktway_main.command()
@node_options
@click.argument("dest")
def hrto(ulp, san, ib, servernet, addr, router, dialect, dest) -> None:
    """Which half-router should I use for DEST (HRTO -> RDRC)."""
    with _node(ulp, san, ib, addr, router, dialect, servernet=servernet) as node:
        via = _answer(lambda: node.which_router(_int(dest)))
    click.echo(f"{_int(dest):#08x} is on this SAN" if via == _int(dest) else f"use half-router {via:#08x}")


def _hex(text: str, what: str) -> bytes:
    try:
        return bytes.fromhex(text.replace(":", ""))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not hex bytes (e.g. 00ff10 or 00:ff:10)", param_hint=what) from None


@pktway_main.command("memory-write")
@node_options
@click.argument("dest")
@click.argument("address")
@click.argument("data")
def memory_write(ulp, san, ib, servernet, addr, router, dialect, dest, address, data) -> None:
    """Write DATA (hex bytes) at ADDRESS of node DEST's memory board (a memory WRITE packet, L3).

    The board is served by e.g. `pktway listen --memory BYTES`; a write beyond it is
    dropped there (counted), with no answer."""
    body = _hex(data, "DATA")
    with _node(ulp, san, ib, addr, router, dialect, servernet=servernet) as node:
        node.write_memory(_int(dest), _int(address), body)


@pktway_main.command("memory-read")
@node_options
@click.argument("dest")
@click.argument("address")
@click.argument("count")
@click.option("--timeout", default=5.0, show_default=True, help="Seconds to wait for the answer.")
def memory_read(ulp, san, ib, servernet, addr, router, dialect, dest, address, count, timeout) -> None:
    """Read COUNT bytes at ADDRESS of node DEST's memory board (a memory READ packet, answered
    by a WRITE of those bytes); prints them in hex.  Exit 1 without an answer (out of range
    or no board: the node drops the READ, counted)."""
    n = _int(count)
    if not 1 <= n <= MEMORY_READ_MAX:
        raise click.BadParameter(f"{n} is not 1..{MEMORY_READ_MAX}", param_hint="COUNT")
    with _node(ulp, san, ib, addr, router, dialect, servernet=servernet) as node:
        try:
            data = node.read_memory(_int(dest), _int(address), n, timeout)
        except TimeoutError:
            click.echo("pktway: no answer", err=True)
            sys.exit(1)
    click.echo(data.hex())


@pktway_main.command()
@node_options
@click.argument("via")
@click.argument("dest")
@click.argument("text")
@click.option("--l2rh", "l2rhs", multiple=True, metavar="HEX",
              help="Route bytes of an L2RH the inner packet carries (repeatable, in order, e.g. a ULA or a "
                   "datagram-SAN port as `pktway route` prints them): VIA routes it at level 2 from there.")
def embed(ulp, san, ib, servernet, addr, router, dialect, via, dest, text, l2rhs) -> None:
    """Send TEXT to DEST inside an embedded packet: L3 to node VIA, which unwraps it and sends
    the inner packet on (along its L2RHs, or L3 through VIA's router)."""
    from .constants import PT
    from .eep import L2RH, Packet

    hops = tuple(L2RH(_hex(h, "--l2rh")) for h in l2rhs)
    with _node(ulp, san, ib, addr, router, dialect, servernet=servernet) as node:
        inner = Packet(dt=_int(dest), sa=node.addr, pt=PT.USER, data=text.encode(), prefix=hops)
        try:
            node.send_embedded(_int(via), inner)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--l2rh") from None


@pktway_main.command()
@click.argument("control")
@click.option("--json", "as_json", is_flag=True)
def routes(control, as_json) -> None:
    """A router's tables (CSR, Q, MTU, RCVF) from its control socket."""
    reply = reach_daemon("pktway", control, "pktwayd", lambda: request(control, {"cmd": "routes"}))
    if as_json:
        click.echo(json.dumps(reply, indent=2))
        return
    for h in reply["halves"]:
        twin = "alive" if h["twin_alive"] else "silent"
        buddies = ",".join(hex(b) for b in h["buddies"]) or "none"
        click.echo(f"half-router {h['addr']:#08x} on SAN {h['san_id']:#08x} (MTU {h['mtu']} words), "
                   f"twin {h['twin']:#x} {twin}, buddies {buddies}")
        for rt in h["rts"]:
            rcvf = ",".join(f"{a:#x}" for a in rt["rcvf"])
            click.echo(f"  SAN {rt['san_id']:#08x}  Q={rt['csr_q']:<3} MinMTU={rt['min_mtu']:<6} RCVF={rcvf:<24} "
                       f"nodes={','.join(hex(n['addr']) for n in rt['nodes'])}")


def _peer(text: str):
    import ipaddress

    ip, sep, addr = text.rpartition("=")
    try:
        if not sep:
            raise ValueError("no '='")
        a = int(addr, 0)
        if not 1 <= a <= 0x7FFFFD:
            raise ValueError(f"{addr} is not a node address (0x1..0x7ffffd)")
        return ipaddress.ip_address(ip), a
    except ValueError as exc:
        raise click.BadParameter(f"{text!r}: {exc}; expected IP=ADDRESS, e.g. 10.77.0.2=0x60",
                                 param_hint="--peer") from None


def ip_node_options(f):
    """The node options, --router repeatable and optional (pw0 asks the others which to use, HRTO)."""
    router = click.option("--router", "routers", multiple=True,
                          help="A half-router on this SAN (repeatable; the first is used until it falls silent, then "
                               "the others are asked which to use, HRTO): its ULA (GSN), port number (--san), LID[:QPN] "
                               "(--ib) or ServerNet ID (--servernet).  None on a GSN fabric or the datagram SAN: "
                               "wait for a router's power-up WRU, then ask it.")
    for opt in reversed([*NODE_OPTS[:5], router, *NODE_OPTS[6:]]):
        f = opt(f)
    return f


@pktway_main.command("ip")
@ip_node_options
@click.option("--dev", default="pw0", show_default=True, help="The TUN interface to create (gone when this stops).")
@click.option("--peer", "peers", multiple=True, metavar="IP=ADDR",
              help="An IP host's PacketWay address (repeatable); others are asked of the router (TELL by name).")
@click.option("--name", help="The name announced to the router: this host's IP address as text, so that "
                             "other pw0 nodes find it without --peer.")
@click.option("--mtu", type=click.IntRange(68, 65535), help="Fix pw0's MTU (default: follow the MinMTU of "
                                                            "the routes to the --peer hosts).")
@click.option("--mtu-recheck", type=click.FloatRange(0, 86400), default=K_IP_MTU_RECHECK_S, show_default=True,
              metavar="SECONDS", help="Ask the --peer routes' MinMTU again this often and set pw0's MTU to the least "
                                      "(0: at bring-up only; between rounds a shrink reaches senders as ICMP).")
@click.option("--join", "joins", multiple=True, metavar="GROUP",
              help="Also receive this IP multicast group (repeatable; 224.0.0.1 and ff02::1 always): its "
                   "PacketWay logical address is announced to the router.")
@click.option("--control", help="A control socket answering {\"cmd\": \"status\"} (counters, resolution, MTUs).")
def ip(ulp, san, ib, servernet, addr, routers, dialect, dev, peers, name, mtu, mtu_recheck, joins,
       control) -> None:
    """IP over PacketWay: a pw0 TUN interface on this node.

    Every IPv4/IPv6 packet routed to pw0 travels as one L3 PacketWay packet (PT = its
    EtherType, 0x0800 or 0x86DD) through the half-router; nothing is fragmented: pw0's MTU
    follows the routes' MinMTU, and a packet too big for a route that shrank comes back to
    the sender as ICMP "fragmentation needed" / "packet too big".  IP multicast goes to
    the group's PacketWay logical address (0xE00000 | low 19 bits for IPv4, 0xE80000 |
    low 19 bits for IPv6) and 255.255.255.255 to PacketWay broadcast: the router copies
    it to every member.  Runs until stopped.

    \b
    The node may sit on any SAN the router joins: a GSN fabric (--ulp), an
    InfiniBand-style fabric (--ib, the port registers with ib-sm first), a ServerNet
    SAN (--servernet) or the datagram SAN (--san).

    Example (host A, GSN fabric; host B at 0x60 behind the router):
      pktway ip --ulp /run/gsnd/gsn0.ulp --addr 0x40 --router 02:00:00:00:00:03 \\
                --name 10.77.0.1 --peer 10.77.0.2=0x60 &
      ip addr add 10.77.0.1/24 dev pw0 && ip link set pw0 up && ping 10.77.0.2
    """
    import trio

    from daemons.io.udp import resolve

    from .ipdriver import PwIp
    from .ipnode import IpNode
    from .udpsan import AsyncSanPort, native

    if sum(x is not None for x in (ulp, san, ib, servernet)) != 1:
        raise click.UsageError("give one of --ulp (a GSN fabric), --san (a datagram SAN), --ib (an InfiniBand-style "
                               "fabric) or --servernet (a ServerNet SAN)")
    table = dict(_peer(p) for p in peers)
    if not routers and (ib or servernet):
        raise click.UsageError("--ib and --servernet need at least one --router")
    try:  # the routers' native routes first: nothing is opened before the options are checked
        if ulp is not None:
            hrs = [parse_ula(r) for r in routers]
        elif ib is not None:
            hrs = [_ib_args(ib, r)[1] for r in routers]
        elif servernet is not None:
            hrs = [_snet_config(servernet, r)[1] for r in routers]
        else:
            parts = san.split(",")
            if len(parts) != 3:
                raise ValueError("expected SWITCH_HOST:PORT,LOCAL_HOST:PORT,MY_PORT")
            hrs = [native(_int(r)) for r in routers]
            own = native(_int(parts[2]))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--san/--router") from None
    try:
        core = IpNode(_int(addr), peers=table, name=name.encode() if name else None, mtu=mtu, groups=joins,
                      mtu_recheck=mtu_recheck, router=hrs[0] if hrs else None, routers=hrs[1:])
    except ValueError as exc:
        raise click.BadParameter(f"{', '.join(joins)}: {exc}", param_hint="--join") from None
    where = ulp or san or ib or servernet
    try:
        if ulp is not None:
            driver_kw = {"ulp": ulp}
        elif ib is not None:  # up once the subnet manager gave the port its LID
            from ib.udport import AsyncIbPort

            driver_kw = {"san_port": AsyncIbPort(*_ib_args(ib, routers[0])[0]), "port_reports_status": True}
        elif servernet is not None:
            from servernet.pwport import AsyncSnetPort

            snet = AsyncSnetPort(_snet_config(servernet, routers[0])[0])
            driver_kw = {"san_port": snet, "own_route": snet.own_route}
        else:
            driver_kw = {"san_port": AsyncSanPort(resolve(parts[0]), resolve(parts[1])), "own_route": own}
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--san/--router") from None
    except OSError as exc:
        click.echo(f"pktway: {where}: {exc.strerror or exc}", err=True)
        sys.exit(71)
    driver = PwIp(core, dev=dev, dialect=dialect, control=control, **driver_kw)
    try:
        trio.run(driver.run)
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        click.echo(f"pktway: {dev}: {exc.strerror or exc}", err=True)
        sys.exit(71)
