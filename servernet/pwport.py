"""PacketWay's ports on a ServerNet SAN: :class:`AsyncSnetPort` for a pktwayd half
(the ``send_nowait``/``run(on_frame)`` of its other SAN ports) and
:class:`BlockingSnetPort` for a host's :class:`~pktwayd.node.Node` (``bind``, ``send``,
``recv``, ``close``), each one end node (BTE, AVT, both fabrics) with the receive
ring of :mod:`servernet.ring`.  A frame's ``ula`` is the 8-byte ServerNet route."""

from __future__ import annotations

import queue
import threading
from collections import Counter

import trio

from daemons.wire.ulp import Frame, Op
from pktwayd.constants import ETHERTYPE_PKTWAY

from .avt import Avt
from .config import NodeConfig
from .driver import FabricDriver
from .endpoint import Endpoint
from .ring import RingLink, route

RX_QUEUE = 1024  # messages a blocking port holds for recv (beyond: dropped, counted)
CLOSE_DRAIN_S = 2.0  # how long close() lets messages still in flight finish


class AsyncSnetPort:
    def __init__(self, cfg: NodeConfig, rings: dict[int, int] | None = None) -> None:
        """Binds the fabric sockets now, so that a taken address fails at start (OSError)."""
        self.cfg = cfg
        self.on_frame = None
        avt = Avt(cfg.windows, frozenset(p.id for p in cfg.peers), cfg.interrupt_queue)
        self.core = Endpoint(cfg.id, [p.id for p in cfg.peers], avt, ii=cfg.ii, timeout=cfg.timeout)
        self.link = RingLink(self.core, self._deliver, rings)
        self.own_route = route(cfg.id, ring=self.link.ring.base)
        self.driver = FabricDriver(self.core, cfg.fabrics, label="servernet")

    @property
    def counters(self) -> Counter:
        c = self.driver.all_counters()
        return Counter({f"snet_{k}": v for k, v in (self.link.counters | c["node"] | c["bte"]).items()})

    def paths(self) -> dict:
        return self.core.paths_status(trio.current_time())

    def _deliver(self, source: int, message: bytes, back: bytes) -> None:
        if self.on_frame is not None:
            self.on_frame(Frame(Op.RECV, 1, ETHERTYPE_PKTWAY, back, message), trio.current_time())

    def send_nowait(self, raw_route: bytes, payload: bytes, *, vc: int = 1, ethertype: int = ETHERTYPE_PKTWAY) -> None:
        self.link.send(bytes(raw_route), bytes(payload), trio.current_time())
        self.driver.flush()

    async def run(self, on_frame) -> None:
        """Serve both fabrics until cancelled, handing messages to ``on_frame``."""
        self.on_frame = on_frame
        now = trio.current_time()
        for path in self.core.bte.paths.values():
            path.since = now
        try:
            async with trio.open_nursery() as nursery:
                self.driver.start(nursery)
        finally:
            self.driver.close()


class BlockingSnetPort:
    """A host's port: the end node runs in a thread of its own (a trio loop)."""

    def __init__(self, cfg: NodeConfig, rings: dict[int, int] | None = None) -> None:
        self.port = AsyncSnetPort(cfg, rings)  # OSError here when a fabric address is taken
        self.rx: queue.Queue[Frame] = queue.Queue(RX_QUEUE)
        self.dropped = 0
        self.token: trio.lowlevel.TrioToken | None = None
        self.cancel: trio.CancelScope | None = None
        self.error: BaseException | None = None
        started = threading.Event()
        self.thread = threading.Thread(target=self._main, args=(started,), daemon=True, name="servernet")
        self.thread.start()
        started.wait()
        if self.error is not None:
            raise self.error

    def _main(self, started: threading.Event) -> None:
        async def body() -> None:
            self.token = trio.lowlevel.current_trio_token()
            with trio.CancelScope() as self.cancel:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self.port.run, self._frame)
                    started.set()

        try:
            trio.run(body)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            while isinstance(exc, BaseExceptionGroup):
                exc = exc.exceptions[0]
            self.error = exc
        finally:
            started.set()

    def _frame(self, frame: Frame, now: float) -> None:
        try:
            self.rx.put_nowait(frame)
        except queue.Full:
            self.dropped += 1

    def bind(self, ethertype: int) -> Frame:
        return Frame(Op.STATUS, 1, ethertype, self.port.own_route)

    def send(self, raw_route: bytes, payload: bytes, *, vc: int = 1, ethertype: int = ETHERTYPE_PKTWAY) -> None:
        trio.from_thread.run_sync(self.port.send_nowait, raw_route, payload, trio_token=self.token)

    def recv(self, timeout: float | None = None) -> Frame:
        try:
            return self.rx.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError("no packet") from None

    async def _drain(self) -> None:
        bte, fast = self.port.core.bte, self.port.driver.fast
        with trio.move_on_after(CLOSE_DRAIN_S):
            while bte.in_use or bte.ready or fast.blocks:  # fast.blocks: those the compiled engine runs
                await trio.sleep(0.005)

    def close(self) -> None:
        """Let the messages in flight finish (up to CLOSE_DRAIN_S), then stop."""
        if self.token is not None and self.cancel is not None and self.thread.is_alive():
            try:
                trio.from_thread.run(self._drain, trio_token=self.token)
                trio.from_thread.run_sync(self.cancel.cancel, trio_token=self.token)
            except trio.RunFinishedError:
                pass
        self.thread.join(5)
