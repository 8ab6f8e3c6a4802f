"""Issue 10 item 1: a 72-byte datagram (unsequenced batch, one micropacket with a
reserved TYPE and a valid LCRC) ended gsnd and gsn-switch.  It must be a counted
drop on every cable path."""

from daemons.endpoint.core import Endpoint
from tests.unit.linkpair import each_impl
from daemons.switch.core import Switch
from daemons.wire.micropacket import MP_DTYPE, lcrc_exact
from daemons.wire.shim import decode_datagram

import numpy as np

# Captured from a run against gsnd (cable id 1).
DEATH = bytes.fromhex(
    "4753010000000001aad6c12082569e290000000000008dfb000000000000e94a"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "280049fa0000cf6d"
)


def test_the_datagram_is_what_the_issue_says():
    shim, count = decode_datagram(DEATH)
    assert len(DEATH) == 72 and count == 1 and not shim.sequenced and shim.cable_id == 1
    rec = np.frombuffer(DEATH, MP_DTYPE, 1, 32)
    assert lcrc_exact(rec).all()
    assert (int(rec["ctrl"][0]) >> 58) & 0xF == 0xA  # reserved TYPE


@each_impl
def test_link_counts_a_reserved_type_in_a_control_batch(impl):
    link = impl(1, 0.0)
    link.receive(DEATH, 0.0)
    assert link.counters["bad_control_TYPE"] == 1
    assert link.events() == []
    # the link still works: a RESET from the peer still brings it up
    peer = impl(1, 0.0)
    for d in peer.datagrams(0.0):
        link.receive(d, 0.001)
    assert link.up


@each_impl
def test_link_counts_it_while_up_too(impl):
    a, b = impl(1, 0.0), impl(1, 0.0)
    for _ in range(3):
        for x, y in ((a, b), (b, a)):
            for d in x.datagrams(0.0):
                y.receive(d, 0.0)
    assert a.up and b.up
    b.receive(DEATH, 0.01)
    assert b.up and b.counters["bad_control_TYPE"] == 1


def test_gsnd_core_survives_and_counts():
    ep = Endpoint(1, 0.0)
    ep.link.receive(DEATH, 0.0)
    ep.process(0.0)
    ep.handle_timer(0.01)
    assert ep.link.counters["bad_control_TYPE"] == 1


def test_switch_core_survives_and_counts():
    sw = Switch(1, [1, 2], 0.0)
    sw.ports[1].link.receive(DEATH, 0.0)
    sw.process(1, 0.0)
    assert sw.ports[1].link.counters["bad_control_TYPE"] == 1
    assert sw.status()["ports"]["1"]["link"]["counters"]["bad_control_TYPE"] == 1


# --- Admin micropackets the fuzzer found accepted although damaged ------------------
from daemons import constants as C  # noqa: E402
from daemons.constants import AdminCmd, MpType  # noqa: E402
from daemons.link.reassembly import AdminIn, Reassembler  # noqa: E402
from daemons.wire.admin import Admin  # noqa: E402
from daemons.wire.message import single_records  # noqa: E402
from daemons.wire.micropacket import restamp  # noqa: E402

import pytest  # noqa: E402


def damaged_admin(defect: str, vc: int = 1) -> np.ndarray:
    recs = single_records(vc, MpType.ADMIN, Admin(AdminCmd.ARE_YOU_THERE, xid=7, hop_count=0, init_hops=1).encode())
    ctrl = recs["ctrl"].astype(np.uint64)
    if defect == "error_bit":
        ctrl |= np.uint64(1 << C.CTRL_ERROR_SHIFT)
    elif defect == "ecrc":
        ctrl ^= np.uint64(0x1234 << C.CTRL_ECRC_SHIFT)
    elif defect == "admin_without_tail":
        ctrl &= ~np.uint64(1 << C.CTRL_TAIL_SHIFT)
    restamp(recs, ctrl)
    return recs


@pytest.mark.parametrize("defect", ["error_bit", "ecrc", "admin_without_tail"])
def test_endpoint_discards_damaged_admin(defect):
    r = Reassembler()
    assert r.feed(1, damaged_admin(defect)) == []
    assert r.counters[f"discard_{defect}"] == 1
    assert r.feed(1, damaged_admin("none")) == [AdminIn(1, bytes(damaged_admin("none")["data"][0]))]


@pytest.mark.parametrize("defect", ["error_bit", "ecrc", "admin_without_tail"])
def test_switch_discards_damaged_admin(defect):
    """The switch is the final destination of the Admin it answers or re-issues."""
    sw = Switch(1, [1], 0.0)
    port = sw.ports[1]
    sw._ingress(port, 1, damaged_admin(defect), 0.0)
    assert port.counters[f"admin_discard_{defect}"] == 1
    assert port.counters["rx_admin"] == 0 and not any(sw.admin_q)
    sw._ingress(port, 1, damaged_admin("none"), 0.0)
    assert port.counters["rx_admin"] == 1 and sw.admin_q[C.VC_ADMIN_RESPONSE]


async def test_pktwayd_twin_link_survives_it_on_a_real_socket():
    """pktwayd's twin cable reuses the link: the datagram from its configured peer,
    over real UDP, is counted and the cable's task keeps running."""
    import socket

    import trio

    from pktwayd.twinlink import TwinLink

    attacker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    attacker.bind(("127.0.0.1", 0))
    twin = TwinLink(("127.0.0.1", 0), attacker.getsockname(), 0, 1, lambda raw, now: None, lambda up: None)
    assert twin.ep.link.cable_id == 1  # the captured datagram's cable id
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(twin.run)
            with trio.fail_after(5):
                while not twin.ep.link.counters["bad_control_TYPE"]:
                    attacker.sendto(DEATH, twin.transport.sock.getsockname())
                    await trio.sleep(0.01)
            await trio.sleep(0.05)  # the task would have died by now
            nursery.cancel_scope.cancel()
    finally:
        twin.transport.close()
        attacker.close()


# --- a neighbour posing as a switch and assigning an impossible ULA -----------------
from daemons.constants import ElementType  # noqa: E402
from daemons.link.link import Link, Received  # noqa: E402
from daemons.wire.admin import i_am_args  # noqa: E402


def _fake_switch_assigns(ula: bytes) -> Endpoint:
    """Bring an endpoint up against a sans-IO neighbour that answers WHAT_ARE_YOU as a
    switch and ASSIGN_ULA with ``ula``; return the endpoint."""
    ep = Endpoint(1, 0.0, rng=__import__("random").Random(3))
    peer = Link(1, 0.0)
    reasm = Reassembler()
    now = 0.0
    for _ in range(20):
        now += 0.001
        for d in peer.handle_timer(now) + peer.datagrams(now):
            ep.link.receive(d, now)
        ep.process(now)
        for d in ep.handle_timer(now) + ep.link.datagrams(now):
            peer.receive(d, now)
        for ev in peer.events():
            if not isinstance(ev, Received):
                continue
            for out in reasm.feed(ev.vc, ev.recs):
                req = Admin.decode(out.data)
                if req.command == AdminCmd.WHAT_ARE_YOU:
                    resp = req.response(AdminCmd.I_AM, i_am_args(ElementType.SWITCH, 8, bytes(6)))
                else:
                    resp = req.response(AdminCmd.HERE_IS_ULA, ula)
                peer.enqueue(C.VC_ADMIN_RESPONSE,
                             single_records(C.VC_ADMIN_RESPONSE, MpType.ADMIN, resp.encode()))
            peer.release(ev.vc, len(ev.recs))
    return ep


@pytest.mark.parametrize("ula", [C.ULA_BROADCAST, bytes(6), bytes.fromhex("0300005e0001")])
def test_endpoint_refuses_an_assigned_ula_that_is_not_an_individual_address(ula):
    """gsnd would set it as the TAP's MAC, which the kernel refuses, ending gsnd."""
    ep = _fake_switch_assigns(ula)
    assert ep.neighbour == "switch"
    assert ep.ula is None
    assert ep.counters["admin_bad_assigned_ula"] >= 1
    assert ep._acquiring is not None  # still asking (and retrying) for a usable one


def test_endpoint_adopts_a_good_assigned_ula():
    ep = _fake_switch_assigns(bytes.fromhex("024753010100"))
    assert ep.ula == bytes.fromhex("024753010100") and not ep.counters["admin_bad_assigned_ula"]
