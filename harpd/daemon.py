"""harpd's trio driver: one agent per GSN interface (ULP socket to gsnd, kernel
neighbour table), a netlink listener, the control socket for gsnarp."""

from __future__ import annotations

import errno
import os
from collections import Counter
from functools import partial
from ipaddress import ip_address
from pathlib import Path

import structlog
import trio

from daemons.constants import ETHERTYPE_ARP, VC_IP
from daemons.runtime.control import serve_control
from daemons.runtime.schema import Schema, Str
from daemons.runtime.log import CounterLog
from daemons.runtime.metrics import Family, counter_families
from daemons.runtime.notify import StatusLine, sd_notify
from daemons.ulpclient import AsyncUlpClient, ulp_session
from daemons.wire.errors import DecodeError
from daemons.wire.ula import format_ula, parse_ula

from .core import Gone, HarpCore, PhaseChanged, Resolved, Unresolved
from .states import Phase
from .wire import Address
from .kernel import Neighbours, open_neigh_listener, parse_neigh_requests, set_solicit
from .options import Options
from daemons.runtime.corerunner import CoreRunner, drain

log = structlog.get_logger("harpd")

# The control socket's requests (gsnarp; stpd asks "resolve").  The handler parses
# the addresses (a wrong one gets its own one-line refusal); here: types and lengths.
_IP = Str(64)  # IPv4 or IPv6, with an optional %IFACE scope
_ULA = Str(64)
_IFACE = Str(15, optional=True, nullable=True)  # IFNAMSIZ - 1; null = any
CONTROL_SCHEMA = Schema({
    "table": {},
    "status": {},
    "neighbours": {"interface": _IFACE},
    "resolve": {"ip": _IP, "interface": _IFACE},
    "set": {"ip": _IP, "ula": _ULA, "interface": _IFACE},
    "delete": {"ip": _IP, "interface": _IFACE},
})
ADDRESS_POLL_S = 2.0


def _shown(text: str) -> str:
    """``text`` as typed, or quoted (escaped) when it holds a newline or other control
    character: a refusal is one line."""
    return text if text.isprintable() else repr(text)


class StaticStore:
    """Static entries added with gsnarp -s, kept across restarts (harpd.options syntax)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> list[tuple[str, Address, bytes]]:
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            w = line.split()
            if len(w) == 4 and w[0] == "static":
                try:
                    out.append((w[1], ip_address(w[2]), parse_ula(w[3])))
                except ValueError:
                    log.warning("state.bad_line", file=str(self.path), line=line)
        return out

    def save(self, entries: list[tuple[str, Address, bytes]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(f"static {i} {ip} {format_ula(u)}\n" for i, ip, u in entries))
        os.replace(tmp, self.path)


class Agent:
    """HARP for one GSN interface."""

    def __init__(self, ifname: str, opts: Options, ulp_path: str) -> None:
        self.ifname = ifname
        self.ulp_path = ulp_path
        self.core = HarpCore(opts.lises[ifname], trio.current_time(), opts.timers)
        self.runner = CoreRunner(self.core, drain(self.core, lambda item: self._send(*item), self._events))
        self.kernel = Neighbours(ifname)
        self.ifindex: int | None = None
        self.ula: bytes | None = None
        self.addresses: list[Address] = []
        self.client: AsyncUlpClient | None = None
        self._k_send, self._k_recv = trio.open_memory_channel(4096)
        self.waiters: dict[Address, trio.Event] = {}
        self.results: dict[Address, bytes | str] = {}

    # core -> world
    def _send(self, d_ula: bytes, payload: bytes) -> None:
        if self.client is None:
            self.core.counters["tx_dropped_no_gsnd"] += 1
            return
        self.client.send_nowait(d_ula, payload, vc=VC_IP, ethertype=ETHERTYPE_ARP)

    def _events(self, events: list) -> None:
        for ev in events:
            if isinstance(ev, PhaseChanged):
                log.info("harp.phase", interface=self.ifname, lis=str(ev.lis), phase=ev.phase.value)
                if ev.phase in (Phase.OPER_BCAST, Phase.REGISTER, Phase.OPER_SERVER):
                    self._kernel_op("solicit", ev.phase is Phase.OPER_BCAST, ev.lis.version)
            elif isinstance(ev, Resolved):
                self._kernel_op("replace", ev.ip, ev.ula, ev.static)
                self._answer(ev.ip, ev.ula)
            elif isinstance(ev, Gone):
                log.info("harp.gone", interface=self.ifname, ip=str(ev.ip), reason=ev.reason)
                self._kernel_op("delete", ev.ip)
            elif isinstance(ev, Unresolved):
                log.info("harp.unresolved", interface=self.ifname, ip=str(ev.ip), reason=ev.reason)
                self._answer(ev.ip, ev.reason)

    def _answer(self, ip: Address, result: bytes | str) -> None:
        waiter = self.waiters.pop(ip, None)
        if waiter is not None:
            self.results[ip] = result
            waiter.set()

    def _kernel_op(self, *op) -> None:
        try:
            self._k_send.send_nowait(op)
        except trio.WouldBlock:
            self.core.counters["kernel_dropped_queue_full"] += 1

    def refresh_port(self) -> None:
        self.core.set_port(self.ula, self.addresses, trio.current_time())
        self.runner.step()

    async def resolve(self, ip: Address, timeout: float = 5.0) -> dict:
        """Resolve for a local client (stpd): the answer, or why not."""
        waiter = self.waiters.setdefault(ip, trio.Event())
        self.core.resolve(ip, trio.current_time())
        self.runner.step()
        with trio.move_on_after(timeout):
            await waiter.wait()
        result = self.results.pop(ip, None)
        if result is None:
            return {"ok": False, "error": f"{ip}: no answer", "code": 1}
        if isinstance(result, str):
            return {"ok": False, "error": f"{ip}: {result}", "code": 1}
        return {"ok": True, "ula": format_ula(result)}

    # tasks
    async def _kernel_worker(self) -> None:
        async for op in self._k_recv:
            try:
                if op[0] == "solicit":
                    await trio.to_thread.run_sync(set_solicit, self.ifname, op[1], op[2])
                elif op[0] == "replace":
                    await trio.to_thread.run_sync(self.kernel.replace, *op[1:])
                elif op[0] == "delete":
                    await trio.to_thread.run_sync(self.kernel.delete, op[1])
            except Exception as exc:  # the interface may be gone; pyroute2 raises its own types
                self.core.counters[f"kernel_{op[0]}_failed"] += 1
                log.warning("kernel.failed", interface=self.ifname, op=op[0], error=str(exc))

    async def _addresses(self) -> None:
        while True:
            try:
                addrs = await trio.to_thread.run_sync(self.kernel.addresses)
                idx = await trio.to_thread.run_sync(self.kernel.index)
            except Exception as exc:  # netlink hiccup: try again next round
                log.warning("kernel.addresses_failed", interface=self.ifname, error=str(exc))
                addrs, idx = self.addresses, self.ifindex
            self.ifindex = idx
            if addrs != self.addresses:
                self.addresses = addrs
                self.refresh_port()
            await trio.sleep(ADDRESS_POLL_S)

    def _set_client(self, client: AsyncUlpClient | None) -> None:
        self.client = client
        log.info("ulp.connected" if client else "ulp.lost", interface=self.ifname, path=self.ulp_path)

    def _set_ula(self, ula: bytes | None) -> None:
        if ula != self.ula:
            self.ula = ula
            self.refresh_port()

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._kernel_worker)
            nursery.start_soon(self._addresses)
            nursery.start_soon(partial(
                ulp_session, self.ulp_path, ETHERTYPE_ARP, on_client=self._set_client, on_status=self._set_ula,
                on_frame=lambda f, now: self.core.receive(f.ula, f.payload, now), after_burst=self.runner.step))
            nursery.start_soon(self.runner.run)


class Harpd:
    def __init__(self, opts: Options, *, runtime_dir: str, state_dir: str, gsnd_runtime: str) -> None:
        self.opts = opts
        self.runtime_dir = runtime_dir
        self.store = StaticStore(Path(state_dir) / "static.conf")
        self.agents = {i: Agent(i, opts, f"{gsnd_runtime}/{i}.ulp") for i in opts.lises}
        self.drops = CounterLog(log)
        self.status_line = StatusLine()
        self.control_counters: Counter[str] = Counter()
        self.dynamic_statics = self.store.load()
        for iface, ip, ula in self.dynamic_statics:
            if iface in self.agents:
                self.agents[iface].core.set_static(ip, ula)

    async def _netlink(self) -> None:
        sock = open_neigh_listener()
        while True:
            await trio.lowlevel.wait_readable(sock)
            while True:
                try:
                    data = sock.recv(65536)
                except BlockingIOError:
                    break
                except OSError as exc:
                    if exc.errno == errno.ENOBUFS:  # overrun: the kernel will ask again
                        continue
                    raise
                try:
                    requests = parse_neigh_requests(data)
                except DecodeError:
                    continue
                for ifindex, ip in requests:
                    for agent in self.agents.values():
                        if agent.ifindex == ifindex:
                            agent.core.resolve(ip, trio.current_time())
                            agent.runner.step()

    def _address(self, req: dict) -> tuple[Address, str | None]:
        """The request's "ip" (IPv4 or IPv6 literal, "%IFACE" scope allowed) and
        "interface" (string or absent), checked by hand until the control schema lands."""
        text, interface = req.get("ip"), req.get("interface")
        if not isinstance(text, str):
            raise ValueError("'ip' must be an IPv4 or IPv6 address string")
        if interface is not None and not isinstance(interface, str):
            raise ValueError("'interface' must be a string")
        text, _, scope = text.partition("%")
        if scope:
            if interface not in (None, scope):
                raise ValueError(f"{_shown(text + '%' + scope)} is scoped to {_shown(scope)}, not {_shown(interface)}")
            interface = scope
        if interface is not None and interface not in self.agents:
            raise ValueError(f"harpd serves no interface {interface!r} ({', '.join(self.agents)})")
        try:
            return ip_address(text), interface
        except ValueError:
            raise ValueError(f"{text!r} is not an IPv4 or IPv6 address") from None

    def _agent_for(self, ip: Address, interface: str | None) -> Agent | None:
        agents = [a for i, a in self.agents.items() if interface in (None, i)]
        return next((a for a in agents if a.core.lis_for(ip) is not None), None)

    async def _neighbours(self, interface: str | None) -> list[dict]:
        rows = []
        for i, a in self.agents.items():
            if interface in (None, i):
                try:
                    found = await trio.to_thread.run_sync(a.kernel.neighbours)
                except Exception as exc:  # the interface may be gone; pyroute2 raises its own types
                    log.warning("kernel.neighbours_failed", interface=i, error=str(exc))
                    continue
                for r in found:
                    lis = a.core.lis_for(ip_address(r["ip"]))
                    rows.append(dict(r, interface=i, lis=str(lis.net) if lis else None))
        return rows

    async def _control(self, req: dict) -> dict:
        cmd = req.get("cmd")
        now = trio.current_time()
        if cmd == "table":
            return {"ok": True, "table": [dict(r, interface=i) for i, a in self.agents.items()
                                          for r in a.core.table(now)]}
        if cmd == "neighbours":
            interface = req.get("interface")
            if interface is not None and interface not in self.agents:
                return {"ok": False, "error": f"harpd serves no interface {interface!r}", "code": 1}
            return {"ok": True, "neighbours": await self._neighbours(interface)}
        if cmd == "status":
            return {"ok": True, "status": {i: {"ula": format_ula(a.ula) if a.ula else None, "lis": a.core.status(),
                                               "counters": dict(a.core.counters)} for i, a in self.agents.items()},
                    "control": dict(self.control_counters)}
        if cmd in ("resolve", "set", "delete"):
            try:
                ip, interface = self._address(req)
                ula = None
                if cmd == "set":
                    if not isinstance(req.get("ula"), str):
                        raise ValueError("'ula' must be a string like 02:47:53:00:07:00")
                    ula = parse_ula(req["ula"])
            except ValueError as exc:
                return {"ok": False, "error": str(exc)}
            agent = self._agent_for(ip, interface)
            if agent is None:
                where = f" on {interface}" if interface else ""
                return {"ok": False, "error": f"{ip} is in no LIS harpd serves{where}", "code": 1}
            if cmd == "resolve":
                return await agent.resolve(ip)
            if cmd == "set":
                assert ula is not None  # parsed above for "set"
                agent.core.set_static(ip, ula)
                self.dynamic_statics = [e for e in self.dynamic_statics if (e[0], e[1]) != (agent.ifname, ip)] + \
                    [(agent.ifname, ip, ula)]
            else:
                if not agent.core.delete(ip):
                    return {"ok": False, "error": f"{ip}: no such entry", "code": 1}
                self.dynamic_statics = [e for e in self.dynamic_statics if (e[0], e[1]) != (agent.ifname, ip)]
            agent.runner.step()
            self.store.save(self.dynamic_statics)
            return {"ok": True}
        return {"ok": False, "error": f"unknown command {cmd!r}"}

    def metrics(self) -> list[Family]:
        table = Family("gsn_harp_table_entries", "gauge", "HARP entries per interface, LIS and table "
                       "(cache: this client's; server: what the LIS server answers for).")
        pending = Family("gsn_harp_pending_resolutions", "gauge", "Resolutions waiting for an answer.")
        fams = [table, pending]
        for i, a in self.agents.items():
            for lis in a.core.lis:
                table.add(len(lis.cache), interface=i, lis=str(lis.net), table="cache")
                table.add(len(lis.server_table), interface=i, lis=str(lis.net), table="server")
                pending.add(len(lis.pending), interface=i, lis=str(lis.net))
            fams += counter_families(a.core.counters, "harp", interface=i)
        return fams + counter_families(self.control_counters, "control")

    def _notify_status(self) -> None:
        parts = []
        for i, a in self.agents.items():
            lis = a.core.lis
            parts.append(f"{i}: ULA {format_ula(a.ula) if a.ula else 'none'}, {len(lis)} LIS, "
                         f"{sum(len(x.cache) for x in lis)} cached, {sum(len(x.server_table) for x in lis)} served")
        self.status_line.update("; ".join(parts) or "no interface")

    async def _stats(self) -> None:
        while True:
            await trio.sleep(1.0)
            for i, a in self.agents.items():
                self.drops.update(i, a.core.counters, trio.current_time())
            self._notify_status()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        os.makedirs(self.runtime_dir, exist_ok=True)
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(serve_control, f"{self.runtime_dir}/control.sock", self._control, CONTROL_SCHEMA,
                                        counters=self.control_counters))
            nursery.start_soon(self._netlink)
            nursery.start_soon(self._stats)
            for a in self.agents.values():
                nursery.start_soon(a.run)
            log.info("harpd.started", interfaces=list(self.agents))
            sd_notify("READY=1")
            self._notify_status()
            task_status.started()
