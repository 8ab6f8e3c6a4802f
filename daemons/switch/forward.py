"""gsn-switch's ingress walk in Python: the oracle of the compiled one
(daemons/_switchfwd.c, ``Forwarder``), with the same interface and results.

``ingress(recs, vc, in_port, current, pos, broadcast, tree_ports)`` walks one batch of
one input VC from ``pos``: a HEADER opens a Message (its D_ULA picks the output ports,
its S_ULA is checked against the ingress port, a broadcast follows the spanning tree),
the batch is cut into segments ``(start, end, targets, tail)`` at TAIL, HEADER and
ADMIN, and the walk stops at an ADMIN micropacket (the Switch handles it: it may change
the table).  ``start == end`` means "close the open Message with TAIL + ERROR".  It
returns ``(segments, pos, current, counts, stray_mps)``; ``counts`` follow COUNTERS.
"""

from __future__ import annotations

import numpy as np

from .._switchfwd import COUNTERS as _C_COUNTERS, Forwarder as Forwarder  # re-exported: the compiled forwarder
from .. import constants as C
from ..constants import MpType
from ..wire.micropacket import MP_DTYPE, field as ctrl_field

COUNTERS: tuple[str, ...] = _C_COUNTERS
_I = {name: i for i, name in enumerate(COUNTERS)}
_U64 = np.uint64


class PyForwarder:
    def __init__(self, ports: dict, table: dict) -> None:
        self.ports = ports
        self.table = table

    def _route(self, port, in_no: int, header: bytes, broadcast: bool, tree: int, counts: list) -> tuple:
        bound = self.table.get(header[6:12])
        if port.fabric:
            # from another switch: any source but one this switch binds to a host port
            if bound is not None and not port.trust_source and not self.ports[bound].fabric:
                counts[_I["drop_spoofed_source"]] += 1
                return ()
        elif not port.trust_source and bound != in_no:
            counts[_I["drop_spoofed_source"]] += 1
            return ()
        on_tree = lambda p: 1 <= p <= 64 and bool(tree >> (p - 1) & 1)  # noqa: E731
        if header[:6] == C.ULA_BROADCAST:
            if not broadcast:
                counts[_I["drop_broadcast_disabled"]] += 1
                return ()
            if port.fabric and not on_tree(in_no):
                counts[_I["drop_broadcast_off_tree"]] += 1
                return ()
            if port.stray_switch:
                counts[_I["drop_broadcast_from_unconfigured_switch"]] += 1
                return ()
            # every host port (the sender's too) and the tree's other links
            return tuple(p for p, pt in self.ports.items() if pt.link.up and not pt.stray_switch and (
                not pt.fabric or (on_tree(p) and p != in_no)))
        out = self.table.get(header[:6])
        if out is None:
            counts[_I["drop_unknown_ula"]] += 1
            return ()
        if port.fabric and out == in_no:
            counts[_I["drop_route_back"]] += 1  # two switches disagree for a moment
            return ()
        if not self.ports[out].link.up:
            counts[_I["drop_output_down"]] += 1
            return ()
        return (out,)

    def ingress(self, recs, vc: int, in_port: int, current, pos: int, broadcast: bool, tree_ports: int):
        if not 0 <= vc < C.NUM_VCS:
            raise ValueError("vc out of range")
        port = self.ports[in_port]
        recs = np.frombuffer(recs, MP_DTYPE)  # ValueError unless whole micropackets
        n = len(recs)
        if not 0 <= pos <= n:
            raise ValueError("pos out of range")
        ctrl = recs["ctrl"].astype(_U64)
        types = ctrl_field(ctrl, C.CTRL_TYPE_SHIFT, 4)
        tails = ctrl_field(ctrl, C.CTRL_TAIL_SHIFT, 1).astype(bool)
        starts = np.flatnonzero((types == _U64(MpType.HEADER)) | (types == _U64(MpType.ADMIN)))
        bounds = np.flatnonzero(tails)
        segs, counts, strays = [], [0] * len(COUNTERS), 0
        while pos < n:
            kind = int(types[pos])
            if kind == MpType.ADMIN:
                break
            if kind == MpType.HEADER:
                if current is not None:
                    counts[_I["header_inside_message"]] += 1
                    if current:  # the input broke a Message off: terminate it downstream
                        segs.append((pos, pos, current, True))
                current = self._route(port, in_port, recs[pos]["data"].tobytes(), broadcast, tree_ports, counts)
                counts[_I["rx_messages"]] += 1
            elif current is None:
                counts[_I["drop_stray_data"]] += 1
                strays += 1
                pos += 1
                continue
            i = np.searchsorted(bounds, pos)
            end = int(bounds[i]) + 1 if i < len(bounds) else n
            j = np.searchsorted(starts, pos + 1)
            if j < len(starts) and starts[j] < end:
                end = int(starts[j])  # next HEADER/ADMIN inside: handled next round
            tail = bool(tails[end - 1])
            segs.append((pos, end, current, tail))
            if tail:
                current = None
            pos = end
        return segs, pos, current, tuple(counts), strays
