"""A slow ULP client on trio's virtual clock, through a switch: gsnd's delivery
core holds what the client's socket cannot take and withholds the VC's credits,
so the sender is slowed to the reader's pace and nothing is lost; past the bound
the drops are counted and the sender's gsnd is told (an ERROR frame)."""

from __future__ import annotations

from collections import deque

import trio

from daemons import constants as C
from daemons.gsnd.delivery import Delivery, is_notice, notice_in, settle
from daemons.wire.ulp import Frame, Op
from tests.sim.fabric import SimFabric

ET = 0x88B5
SIZE = 3000  # bytes: 95 micropackets a Message on VC1
ROOM = 32  # frames the receiving client's socket holds


class SlowClient:
    """The receiving gsnd's ULP client: a socket of ROOM frames read by a task."""

    def __init__(self, fab: SimFabric, i: int) -> None:
        self.fab, self.i, self.ep = fab, i, fab.endpoints[i]
        self.delivery = Delivery()
        self.delivery.add("c")
        self.sock: deque[bytes] = deque()
        self.got: list[Frame] = []
        self.max_backlog = 0
        self.first_drop: float | None = None
        self.timer_moved = trio.Event()
        fab.handlers[i] = self.on_message

    def send(self, key, frame: bytes) -> str:
        if len(self.sock) >= ROOM:
            return "full"
        self.sock.append(frame)
        return "ok"

    def settle(self, now: float) -> None:
        assert settle(self.delivery, self.ep, now) == []
        self.max_backlog = max(self.max_backlog, self.delivery.backlog("c"))
        if self.first_drop is None and self.delivery.counters["rx_dropped_not_reading"]:
            self.first_drop = now

    def on_message(self, msg) -> None:  # runs in the endpoint's input, like gsnd's _on_input
        self.delivery.deliver(msg, ["c"], trio.current_time(), self.send)
        self.settle(trio.current_time())
        self.timer_moved.set()

    def changed(self) -> None:
        now = trio.current_time()
        self.settle(now)
        self.fab.ep_runners[self.i].flush(now)

    async def read(self, every: float, stop_after: int | None = None) -> None:
        while stop_after is None or len(self.got) < stop_after:
            await trio.sleep(every)
            if self.sock:
                self.got.append(Frame.decode(self.sock.popleft()))
            self.delivery.pump("c", trio.current_time(), self.send)
            self.changed()

    async def timeouts(self) -> None:
        while True:
            with trio.move_on_at(self.delivery.timer()):
                await self.timer_moved.wait()
            self.timer_moved = trio.Event()
            if trio.current_time() >= self.delivery.timer():
                self.delivery.handle_timer(trio.current_time())
                self.changed()


def sender_errors(fab: SimFabric, i: int) -> list[Frame]:
    """ERROR frames the sending gsnd makes of the drop notices it receives."""
    errors = []

    def on_message(msg):
        if is_notice(msg):
            errors.append(notice_in(Delivery(), msg))

    fab.handlers[i] = on_message
    return errors


async def send_all(fab: SimFabric, n: int, dst: bytes) -> None:
    for k in range(n):
        while fab.endpoints[0].link.queued(1) > 4000:  # gsnd's _wait_room
            await trio.sleep(0.001)
        assert fab.send(0, 1, dst, ET, k.to_bytes(4, "big") * (SIZE // 4))


def _all_credits_home(fab: SimFabric) -> None:
    links = [ep.link for ep in fab.endpoints] + [p.link for p in fab.switch.ports.values()]
    for link in links:
        assert link.ledger.balanced()
        assert link.credits == list(C.VC_BUFFER_MPS), link.status()


async def test_a_slow_reader_gets_all_2000_messages_in_order(autojump_clock):
    fab = SimFabric(2, seed=3)
    rx = SlowClient(fab, 1)
    errors = sender_errors(fab, 0)
    async with trio.open_nursery() as nursery:
        await fab.run(nursery)
        await fab.wait_ready()
        nursery.start_soon(rx.timeouts)
        nursery.start_soon(rx.read, 0.002)
        t0 = trio.current_time()
        await send_all(fab, 2000, fab.endpoints[1].ula)
        sending = trio.current_time() - t0
        with trio.fail_after(60):
            while len(rx.got) < 2000:
                await trio.sleep(0.05)
        await trio.sleep(2.0)
        nursery.cancel_scope.cancel()
    assert [int.from_bytes(f.payload[:4], "big") for f in rx.got] == list(range(2000))
    assert all(f.op is Op.RECV and len(f.payload) == SIZE for f in rx.got)
    counters = rx.delivery.counters
    assert not any(k.startswith("rx_dropped") for k in counters) and errors == []
    assert counters["rx_held"] > 1000  # the socket was full most of the time
    # Backlog bounded by the credits: one VC buffer (plus the Message that blocked).
    assert 0 < rx.max_backlog <= C.VC_BUFFER_MPS[1] // 95 + 2
    # The sender went at the reader's pace (2 ms a Message), not the link's: at most
    # the socket, the backlog, the switch (input buffer and output queue, one VC
    # buffer each) and the sender's own queue ran ahead of the reader.
    per_buffer = C.VC_BUFFER_MPS[1] // 95 + 1
    ahead = ROOM + 3 * per_buffer + 4000 // 95 + 2
    assert sending > (2000 - ahead) * 0.002
    _all_credits_home(fab)


async def test_past_the_bound_drops_are_counted_and_the_sender_told(autojump_clock):
    fab = SimFabric(2, seed=4)
    rx = SlowClient(fab, 1)
    errors = sender_errors(fab, 0)
    async with trio.open_nursery() as nursery:
        await fab.run(nursery)
        await fab.wait_ready()
        nursery.start_soon(rx.timeouts)
        nursery.start_soon(rx.read, 0.002, 50)  # reads 50, then never again
        await send_all(fab, 500, fab.endpoints[1].ula)
        with trio.fail_after(60):
            while sum(int(e.payload.split()[0]) for e in errors) < 500 - 50 - ROOM:
                await trio.sleep(0.05)
        await trio.sleep(2.0)
        nursery.cancel_scope.cancel()
    dropped = 500 - 50 - ROOM
    assert [int.from_bytes(f.payload[:4], "big") for f in rx.got] == list(range(50))
    assert [int.from_bytes(rx.sock[k][10:14], "big") for k in range(ROOM)] == list(range(50, 50 + ROOM))
    assert rx.delivery.counters["rx_dropped_not_reading"] == dropped
    assert rx.first_drop is not None
    assert {(e.op, e.vc, e.ethertype, e.ula) for e in errors} == {(Op.ERROR, 1, ET, fab.endpoints[1].ula)}
    assert sum(int(e.payload.split()[0]) for e in errors) == dropped
    assert fab.endpoints[0].link.queued(1) == 0  # nothing stuck at the sender
    _all_credits_home(fab)
