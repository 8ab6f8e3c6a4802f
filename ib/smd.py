"""ib-sm: the subnet manager and SA daemon (a UDP management socket, the LID state
file, a control socket)."""

from __future__ import annotations

from collections import Counter
from functools import partial

import json
import os
import secrets
from pathlib import Path

import structlog
import trio

from daemons.runtime.control import serve_control
from daemons.runtime.log import CounterLog
from daemons.runtime.notify import sd_notify

from .config import SmConfig
from .control import SM_SCHEMA
from .constants import DROPLOG_PERIOD_S
from daemons.runtime.corerunner import CoreRunner
from .smcore import SmCore
from .udp import Udp

log = structlog.get_logger("ib-sm")


def load_lids(path: Path) -> dict[int, int]:
    """GUID -> LID from the state file; a missing file is an empty table, a damaged one
    is logged and ignored (LIDs are then assigned afresh)."""
    try:
        raw = json.loads(path.read_text())
        return {int(g, 16): int(lid) for g, lid in raw["lids"].items() if 0 < int(lid) < 0xC000}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("state.unreadable", path=str(path), error=str(exc))
        return {}


def save_lids(path: Path, lids: dict[int, int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"lids": {f"{g:#018x}": lid for g, lid in sorted(lids.items())}}, indent=1))
    os.replace(tmp, path)


class SmDaemon:
    def __init__(self, cfg: SmConfig) -> None:
        self.cfg = cfg
        self.core = SmCore(secrets.randbits(64) or 1, cfg.parts, load_lids(cfg.state_file), cfg.gid_prefix)
        self.udp = Udp(cfg.listen)
        self.runner = CoreRunner(self.core, self.flush)
        self.droplog = CounterLog(log)
        self.control_counters: Counter[str] = Counter()

    def flush(self) -> None:
        for dst, data in self.core.outgoing():
            self.udp.send(data, dst)
        if self.core.lids_changed:
            self.core.lids_changed = False
            try:
                save_lids(self.cfg.state_file, self.core.lids)
            except OSError as exc:
                self.core.counters["state_write_error"] += 1
                log.error("state.write_failed", path=str(self.cfg.state_file), error=exc.strerror)

    async def _rx(self) -> None:
        while True:
            await self.udp.wait_readable()
            now = trio.current_time()
            for data, src in self.udp.drain():
                self.core.on_datagram(data, src, now)
            self.runner.step()

    async def _control(self, req: dict) -> dict:
        return {"ok": True, **self.core.status(), "socket": dict(self.udp.counters), "control": dict(self.control_counters)}

    async def _drops(self) -> None:
        """New drop reasons logged, then at most every 10 s per reason (off the data path)."""
        while True:
            await trio.sleep(DROPLOG_PERIOD_S)
            self.droplog.update("sm", self.core.counters, trio.current_time())

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self.cfg.runtime_dir.mkdir(parents=True, exist_ok=True)
        log.info("sm.start", listen=f"{self.cfg.listen[0]}:{self.cfg.listen[1]}", epoch=f"{self.core.epoch:#x}",
                 known_lids=len(self.core.lids), partitions=[f"{p.pkey:#06x}" for p in self.cfg.parts])
        async with trio.open_nursery() as n:
            await n.start(partial(serve_control, str(self.cfg.runtime_dir / "control.sock"), self._control, SM_SCHEMA,
                                  counters=self.control_counters))
            n.start_soon(self._rx)
            n.start_soon(self.runner.run)
            n.start_soon(self._drops)
            sd_notify("READY=1")
            task_status.started()
