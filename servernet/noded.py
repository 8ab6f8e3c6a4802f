"""snetd: a ServerNet end node (BTE, AVT, path state machines) on two fabric sockets,
with a control socket for snetctl."""

from __future__ import annotations

import os
import random
from collections import Counter
from functools import partial

import click
import structlog
import trio

from daemons.runtime import daemon
from daemons.runtime.cliutil import version_option
from daemons.runtime.control import serve_control
from daemons.runtime.notify import sd_notify
from daemons.runtime.schema import Int, Schema, Str

from .avt import Avt
from .bte import Op
from .config import NodeConfig, load
from .constants import CONTROL_INLINE_BYTES, MAX_BLOCK_BYTES, MAX_WAITING_BLOCKS, MAX_WAITING_CLIENT_OPS, Fabric
from .driver import FabricDriver
from .endpoint import Endpoint

log = structlog.get_logger("snetd")
CTX = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
HEX = r"([0-9a-fA-F]{2})*"
PEER = Str(32)
ADDR = Int(0, 0xFFFFFFFF)
CONTROL_SCHEMA = Schema({
    "status": {},
    "read": {"peer": PEER, "address": ADDR, "length": Int(1, CONTROL_INLINE_BYTES)},
    "write": {"peer": PEER, "address": ADDR, "data": Str(2 * CONTROL_INLINE_BYTES, pattern=HEX),
              "fabric": Str(1, pattern="[xy]", optional=True)},
    "block": {"peer": PEER, "address": ADDR, "data": Str(2 * CONTROL_INLINE_BYTES, pattern=HEX, optional=True),
              "length": Int(1, MAX_BLOCK_BYTES, optional=True), "seed": Int(0, 2**32 - 1, optional=True),
              "doorbell": Int(0, 0xFFFFFFFF, optional=True), "fabric": Str(1, pattern="[xy]", optional=True)},
    "interrupts": {"max": Int(1, 4096, optional=True)},
})


def pattern(seed: int, length: int) -> bytes:
    """The bytes a block sent with ``seed`` carries (the receiver's test can rebuild them)."""
    return random.Random(seed).randbytes(length)


class Snetd:
    def __init__(self, cfg: NodeConfig) -> None:
        self.cfg = cfg
        avt = Avt(cfg.windows, frozenset(p.id for p in cfg.peers), cfg.interrupt_queue)
        self.core = Endpoint(cfg.id, [p.id for p in cfg.peers], avt, ii=cfg.ii, timeout=cfg.timeout,
                             now=trio.current_time())
        self.driver = FabricDriver(self.core, cfg.fabrics)
        self.control_counters: Counter[str] = Counter()
        self.waiting = 0
        self.waiting_blocks = 0

    def flush(self) -> None:
        self.driver.flush()

    # --- control -------------------------------------------------------------------------------
    async def _wait(self, ops: list[Op]) -> list[Op]:
        pending = [o for o in ops if not o.done]
        if pending:
            done = trio.Event()
            left = [len(pending)]

            def one(_op):
                left[0] -= 1
                if not left[0]:
                    done.set()

            for o in pending:
                o.on_done = one
            self.flush()
            await done.wait()
        return ops

    def _submit(self, kind: str, peer: int, address: int, **kw) -> Op:
        return self.core.bte.submit(Op(kind, peer, address, **kw), trio.current_time())

    async def _control(self, req: dict) -> dict:
        cmd = req["cmd"]
        now = trio.current_time()
        if cmd == "status":
            return self._status(now)
        if cmd == "interrupts":
            irqs = self.core.avt.pop_interrupts(req.get("max", 64))
            return {"ok": True, "interrupts": [{"source": i.source, "address": i.address,
                                                "fabric": Fabric(i.fabric).name, "data": i.data.hex()} for i in irqs],
                    "blocks": list(self.core.blocks)}
        peer = self.cfg.peer(req["peer"])
        if peer is None:
            return {"ok": False, "error": f"unknown peer {req['peer']!r} (not in this node's [[peer]] list)"}
        if self.waiting >= MAX_WAITING_CLIENT_OPS:
            self.control_counters["refused_busy"] += 1
            return {"ok": False, "error": "busy: too many requests waiting on the BTE; try again"}
        if cmd == "block" and self.waiting_blocks >= MAX_WAITING_BLOCKS:
            self.control_counters["refused_busy"] += 1
            return {"ok": False, "error": f"busy: {MAX_WAITING_BLOCKS} blocks already under way; try again"}
        self.waiting += 1
        self.waiting_blocks += cmd == "block"
        try:
            return await self._transfer(cmd, peer, req, now)
        finally:
            self.waiting -= 1
            self.waiting_blocks -= cmd == "block"

    async def _transfer(self, cmd: str, peer, req: dict, now: float) -> dict:
        addr, chunk = req["address"], self.core.bte.chunk
        prefer = Fabric[req["fabric"].upper()] if "fabric" in req else None
        if addr + req.get("length", len(req.get("data", "")) // 2) > 1 << 32:
            return {"ok": False, "error": "the range runs past the 32-bit address space"}
        if cmd == "read":
            n = req["length"]
            ops = [self._submit("read", peer.id, addr + o, length=min(chunk, n - o)) for o in range(0, n, chunk)]
            await self._wait(ops)
            err = next((o.error for o in ops if o.error), None)
            if err is not None:
                return {"ok": False, "error": err}
            return {"ok": True, "data": b"".join(o.result or b"" for o in ops).hex(),  # no error: each has its data
                    "elapsed_s": max(o.finished for o in ops) - now}
        if cmd == "write":
            data = bytes.fromhex(req["data"])
            ops = [self._submit("write", peer.id, addr + o, data=data[o:o + chunk], fabric=prefer)
                   for o in range(0, len(data), chunk)]
            await self._wait(ops)
            err = next((o.error for o in ops if o.error), None)
            return {"ok": err is None, "error": err, "length": len(data),
                    "elapsed_s": max((o.finished for o in ops), default=now) - now}
        bell = req.get("doorbell", peer.doorbell)
        if bell is None:
            return {"ok": False, "error": f"no doorbell: give one or set doorbell in peer {peer.name!r}"}
        if "data" in req:
            data = bytes.fromhex(req["data"])
        elif "length" in req:
            data = pattern(req.get("seed", 0), req["length"])
        else:
            return {"ok": False, "error": "block: give data, or length (and seed) for a pattern"}
        if not data:
            return {"ok": False, "error": "block: no data"}
        (op,) = await self._wait([self._submit("block", peer.id, addr, data=data, length=len(data), doorbell=bell,
                                              fabric=prefer)])
        elapsed = op.finished - op.started
        return {"ok": op.error is None, "error": op.error, "length": len(data), "seq": op.seq,
                "elapsed_s": elapsed, "goodput_MBps": len(data) / elapsed / 1e6 if elapsed > 0 else None,
                "packets": dict(op.packets)}

    def _status(self, now: float) -> dict:
        core, fast = self.core, self.driver.fast.engine.status()
        return {"ok": True, "id": f"{self.cfg.id:#07x}", "name": self.cfg.name, "servernet_ii": self.cfg.ii,
                "fabrics": {Fabric(f).name: {"local": f"{lo[0]}:{lo[1]}", "router": f"{r[0]}:{r[1]}"}
                            for f, (lo, r) in self.cfg.fabrics.items()},
                "peers": {f"{p.id:#07x}": p.name for p in self.cfg.peers},
                "paths": core.paths_status(now),
                "tids_in_use": core.bte.in_use + fast["tids_in_use"],
                "tids_high_water": max(core.bte.high_water, fast["tids_high_water"]),
                "tids_lent": fast["tids_lent"], "blocks_compiled": fast["blocks"],
                "pending_ops": len(core.bte.ready),
                "interrupts_queued": len(core.avt.queue),
                "windows": [{"name": w.name, "address": f"{w.base:#010x}", "bytes": w.size, "access": w.access,
                             "interrupt": w.interrupt, "per_source": w.per_source,
                             "paths": sorted(Fabric(f).name for f in w.paths),
                             "sources": None if w.sources is None else sorted(f"{s:#07x}" for s in w.sources)}
                            for w in core.avt.windows],
                "counters": {k: dict(v) for k, v in self.driver.all_counters().items()},
                "control": dict(self.control_counters)}

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        os.makedirs(os.path.dirname(self.cfg.control) or ".", exist_ok=True)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(partial(serve_control, self.cfg.control, self._control, CONTROL_SCHEMA,
                                            counters=self.control_counters))
                self.driver.start(nursery)
                log.info("snetd.started", id=f"{self.cfg.id:#07x}", name=self.cfg.name, peers=len(self.cfg.peers),
                         windows=len(self.cfg.windows))
                sd_notify("READY=1")
                task_status.started()
        finally:
            self.driver.close()


@click.command(context_settings=CTX)
@click.option("-c", "--config", "path", default="/etc/gsn/snetd.toml", show_default=True,
              help="The node's TOML file: [node] id, [fabric.x]/[fabric.y] sockets, [[peer]]s, [[window]]s.")
@click.option("--check", is_flag=True, help="Validate the configuration and exit.")
@version_option
def main(path, check) -> None:
    """A ServerNet end node emulated over UDP, on fabrics X and Y at once.

    Its BTE starts this node's reads, writes and blocks (16 transactions in flight, a
    timer each: one retry on the same fabric, then the other); its AVT answers the
    peers' requests for the windows it exposes, with a NAK for invalid access.  Each
    (peer, fabric) path is UP, SUSPECT, HARD_DOWN or PROBING.  snetctl talks to it.

    Example configuration (etc/snetd.toml):

    \b
      [node]
      id = 0x04001
      control = "/run/snetd/a.sock"
      [fabric.x]
      local = "127.0.0.1:7510"
      router = "127.0.0.1:7500"
      [fabric.y]
      local = "127.0.0.1:7511"
      router = "127.0.0.1:7501"
      [[peer]]
      id = 0x08001
      name = "b"
      doorbell = 0x300000
      [[window]]
      name = "buf"
      page = 0x100
      pages = 256
      access = "rw"
    """
    daemon.serve(lambda: load(path), "snetd", Snetd, check=check)
