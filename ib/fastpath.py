"""The compiled data path (ib/_ibfast.c) kept in step with the Python cores, which stay
its oracle and own every decision.

``PortFast`` carries ipoibd's steady state: what the port core has RESOLVED is mirrored
into the C table after every call into the core (``sync``), and the sends the C path made
are reported back before the next one (``settle``: the REMAC cache's LRU order and the
shadow entries' last use, so reaping and eviction see what they would have seen).  The C
pump thread stops reading a source at the first frame or datagram it does not carry and
hands it over (``take_slow``); the source is read again once the core has handled it
(``resume``), so the core sees each source's sequence as it would have.  ``SwitchFast``
mirrors the switch core's LFT.

``PortFast.on_tap`` / ``on_cable`` are the same path without sockets (the pumps'
per-packet functions), for the differential tests and the fuzz target.
"""

from __future__ import annotations

import errno
from collections import Counter

from ._ibfast import Port, Switch
from .portcore import PortCore
from .switchcore import SwitchCore

__all__ = ["PortFast", "SettledCore", "SwitchFast", "Port", "Switch"]


def _errname(prefix: str, code: int) -> str:
    return f"{prefix}{errno.errorcode.get(code, code)}"


class PortFast:
    def __init__(self, core: PortCore, port: Port, tap_fds: list[int] | None = None) -> None:
        self.core = core
        self.port = port
        self.tap_fds = tap_fds or [-1] * len(core.ifaces)
        self._config: tuple | None = None
        self._key: tuple | None = None

    def settle(self) -> None:
        """Before the core runs: the C path's sends, as the core would have recorded them."""
        used = self.port.take_used()
        if used:
            self.core.fast_used(used)

    def sync(self) -> None:
        """After the core ran: its RESOLVED destinations and interface state into C."""
        config = self.core.fast_config()
        if config != self._config:
            lid, registered, ifaces = config
            self.port.configure(lid, registered, self.core.mac,
                                [(fd, *i) for fd, i in zip(self.tap_fds, ifaces)])
        key = self.core.fast_key()
        if key != self._key or config != self._config:
            self.port.set_neighbours(self.core.fast_neighbours())
        self._config, self._key = config, key

    # --- without sockets: one frame / datagram, C first, else the core ----------------------
    def on_tap(self, name: str, frame: bytes, now: float) -> None:
        k = self.core.ifaces.index(self.core.by_name[name])
        pkt = self.port.tx(k, frame, now)
        if pkt is not None:
            self.core._out.append(("cable", pkt))
            return
        self.settle()
        self.core.on_tap(name, frame, now)
        self.sync()

    def on_cable(self, data: bytes, now: float) -> None:
        r = self.port.rx(data)
        if r is not None:
            self.core._out.append(("tap", self.core.ifaces[r[0]].name, r[1]))
            return
        self.settle()
        self.core.on_cable(data, now)
        self.sync()

    def counters(self) -> tuple[Counter, dict[str, Counter], Counter]:
        """The C path's counts as the Python drivers name them: (port core's, per TAP, cable socket's)."""
        port: Counter[str] = Counter()
        taps: dict[str, Counter] = {i.name: Counter() for i in self.core.ifaces}
        cable: Counter[str] = Counter()
        for (where, what), n in self.port.counters().items():
            if where.startswith("iface"):
                ifc = self.core.ifaces[int(where[5:])]
                port[ifc.tx_key if what == "tx_frames" else ifc.rx_key] += n
            elif where.startswith("tap_read"):
                taps[self.core.ifaces[int(where[8:])].name][_errname("read_", what)] += n
            elif where.startswith("tap_write"):
                name = self.core.ifaces[int(where[9:])].name
                taps[name]["tx_dropped_tap_full" if what == errno.EAGAIN else _errname("tx_error_", what)] += n
            elif where == "send":
                cable["drop_send_buffer_full" if what == errno.EAGAIN else _errname("send_error_", what)] += n
            elif where == "recv":
                cable[_errname("recv_", what)] += n
            else:
                cable[what] += n
        return port, taps, cable


class SwitchFast:
    def __init__(self, core: SwitchCore, switch: Switch) -> None:
        self.core = core
        self.switch = switch
        self._lft: dict | None = None

    def sync(self) -> None:
        """After the core took SM tables: its LFT into C."""
        if self.core.lft is not self._lft:
            self.switch.set_lft(self.core.lft)
            self._lft = self.core.lft

    def on_cable(self, port: int, data: bytes, now: float) -> list[tuple[int, bytes]]:
        """Without sockets: where a datagram goes, C first, else the core."""
        out = self.switch.route(port, data)
        if out is not None:
            return [(out, data)]
        return self.core.on_cable(port, data, now)

    def counters(self) -> tuple[Counter, dict[int, Counter]]:
        """(the switch core's, per cable socket) as the Python path names them."""
        core: Counter[str] = Counter()
        socks: dict[int, Counter] = {}
        for (where, what), n in self.switch.counters().items():
            if where == "switch":
                core[what] += n
            elif where.startswith("port"):
                socks.setdefault(int(where[4:]), Counter())[what] += n
            elif where.startswith("send"):
                name = "drop_send_buffer_full" if what == errno.EAGAIN else _errname("send_error_", what)
                socks.setdefault(int(where[4:]), Counter())[name] += n
            else:
                socks.setdefault(int(where[4:]), Counter())[_errname("recv_", what)] += n
        return core, socks


class SettledCore:
    """A core for daemons.runtime.corerunner whose timers first take in the C path's sends (reaping reads them)."""

    def __init__(self, fast: PortFast) -> None:
        self.fast = fast
        self.core = fast.core

    @property
    def timers_changed(self) -> bool:
        return self.core.timers_changed

    @timers_changed.setter
    def timers_changed(self, value: bool) -> None:
        self.core.timers_changed = value

    def timer(self) -> float:
        return self.core.timer()

    def handle_timer(self, now: float) -> None:
        self.fast.settle()
        self.core.handle_timer(now)
