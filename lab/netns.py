"""Real gsn-switch/gsnd processes in network namespaces that we create and remove
(used by the demo, the namespace tests and the benchmarks).

Underlay: one veth pair per host between the switch namespace and the host
namespace, 198.18.<i>.0/30 (RFC 2544 benchmarking range, inside our namespaces
only), MTU ``underlay_mtu``: 65535 by default, so that the cables carry 64 KB
datagrams (1,600 micropackets) unfragmented as they did before they followed the
path MTU; at 1500 they carry 36 micropackets each, ~3-6x slower per byte through
the daemons (tests/netns/test_cable_mtu.py uses 1500).  Unix sockets (ULP, control) live in a temporary directory reachable from
the test process.

Every cable is authenticated by default (``keys=True``): one key per cable, written
by :func:`write_cable_key` into the fabric's temporary directory, named by the
switch port's ``key_file`` and by the host's ``gsnd --key-file``.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Self

BIN = Path(sys.executable).parent
_counter = itertools.count()
LIVE: set[Fabric] = set()  # fabrics not yet closed (a test's failure report dumps them)
# (tag, diagnostics) of fabrics closed by a with-block that raised: the test's failure
# report shows them too (by then the fabric, its logs and its daemons are gone)
DUMPS: list[tuple[str, str]] = []


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(args, check=check, capture_output=True, text=True)


def gsn_router_toml(name: str, control: Path | str, halves: list[tuple[int, int, int, str, list[tuple[int, str]]]]) -> str:
    """A pktwayd config of GSN halves: each (addr, san_id, mtu, ULP socket, [(node addr, ULA)])."""
    text = f'[router]\nname = "{name}"\ncontrol = "{control}"\n'
    for addr, san_id, mtu, ulp, nodes in halves:
        text += f'[[half]]\naddr = {addr}\nsan_id = {san_id:#x}\nmtu = {mtu}\nulp = "{ulp}"\n'
        text += "".join(f'[[half.node]]\naddr = {a}\nula = "{u}"\n' for a, u in nodes)
    return text


def write_cable_key(path: Path) -> Path:
    """A new cable key in ``path`` (mode 0600), as `gsnctl genkey -o` writes it."""
    from daemons.runtime.keyfile import new_key, write_key

    write_key(str(path), new_key(), force=True)
    return path


def poll(predicate, timeout: float = 10.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class Fabric:
    """A switch namespace and ``n`` host namespaces, each with one gsnd."""

    def __init__(self, n_hosts: int, broadcast: bool = True, prefix: str = "t",
                 static: dict[str, int] | None = None, underlay_mtu: int = 65535, keys: bool = True,
                 switch_data_path: str = "compiled") -> None:
        self.static = static or {}
        self.switch_data_path = switch_data_path  # gsn-switch.toml [switch] data_path
        self.keys = keys
        self.underlay_mtu = underlay_mtu
        self.tag = f"{prefix}{os.getpid() % 10000}{next(_counter)}"
        self.n = n_hosts
        self.broadcast = broadcast
        self.tmp = Path(tempfile.mkdtemp(prefix=f"gsn-{self.tag}-"))
        self.sw_ns = f"gsn{self.tag}sw"
        self.host_ns = [f"gsn{self.tag}h{i}" for i in range(1, n_hosts + 1)]
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}
        LIVE.add(self)
        try:
            self._create()
        except BaseException:
            self.close()
            raise

    # --- namespaces ---------------------------------------------------------------
    def _create(self) -> None:
        for ns in [self.sw_ns, *self.host_ns]:
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        for i, ns in enumerate(self.host_ns, 1):
            sw_if, h_if = f"s{self.tag}{i}"[-15:], f"h{self.tag}{i}"[-15:]
            sh("ip", "link", "add", sw_if, "netns", self.sw_ns, "type", "veth", "peer", "name", h_if, "netns", ns)
            sh("ip", "-n", self.sw_ns, "addr", "add", f"198.18.{i}.1/30", "dev", sw_if)
            sh("ip", "-n", ns, "addr", "add", f"198.18.{i}.2/30", "dev", h_if)
            sh("ip", "-n", ns, "link", "set", h_if, "name", "ul0")
            sh("ip", "-n", self.sw_ns, "link", "set", sw_if, "mtu", str(self.underlay_mtu), "up")
            sh("ip", "-n", ns, "link", "set", "ul0", "mtu", str(self.underlay_mtu), "up")

    def close(self) -> None:
        LIVE.discard(self)
        for name in list(self.procs):
            self.kill(name)
        for ns in [self.sw_ns, *self.host_ns]:
            sh("ip", "netns", "del", ns, check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is not None and issubclass(exc_type, Exception) and self in LIVE:  # not a skip
            try:
                DUMPS.append((self.tag, self.diagnostics()))
            except Exception as err:  # never hide the test's own failure
                DUMPS.append((self.tag, f"(diagnostics failed: {err!r})"))
        self.close()

    # --- processes ------------------------------------------------------------------
    def _spawn(self, name: str, ns: str, argv: list[str]) -> subprocess.Popen:
        log = self.tmp / f"{name}.log"
        self.logs[name] = log
        p = subprocess.Popen(["ip", "netns", "exec", ns, *argv], stdout=open(log, "ab"), stderr=subprocess.STDOUT)
        self.procs[name] = p
        return p

    def spawn(self, name: str, i: int, *argv: str) -> subprocess.Popen:
        """Any process in host i's namespace, logged and stopped with the fabric."""
        return self._spawn(name, self.host_ns[i - 1], list(argv))

    def link_to(self, other: Fabric, i: int, j: int, net: int) -> tuple[str, str]:
        """A veth between my host i and ``other``'s host j, 198.18.<net>.1/30 and .2/30
        (deleted with the namespaces); returns the two addresses."""
        a, b = f"x{self.tag}{net}a"[-15:], f"x{self.tag}{net}b"[-15:]
        sh("ip", "link", "add", a, "netns", self.host_ns[i - 1], "type", "veth", "peer", "name", b,
           "netns", other.host_ns[j - 1])
        sh("ip", "-n", self.host_ns[i - 1], "addr", "add", f"198.18.{net}.1/30", "dev", a)
        sh("ip", "-n", other.host_ns[j - 1], "addr", "add", f"198.18.{net}.2/30", "dev", b)
        sh("ip", "-n", self.host_ns[i - 1], "link", "set", a, "up")
        sh("ip", "-n", other.host_ns[j - 1], "link", "set", b, "up")
        return f"198.18.{net}.1", f"198.18.{net}.2"

    def switch_config(self) -> Path:
        lines = [f"[switch]\nid = 1\nbroadcast = {str(self.broadcast).lower()}\n"
                 f"runtime_dir = \"{self.tmp}/sw\"\ndata_path = \"{self.switch_data_path}\"\n"]
        for i in range(1, self.n + 1):
            lines.append(f"[[port]]\nnumber = {i}\nlocal = \"198.18.{i}.1:7000\"\npeer = \"198.18.{i}.2:6400\"\n"
                         + (f"key_file = \"{self.cable_key(i)}\"\n" if self.keys else ""))
        for ula, port in self.static.items():
            lines.append(f"[[static]]\nula = \"{ula}\"\nport = {port}\n")
        path = self.tmp / "gsn-switch.toml"
        path.write_text("\n".join(lines))
        return path

    def cable_key(self, i: int) -> Path:
        """The key of host i's cable to the switch (made on first use)."""
        path = self.tmp / f"cable{i}.key"
        return path if path.exists() else write_cable_key(path)

    def start_switch(self) -> None:
        self._spawn("switch", self.sw_ns, [str(BIN / "gsn-switch"), "-c", str(self.switch_config())])
        poll(lambda: (self.tmp / "sw" / "control.sock").exists(), what="switch control socket")

    def set_underlay_mtu(self, i: int, mtu: int) -> None:
        """The MTU of both ends of host i's veth to the switch (1500 when created)."""
        sh("ip", "-n", self.sw_ns, "link", "set", f"s{self.tag}{i}"[-15:], "mtu", str(mtu))
        sh("ip", "-n", self.host_ns[i - 1], "link", "set", "ul0", "mtu", str(mtu))

    def start_gsnd(self, i: int, *args: str, via: int | None = None, key_file: Path | None = None) -> None:
        """gsnd of host i (``args``: further flags); ``via``: the UDP port of a relay in
        the host's namespace that stands between gsnd (then bound to port 6402) and the switch;
        ``key_file``: another key than the cable's (with ``keys``)."""
        local, peer = (f"198.18.{i}.2:6400", f"198.18.{i}.1:7000") if via is None else \
            (f"198.18.{i}.2:6402", f"198.18.{i}.2:{via}")
        key = ["--key-file", str(key_file or self.cable_key(i))] if self.keys else []
        self._spawn(f"gsnd{i}", self.host_ns[i - 1], [
            str(BIN / "gsnd"), "--local", local, "--peer", peer, "--cable-id", str(i),
            "--runtime-dir", str(self.runtime(i)), *key, *args])

    def start_harpd(self, i: int, options: str, *args: str) -> None:
        """harpd on host i with the given harpd.options text; sockets under h<i>/harpd."""
        d = self.tmp / f"h{i}"
        d.mkdir(exist_ok=True)
        (d / "harpd.options").write_text(options)
        (d / "harpd" / "control.sock").unlink(missing_ok=True)  # a kill -9 leaves it behind
        self._spawn(f"harpd{i}", self.host_ns[i - 1], [
            str(BIN / "harpd"), "-f", str(d / "harpd.options"), "--runtime-dir", str(d / "harpd"),
            "--state-dir", str(d / "harpd-state"), "--gsnd-runtime", str(self.runtime(i)), *args])
        poll(lambda: (d / "harpd" / "control.sock").exists(), what=f"harpd{i} control socket")

    def start_stpd(self, i: int, *args: str) -> str:
        """stpd on host i (API socket under h<i>/stpd); peers named by --peer IP=ULA in args."""
        d = self.tmp / f"h{i}"
        d.mkdir(exist_ok=True)
        api = d / "stpd" / "api.sock"
        api.unlink(missing_ok=True)
        self._spawn(f"stpd{i}", self.host_ns[i - 1], [
            str(BIN / "stpd"), "--ulp", str(self.runtime(i) / "gsn0.ulp"), "--api", str(api),
            "--harpd-socket", str(d / "harpd" / "control.sock"), *args])
        poll(lambda: api.exists(), what=f"stpd{i} API socket")
        return str(api)

    def gsnarp(self, i: int, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "gsnarp"), "--socket", str(self.tmp / f"h{i}" / "harpd" / "control.sock"),
                               *args], capture_output=True, text=True, timeout=30)

    def runtime(self, i: int) -> Path:
        return self.tmp / f"h{i}"

    def ulp_path(self, i: int) -> str:
        return str(self.runtime(i) / "gsn0.ulp")

    def kill(self, name: str, sig: int = signal.SIGTERM) -> None:
        p = self.procs.pop(name, None)
        if p is None:
            return
        if p.poll() is None:
            # ip netns exec execs the daemon, so the pid is the daemon's
            p.send_signal(sig)
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def ctl(self, path: Path | str, *args: str) -> dict | None:
        try:
            r = subprocess.run([str(BIN / "gsnctl"), "-s", str(path), *args, "--json"], capture_output=True,
                               text=True, timeout=10)
            return json.loads(r.stdout) if r.returncode == 0 else None
        except (subprocess.TimeoutExpired, ValueError):
            return None

    def diagnostics(self, tail: int = 60) -> str:
        """What a failing test should show: each daemon's exit status and the tail of
        its log, and every gsnd's and the switch's ``gsnctl status --json``."""
        out = []
        for name, log in sorted(self.logs.items()):
            p = self.procs.get(name)
            state = "stopped" if p is None else ("running" if p.poll() is None else f"exited {p.returncode}")
            try:
                lines = log.read_text(errors="replace").splitlines()
            except OSError as exc:
                lines = [f"(no log: {exc})"]
            out.append(f"--- {name} ({state}), last {min(tail, len(lines))} of {len(lines)} log lines ---")
            out.extend(lines[-tail:])
        for i in range(1, self.n + 1):
            out.append(f"--- gsnctl status gsnd{i} ---")
            out.append(json.dumps(self.gsnd_status(i), indent=1, sort_keys=True))
        for i in range(1, self.n + 1):
            api = self.tmp / f"h{i}" / "stpd" / "api.sock"
            if f"stpd{i}" in self.logs and api.exists():
                out.append(f"--- stpd{i} status ---")
                try:
                    from stpd.client import StClient

                    out.append(json.dumps(StClient(str(api)).status(), indent=1, sort_keys=True, default=str))
                except Exception as exc:
                    out.append(f"(no status: {exc!r})")
        out.append("--- gsnctl status switch ---")
        out.append(json.dumps(self.switch_status(), indent=1, sort_keys=True))
        return "\n".join(out)

    def gsnd_status(self, i: int) -> dict | None:
        return self.ctl(self.runtime(i) / "gsn0.ctl", "status")

    def switch_status(self) -> dict | None:
        return self.ctl(self.tmp / "sw" / "control.sock", "status")

    def up(self, *, v6: bool = True) -> list[str]:
        """Start the switch and every host's gsnd, wait for their ULAs, address gsn0
        (192.0.2.i/24, and 2001:db8::i/64 with ``v6``); returns the ULAs."""
        self.start_switch()
        for i in range(1, self.n + 1):
            self.start_gsnd(i)
        ulas = [self.wait_ula(i) for i in range(1, self.n + 1)]
        for i in range(1, self.n + 1):
            self.ip_address(i, v6="2001:db8::{i}/64" if v6 else None)
        return ulas

    def start_stpds(self, ulas: list[str], *args: str) -> list[str]:
        """stpd on every host, each knowing every host's IP->ULA; returns the API sockets."""
        peers = [f"--peer=192.0.2.{i}={ula}" for i, ula in enumerate(ulas, 1)]
        return [self.start_stpd(i, *peers, *args) for i in range(1, self.n + 1)]

    def iperf3(self, client: int, server: int, *args: str, server_args: tuple[str, ...] = ()) -> float:
        """iperf3 TCP from host ``client`` to host ``server`` (192.0.2.x); Gbit/s received."""
        return iperf3_run(lambda *a: self.ns_exec(client, *a, check=False, timeout=900),
                          ["ip", "netns", "exec", self.host_ns[server - 1]], f"192.0.2.{server}", *args,
                          server_args=server_args)

    def ns_exec(self, i: int, *argv: str, check: bool = True, timeout: float | None = 60) -> subprocess.CompletedProcess:
        """Run a command in host i's namespace (i = 0: the switch's)."""
        ns = self.sw_ns if i == 0 else self.host_ns[i - 1]
        return subprocess.run(["ip", "netns", "exec", ns, *argv], check=check, capture_output=True, text=True,
                              timeout=timeout)

    def ip_address(self, i: int, v4: str = "192.0.2.{i}/24", v6: str | None = "2001:db8::{i}/64") -> None:
        """Address gsn0 of host i with ip(8), as an operator would, and bring it up."""
        poll(lambda: self.ns_exec(i, "ip", "link", "show", "gsn0", check=False).returncode == 0, 10,
             what=f"gsn0 in host{i}")
        self.ns_exec(i, "ip", "addr", "add", v4.format(i=i), "dev", "gsn0")
        if v6:
            self.ns_exec(i, "ip", "addr", "add", v6.format(i=i), "dev", "gsn0", "nodad")
        self.ns_exec(i, "ip", "link", "set", "gsn0", "up")

    def wait_ula(self, i: int, timeout: float = 30.0) -> str:
        return poll(lambda: (st := self.gsnd_status(i)) and st["link"]["state"] == "up" and st["ula"],
                    timeout, what=f"gsnd{i} link up with a ULA")


def iperf3_run(run_client, server_prefix: list[str], addr: str, *args: str, server_args: tuple[str, ...] = ()) -> float:
    """One iperf3 TCP run: server via ``server_prefix`` (e.g. ip netns exec NS), client
    via ``run_client(*argv)``; Gbit/s received (0.0 if it failed)."""
    srv = subprocess.Popen(server_prefix + ["iperf3", "-s", "-1", "-B", addr, *server_args], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        r = run_client("iperf3", "-c", addr, "-J", *args)
        srv.wait(timeout=30)
    finally:
        if srv.poll() is None:
            srv.kill()
    try:
        return json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9
    except (ValueError, KeyError, AttributeError):
        return 0.0


class SwitchedFabric(Fabric):
    """Several gsn-switch processes, each in its own namespace, cabled to each other
    (``links``: pairs of switch ids) and to hosts (``hosts[i-1]``: the switch of host i).

    Host i's veth is 198.18.<i>.0/30 as in Fabric (switch port i); inter-switch cable j
    is a veth 198.19.<j>.1/30 (the first switch) -- .2/30, switch port 20 + j at both ends,
    cable id 1000 + j.  ``cut(j)`` / ``mend(j)`` take that veth down and up again."""

    def __init__(self, hosts: list[int], links: list[tuple[int, int]], prefix: str = "m", **kw) -> None:
        self.hosts_of = list(hosts)
        self.links = list(links)
        self.switch_ids = sorted(set(hosts) | {s for ln in links for s in ln})
        super().__init__(len(hosts), prefix=prefix, **kw)

    def sw_ns_of(self, k: int) -> str:
        return f"gsn{self.tag}s{k}"

    def _create(self) -> None:
        self.sw_ns = self.sw_ns_of(self.switch_ids[0])  # Fabric.ns_exec(0, ...) runs in the first switch's
        for ns in [*map(self.sw_ns_of, self.switch_ids), *self.host_ns]:
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        for i, (k, ns) in enumerate(zip(self.hosts_of, self.host_ns), 1):
            sw_if, h_if = f"s{self.tag}{i}"[-15:], f"h{self.tag}{i}"[-15:]
            sh("ip", "link", "add", sw_if, "netns", self.sw_ns_of(k), "type", "veth", "peer", "name", h_if,
               "netns", ns)
            sh("ip", "-n", self.sw_ns_of(k), "addr", "add", f"198.18.{i}.1/30", "dev", sw_if)
            sh("ip", "-n", ns, "addr", "add", f"198.18.{i}.2/30", "dev", h_if)
            sh("ip", "-n", ns, "link", "set", h_if, "name", "ul0")
            sh("ip", "-n", self.sw_ns_of(k), "link", "set", sw_if, "mtu", str(self.underlay_mtu), "up")
            sh("ip", "-n", ns, "link", "set", "ul0", "mtu", str(self.underlay_mtu), "up")
        for j, (a, b) in enumerate(self.links, 1):
            ia, ib = self._cable_ifs(j)
            sh("ip", "link", "add", ia, "netns", self.sw_ns_of(a), "type", "veth", "peer", "name", ib,
               "netns", self.sw_ns_of(b))
            for ns, ifname, host in ((self.sw_ns_of(a), ia, 1), (self.sw_ns_of(b), ib, 2)):
                sh("ip", "-n", ns, "addr", "add", f"198.19.{j}.{host}/30", "dev", ifname)
                sh("ip", "-n", ns, "link", "set", ifname, "mtu", str(self.underlay_mtu), "up")

    def _cable_ifs(self, j: int) -> tuple[str, str]:
        return f"c{self.tag}{j}a"[-15:], f"c{self.tag}{j}b"[-15:]

    def close(self) -> None:
        LIVE.discard(self)
        for name in list(self.procs):
            self.kill(name)
        for ns in [*map(self.sw_ns_of, self.switch_ids), *self.host_ns]:
            sh("ip", "netns", "del", ns, check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def switch_dir(self, k: int) -> Path:
        return self.tmp / f"sw{k}"

    def switch_config(self, k: int = 1) -> Path:
        lines = [f"[switch]\nid = {k}\nbroadcast = {str(self.broadcast).lower()}\n"
                 f"runtime_dir = \"{self.switch_dir(k)}\"\n"]
        for i, s in enumerate(self.hosts_of, 1):
            if s == k:
                lines.append(f"[[port]]\nnumber = {i}\nlocal = \"198.18.{i}.1:7000\"\npeer = \"198.18.{i}.2:6400\"\n"
                             + (f"key_file = \"{self.cable_key(i)}\"\n" if self.keys else ""))
        for j, (a, b) in enumerate(self.links, 1):
            if k in (a, b):
                me, other = (1, 2) if k == a else (2, 1)
                lines.append(f"[[port]]\nnumber = {20 + j}\nlocal = \"198.19.{j}.{me}:7100\"\n"
                             f"peer = \"198.19.{j}.{other}:7100\"\ncable_id = {1000 + j}\nswitch = true\n"
                             + (f"key_file = \"{self.link_key(j)}\"\n" if self.keys else ""))
        path = self.tmp / f"gsn-switch{k}.toml"
        path.write_text("\n".join(lines))
        return path

    def link_key(self, j: int) -> Path:
        """The key of inter-switch cable j (made on first use)."""
        path = self.tmp / f"link{j}.key"
        return path if path.exists() else write_cable_key(path)

    def start_switch(self, k: int | None = None) -> None:
        for s in ([k] if k is not None else self.switch_ids):
            (self.switch_dir(s) / "control.sock").unlink(missing_ok=True)  # a kill -9 leaves it behind
            self._spawn(f"switch{s}", self.sw_ns_of(s), [str(BIN / "gsn-switch"), "-c", str(self.switch_config(s))])
            poll(lambda s=s: (self.switch_dir(s) / "control.sock").exists(), what=f"switch {s} control socket")

    def switch_status(self, k: int | None = None) -> dict | None:
        return self.ctl(self.switch_dir(k or self.switch_ids[0]) / "control.sock", "status")

    def fabric_map(self, k: int) -> dict | None:
        return self.ctl(self.switch_dir(k) / "control.sock", "fabric")

    def cut(self, j: int) -> None:
        """Inter-switch cable j stops carrying datagrams (its veth goes down)."""
        ia, _ = self._cable_ifs(j)
        sh("ip", "-n", self.sw_ns_of(self.links[j - 1][0]), "link", "set", ia, "down")

    def mend(self, j: int) -> None:
        ia, _ = self._cable_ifs(j)
        sh("ip", "-n", self.sw_ns_of(self.links[j - 1][0]), "link", "set", ia, "up")

    def converged(self) -> bool:
        """Every switch has a map of every running switch and the manager has finished."""
        running = [k for k in self.switch_ids if f"switch{k}" in self.procs]
        maps = [self.fabric_map(k) for k in running]
        return all(m and m.get("phase") == "idle" and len(m.get("switches") or ()) == len(running) for m in maps)

    def diagnostics(self, tail: int = 60) -> str:
        out = [super().diagnostics(tail)]
        for k in self.switch_ids:
            out.append(f"--- gsnctl fabric switch {k} ---")
            out.append(json.dumps(self.fabric_map(k), indent=1, sort_keys=True))
            out.append(f"--- gsnctl status switch {k} ---")
            out.append(json.dumps(self.switch_status(k), indent=1, sort_keys=True))
        return "\n".join(out)
