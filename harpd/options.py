"""harpd.options: IRIX-style configuration (spec §6.9 syntax, one directive a line).

    lis     gsn0  192.0.2.0/24           # an interface and a LIS (IP subnet) on it
    lis     gsn0  2001:db8::/64          # IPv6 too (the interface also gets fe80::/64)
    role    gsn0  auto                   # auto | client | server   (auto: RFC self-detection)
    server  gsn0  00:10:3b:ff:ff:e0      # HRAL entries after FF:FF:FF:FF:FF:FF, priority order
    static  gsn0  192.0.2.30  02:47:53:00:07:00
    reregister 900                       # seconds
    timer   server_lifetime 1200         # any harpd.core.Timers field, seconds (or a count)

``#`` starts a comment.  Without ``server`` lines a LIS uses the standard server
address 00:10:3b:ff:ff:e0.  An interface with an IPv6 LIS also resolves its
link-local addresses: the LIS fe80::/64 is added to it unless written out (write
just ``lis gsn0 fe80::/64`` for link-local IPv6 only).  Errors name the file and
line (exit 78).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from ipaddress import IPv6Network, ip_address, ip_network

from daemons.runtime.config import ConfigError
from daemons.wire.ula import parse_ula

from .constants import LINK_LOCAL_LIS
from .core import LisConfig, Timers
from .wire import Address

TIMER_NAMES = {f.name for f in fields(Timers)}


@dataclass
class Options:
    lises: dict[str, list[LisConfig]] = field(default_factory=dict)  # interface -> LISes
    timers: Timers = field(default_factory=Timers)


def parse(text: str, source: str, base: Options | None = None) -> Options:
    opts = base or Options()
    roles: dict[str, str] = {}
    servers: dict[str, list[bytes]] = {}
    statics: list[tuple[str, Address, bytes, int]] = []
    timers = dict(opts.timers.__dict__)
    for n, raw in enumerate(text.splitlines(), 1):
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        where = f"{source}:{n}"
        kw, args = words[0], words[1:]

        def need(k: int) -> None:
            if len(args) != k:
                raise ConfigError(f"{where}: '{kw}' takes {k} argument{'s' if k > 1 else ''}, got {len(args)}")

        try:
            if kw == "lis":
                need(2)
                net = ip_network(args[1], strict=True)
                lises = opts.lises.setdefault(args[0], [])
                if any(net.overlaps(x.network) for x in lises if x.network.version == net.version):
                    raise ConfigError(f"{where}: LIS {net} overlaps another LIS of {args[0]}")
                lises.append(LisConfig(net))
            elif kw == "role":
                need(2)
                if args[1] not in ("auto", "client", "server"):
                    raise ConfigError(f"{where}: role must be auto, client or server, not {args[1]!r}")
                roles[args[0]] = args[1]
            elif kw == "server":
                need(2)
                servers.setdefault(args[0], []).append(parse_ula(args[1]))
            elif kw == "static":
                need(3)
                statics.append((args[0], ip_address(args[1]), parse_ula(args[2]), n))
            elif kw == "reregister":
                need(1)
                timers["reregister"] = _positive(args[0])
            elif kw == "timer":
                need(2)
                if args[0] not in TIMER_NAMES:
                    raise ConfigError(f"{where}: unknown timer {args[0]!r} (one of {', '.join(sorted(TIMER_NAMES))})")
                value = _positive(args[1])
                timers[args[0]] = int(value) if args[0].endswith(("count", "attempts")) else value
            else:
                raise ConfigError(f"{where}: unknown directive {kw!r} (lis, role, server, static, reregister, timer)")
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    link_local = IPv6Network(LINK_LOCAL_LIS)
    for iface, lises in opts.lises.items():
        if any(x.network.version == 6 for x in lises) and not any(x.network.overlaps(link_local)
                                                                   for x in lises if x.network.version == 6):
            lises.append(LisConfig(link_local))
        for lis in lises:
            if iface in roles:
                lis.role = roles[iface]
            if iface in servers:
                lis.servers = servers[iface]
    for iface, ip, ula, n in statics:
        found = next((x for x in opts.lises.get(iface, []) if ip in x.network), None)
        if found is None:
            raise ConfigError(f"{source}:{n}: static {ip} is in no LIS of {iface}")
        found.statics[ip] = ula
    for iface in set(roles) | set(servers):
        if iface not in opts.lises:
            raise ConfigError(f"{source}: {iface} has role/server lines but no 'lis' line")
    opts.timers = Timers(**timers)
    return opts


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError(f"{text!r} is not a positive number")
    return value


def load(path: str) -> Options:
    try:
        text = open(path).read()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    opts = parse(text, path)
    if not opts.lises:
        raise ConfigError(f"{path}: no 'lis' line: harpd has nothing to serve")
    return opts
