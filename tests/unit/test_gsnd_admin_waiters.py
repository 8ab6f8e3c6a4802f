"""gsnd's driver hands Admin responses to a waiting control request through a
bounded channel: a neighbour answering with more responses than the channel holds
(a switch listing more ULAs than that, or a hostile one) must not end gsnd."""

import trio

from daemons.constants import AdminCmd
from daemons.gsnd.config import GsndConfig
from daemons.endpoint.core import AdminResponse
from daemons.gsnd.daemon import Gsnd
from daemons.wire.admin import Admin, ula_list_args


async def test_more_responses_than_the_waiter_holds_are_counted(tmp_path):
    gsnd = Gsnd(GsndConfig(local=("127.0.0.1", 0), peer=("127.0.0.1", 9), tap=None, runtime_dir=str(tmp_path)))
    try:
        send, recv = trio.open_memory_channel(256)  # a waiter with room for 256 answers
        gsnd.admin_waiters[42] = send
        for i in range(300):
            gsnd.ep._events.append(AdminResponse(Admin(AdminCmd.ULA_LIST, xid=42,
                                                       args=ula_list_args(i, 300, bytes(6), 1, True))))
        gsnd._on_input(trio.current_time())
        assert gsnd.ep.counters["admin_response_overflow"] == 44
        got = [recv.receive_nowait() for _ in range(256)]
        assert [a.xid for a in got] == [42] * 256
    finally:
        gsnd.transport.close()
