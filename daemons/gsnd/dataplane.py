"""gsnd's data plane: IP between the TAP and the cable without Python per frame.

The work is in C (daemons/_pump.h, on the CLink): ``tap_pump`` reads frames from the
TAP and queues them as Messages on VC1; ``rx_pump`` receives the cable's datagrams
(UDP GRO), runs the link, reassembles VC1 and writes IP frames to the TAP;
``dp_send`` sends the link's datagrams (UDP GSO).  This module is the narrow
interface the trio control plane uses: attach, one call per batch, the counters.

What still goes up to Python, as before: Messages on VC0/2/3, non-IP Messages on VC1
(drop notices, ULP traffic), IP Messages a ULP client is bound to, ADMIN, link
up/down, timers.  A cable with a key (an authenticated cable) is sealed and opened in
C too (daemons/_cableauth.h, shared with the transport's Python path).
"""

from __future__ import annotations

from collections import Counter

from ..constants import ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ULP_MAX_PAYLOAD

PUMP_DATAGRAMS = 64  # datagrams per rx_pump call (io/udp.py drains as many per wake-up)
PUMP_FRAMES = 64  # frames per tap_pump call (io/tap.py drains as many)
_WANTS = ((ETHERTYPE_IPV4, 1), (ETHERTYPE_IPV6, 2), (ETHERTYPE_ARP, 4))


def usable(transport) -> bool:
    """The data plane runs over a UDP cable to a known peer, keyed or not (with a TAP
    or without one: then every Message it reassembles goes up to the ULP clients)."""
    return getattr(transport, "sock", None) is not None and transport.peer is not None


class DataPlane:
    def __init__(self, ep, transport, tap, *, mtu: int, arp: bool, wants) -> None:
        """``wants(ethertype) -> bool``: a ULP client is bound to it (Python delivers those)."""
        self.link, self.transport, self.tap = ep.link, transport, tap
        self.wants = wants
        self.link.dp_attach(tap.fd if tap is not None else -1, transport.sock.fileno(), tuple(transport.peer), mtu, arp,
                            b"".join(sorted(ep.aliases)), ULP_MAX_PAYLOAD)
        self.set_ula(ep.ula)
        self.auth = getattr(transport, "auth", None)  # a keyed cable: sealed and opened in C
        if self.auth is not None:
            self.link.dp_auth(self.auth.core)

    def set_ula(self, ula: bytes | None) -> None:
        self.link.dp_ula(ula)

    def rx(self, now: float) -> int:
        """One batch from the cable (LinkRunner's pump); how many datagrams it received."""
        wants = self.wants
        self.link.dp_wants(sum(bit for et, bit in _WANTS if wants(et)))
        return self.link.rx_pump(now, PUMP_DATAGRAMS)

    def tap_batch(self, high_water: int) -> int:
        """Frames from the TAP onto VC1 until it is empty or VC1 holds ``high_water``."""
        return self.link.tap_pump(PUMP_FRAMES, high_water)

    def send_many(self, datagrams: list) -> None:
        """The link's datagrams to the peer (GSO runs) in C; what the kernel refuses
        (EMSGSIZE after a path MTU drop, no GSO, a full socket) goes to the Python path,
        which re-cuts, learns and counts."""
        t = self.transport
        if self.auth is not None:
            datagrams = self.auth.seal_many(datagrams)
        sent, _err, sends, segs, biggest = self.link.dp_send(datagrams, t.gso)
        c = t.counters
        c["tx_datagrams"] += sent
        if sends:
            c["tx_gso_sends"] += sends
            c["tx_gso_datagrams"] += segs
        if biggest > t.max_sent:
            t.max_sent = biggest
        if sent < len(datagrams):
            t.send_sealed(datagrams[sent:])

    def counters(self, group: str, python: Counter | dict) -> dict:
        """``python`` (the Python path's counters of ``group``) plus the data plane's."""
        out = Counter(python)
        out.update(self.link.dp_counters().get(group, {}))
        if group == "cable" and self.auth is not None:
            out.update(self.auth.core.dp_counts())
        return dict(out)
