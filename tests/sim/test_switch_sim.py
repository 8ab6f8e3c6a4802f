"""Switch behaviour on trio's virtual clock: Admin commands, ULA assignment,
broadcast on/off, unknown destinations, hairpin, port down."""

import pytest
import trio

from daemons import constants as C
from daemons.constants import AdminCmd, AdminStatus, ElementType
from daemons.wire.admin import change_route_args, parse_i_am, parse_ula_list
from daemons.wire.ula import assigned_ula
from tests.sim.fabric import SimFabric

pytestmark = pytest.mark.usefixtures("switch_forwarder")  # compiled and Python walks


async def _fabric(nursery, **kw):
    fab = SimFabric(3, seed=11, **kw)
    await fab.run(nursery)
    await fab.wait_ready()
    return fab


async def test_ula_assignment_and_admin_commands(autojump_clock):
    async with trio.open_nursery() as nursery:
        fab = await _fabric(nursery, management_ports=(1,))
        assert [ep.ula for ep in fab.endpoints] == [assigned_ula(1, p) for p in (1, 2, 3)]
        (r,) = await fab.ask(0, AdminCmd.WHAT_ARE_YOU)
        assert r.command == AdminCmd.I_AM and parse_i_am(r.args)[:2] == (ElementType.SWITCH, 3)
        (r,) = await fab.ask(0, AdminCmd.ARE_YOU_THERE)
        assert r.command == AdminCmd.I_AM_HERE
        listing = await fab.ask(0, AdminCmd.LIST_ULAS, b"\0\0")
        entries = {parse_ula_list(a.args)[2]: parse_ula_list(a.args)[3] for a in listing}
        assert entries == {assigned_ula(1, p): p for p in (1, 2, 3)}
        assert [parse_ula_list(a.args)[4] for a in listing] == [True, True, False]
        (r,) = await fab.ask(1, AdminCmd.GET_PORT, assigned_ula(1, 3))
        assert r.command == AdminCmd.PORT_ID and int.from_bytes(r.args[6:8], "big") == 3
        (r,) = await fab.ask(1, AdminCmd.GET_PORT, b"\x02\x99\x99\x99\x99\x99")
        assert r.status == AdminStatus.NO_SUCH_ULA
        (r,) = await fab.ask(0, 0x42)  # unknown command
        assert r.command == AdminCmd.INVALID_ADMIN and r.args[0] == 0x42
        # CHANGE_ROUTE from the management port: traffic for a new alias goes to port 3
        alias = b"\x02\xaa\xbb\xcc\xdd\xee"
        (r,) = await fab.ask(1, AdminCmd.CHANGE_ROUTE, change_route_args(alias, 2))  # host port 2: refused
        assert r.command == AdminCmd.INVALID_ADMIN and alias not in fab.switch.table
        (r,) = await fab.ask(0, AdminCmd.CHANGE_ROUTE, change_route_args(alias, 3))
        assert r.command == AdminCmd.ROUTE_STATUS and r.status == AdminStatus.OK
        (r,) = await fab.ask(0, AdminCmd.CHANGE_ROUTE, change_route_args(alias, 99))
        assert r.status == AdminStatus.BAD_ARGUMENT
        # hop 2: through the switch to endpoint 3, answered by the endpoint
        (r,) = await fab.ask(0, AdminCmd.WHAT_ARE_YOU, hops=2, route=(3,))
        assert parse_i_am(r.args)[0] == ElementType.ENDPOINT and parse_i_am(r.args)[2] == fab.endpoints[2].ula
        nursery.cancel_scope.cancel()


async def test_broadcast_copies_to_every_port_including_sender(autojump_clock):
    async with trio.open_nursery() as nursery:
        fab = await _fabric(nursery)
        fab.send(0, 1, C.ULA_BROADCAST, 0x0806, b"who has")
        fab.send(0, 1, fab.endpoints[0].ula, 0x0806, b"hairpin")
        await trio.sleep(0.5)
        assert [m.payload for m in fab.inbox[0]] == [b"who has", b"hairpin"]
        assert [m.payload for m in fab.inbox[1]] == [b"who has"] == [m.payload for m in fab.inbox[2]]
        nursery.cancel_scope.cancel()


async def test_broadcast_off_discards_and_unknown_ula_counted(autojump_clock):
    async with trio.open_nursery() as nursery:
        fab = await _fabric(nursery, broadcast=False)
        fab.send(0, 1, C.ULA_BROADCAST, 0x0806, b"who has")
        fab.send(0, 1, b"\x02\x01\x01\x01\x01\x01", 0x0800, b"nobody")
        fab.send(0, 1, fab.endpoints[1].ula, 0x0800, b"real")
        await trio.sleep(0.5)
        assert [m.payload for m in fab.inbox[1]] == [b"real"]
        assert fab.inbox[0] == [] and fab.inbox[2] == []
        c = fab.switch.ports[1].counters
        assert c["drop_broadcast_disabled"] == 1 and c["drop_unknown_ula"] == 1
        for ep in fab.endpoints:  # discarded Messages still return their credits
            assert ep.link.credits == list(C.VC_BUFFER_MPS)
        nursery.cancel_scope.cancel()


async def test_port_goes_down_when_endpoint_silent(autojump_clock):
    async with trio.open_nursery() as nursery:
        fab = await _fabric(nursery)
        fab.cables[2].connected = False
        await trio.sleep(C.DEAD_INTERVAL_S + 1.0)
        assert not fab.switch.ports[3].link.up
        assert fab.switch.ports[3].link.counters["link_down_silent"] >= 1
        fab.send(0, 1, fab.endpoints[2].ula, 0x0800, b"to a dead port")
        await trio.sleep(0.2)
        assert fab.switch.ports[1].counters["drop_output_down"] == 1
        fab.cables[2].connected = True
        await trio.sleep(1.0)
        assert fab.switch.ports[3].link.up
        fab.send(0, 1, fab.endpoints[2].ula, 0x0800, b"back")
        await trio.sleep(0.5)
        assert [m.payload for m in fab.inbox[2]] == [b"back"]
        nursery.cancel_scope.cancel()
