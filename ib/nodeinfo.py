"""The hello each end of a cable sends on QP0 (VL15, DLID permissive) so a switch
learns who is on each of its ports, for the SM's port discovery (project choice,
standing for the SM's NodeInfo/PortInfo reads of the IBA).

Payload: node type u8 (1 = CA, 2 = switch) | GUID u64 (port GUID of a CA, node GUID
of a switch) | port number u8.
"""

from __future__ import annotations

import struct

from . import packet
from .constants import LID_PERMISSIVE, QPN_SMI, VL_MANAGEMENT
from .mgmt import PEER_CA, PEER_SWITCH

_HELLO = struct.Struct("!BQB")


def hello(kind: int, guid: int, port: int) -> bytes:
    return packet.UdPacket(slid=LID_PERMISSIVE, dlid=LID_PERMISSIVE, pkey=0xFFFF, dqpn=QPN_SMI, sqpn=QPN_SMI, qkey=0,
                           payload=_HELLO.pack(kind, guid, port), vl=VL_MANAGEMENT).encode()


def parse_hello(p: packet.UdPacket) -> tuple[int, int, int]:
    """(kind, guid, port) of a hello packet; ValueError when it is not one."""
    if p.dqpn != QPN_SMI or len(p.payload) != _HELLO.size:
        raise ValueError("not a hello")
    kind, guid, port = _HELLO.unpack(p.payload)
    if kind not in (PEER_CA, PEER_SWITCH):
        raise ValueError("bad node type")
    return kind, guid, port
