"""Ethernet frames on a TAP <-> IPoIB payloads, the eIPoIB way (spec 2.10): our MAC
stands for our 20-byte address, a remote port's MAC (REMAC = QPN|0x02000000, LID) for
its address; ARP and ND are rewritten on the way out and in."""

from __future__ import annotations

import ipaddress
from collections import Counter, OrderedDict

from . import addr, arp, nd
from .addr import HwAddr
from .constants import (ARPHRD_INFINIBAND, ETH_P_ARP, ETH_P_IP, ETH_P_IPV6, IPOIB_TX_TYPES, REMAC_CACHE_SIZE)

BROADCAST_MAC = b"\xff" * 6
ETH_HDR = 14


class RemacCache:
    """REMAC <-> 20-byte address, least recently used forgotten first."""

    def __init__(self, size: int = REMAC_CACHE_SIZE) -> None:
        self.size = size
        self.by_mac: OrderedDict[bytes, bytes] = OrderedDict()
        self.by_hw: dict[bytes, bytes] = {}
        self.version = 0  # moves whenever a MAC's address changes or is forgotten (ib.fastpath mirrors them)

    def learn(self, mac: bytes, hw: bytes) -> None:
        old = self.by_mac.pop(mac, None)
        if old is not None:
            self.by_hw.pop(old, None)
        if old != hw:
            self.version += 1
        self.by_mac[mac] = hw
        self.by_hw[hw] = mac
        while len(self.by_mac) > self.size:
            m, h = self.by_mac.popitem(last=False)
            self.by_hw.pop(h, None)
            self.version += 1

    def hw(self, mac: bytes) -> bytes | None:
        h = self.by_mac.get(mac)
        if h is not None:
            self.by_mac.move_to_end(mac)
        return h

    def mac(self, hw: bytes) -> bytes | None:
        return self.by_hw.get(hw)


class Translator:
    """One interface's view: our MAC and 20-byte address, its P_Key, the REMAC cache."""

    def __init__(self, mac: bytes, hw: HwAddr, pkey: int, counters: Counter) -> None:
        self.mac = mac
        self.hw = hw
        self.hw_bytes = hw.pack()
        self.pkey = pkey
        self.remacs = RemacCache()
        self.counters = counters

    # --- out: TAP -> fabric ---------------------------------------------------------------
    def tx(self, frame: bytes) -> tuple[bytes, bytes] | None:
        """(destination: an MGID or a 20-byte address, IPoIB payload) for an Ethernet
        frame from the kernel, or None (dropped and counted)."""
        if len(frame) < ETH_HDR:
            self.counters["tx_drop_runt"] += 1
            return None
        body: bytes | None
        dst, etype, body = frame[:6], int.from_bytes(frame[12:14], "big"), frame[ETH_HDR:]
        if etype not in IPOIB_TX_TYPES:
            self.counters["tx_drop_ethertype"] += 1
            return None
        if etype == ETH_P_ARP:
            body = self._arp_out(body)
        elif etype == ETH_P_IPV6:
            body = nd.rewrite(body, True, self._mac_to_hw)
        if body is None:
            self.counters["tx_drop_untranslatable"] += 1
            return None
        payload = etype.to_bytes(2, "big") + b"\0\0" + body
        if dst == BROADCAST_MAC:
            return addr.broadcast_mgid(self.pkey), payload
        if dst[:3] == b"\x01\x00\x5e":
            if etype != ETH_P_IP or len(body) < 20:
                self.counters["tx_drop_mcast_not_ip"] += 1
                return None
            return addr.mgid_ipv4(ipaddress.IPv4Address(body[16:20]), self.pkey), payload
        if dst[:2] == b"\x33\x33":
            if etype != ETH_P_IPV6 or len(body) < 40:
                self.counters["tx_drop_mcast_not_ip"] += 1
                return None
            return addr.mgid_ipv6(ipaddress.IPv6Address(body[24:40]), self.pkey), payload
        if dst[0] & 1:
            self.counters["tx_drop_mcast_mac"] += 1
            return None
        hw = self.remacs.hw(dst)
        if hw is None:
            self.counters["tx_drop_remac_unknown"] += 1
            return None
        return hw, payload

    def _mac_to_hw(self, mac: bytes) -> bytes | None:
        return self.hw_bytes if mac == self.mac else self.remacs.hw(mac)

    def _arp_out(self, body: bytes) -> bytes | None:
        try:
            a = arp.decode(body, arp.ARPHRD_ETHER)
        except ValueError:
            return None
        tha = bytes(20) if a.tha in (bytes(6), BROADCAST_MAC) else self._mac_to_hw(a.tha)
        if tha is None:
            return None
        sha = self._mac_to_hw(a.sha)
        if sha is None:
            return None
        return arp.Arp(a.op, sha, a.spa, tha, a.tpa).encode()

    # --- in: fabric -> TAP -------------------------------------------------------------------
    def rx(self, payload: bytes, slid: int, sqpn: int, sgid: bytes | None, dgid: bytes | None,
           learned: list[HwAddr]) -> bytes | None:
        """The Ethernet frame for an IPoIB payload from (SLID, source QPN), or None.
        Hardware addresses the packet teaches (ARP/ND senders) are appended to ``learned``."""
        if len(payload) < 4:
            self.counters["rx_drop_runt"] += 1
            return None
        etype, body = int.from_bytes(payload[:2], "big"), payload[4:]
        src = addr.remac(sqpn, slid)
        if sgid is not None:
            self.remacs.learn(src, HwAddr(sqpn, sgid).pack())

        def hw_to_mac(h: bytes) -> bytes | None:
            if h == self.hw_bytes:
                return self.mac
            hw = HwAddr.unpack(h)
            if hw.qpn == sqpn and (sgid is None or hw.gid == sgid):
                self.remacs.learn(src, h)  # the sender's own address: its MAC is the REMAC
                learned.append(hw)
                return src
            return self.remacs.mac(h)

        if etype == ETH_P_ARP:
            try:
                a = arp.decode(body, ARPHRD_INFINIBAND)
                sha = hw_to_mac(a.sha)
                tha = bytes(6) if a.tha == bytes(20) else hw_to_mac(a.tha)
            except ValueError:
                sha = tha = None
            if sha is None or tha is None:
                self.counters["rx_drop_arp"] += 1
                return None
            body = arp.Arp(a.op, sha, a.spa, tha, a.tpa).encode()
        elif etype == ETH_P_IPV6:
            try:
                rewritten = nd.rewrite(body, False, hw_to_mac)
            except ValueError:
                rewritten = None
            if rewritten is None:
                self.counters["rx_drop_nd"] += 1
                return None
            body = rewritten
        if dgid is not None and dgid[0] == 0xFF:
            dst = addr.mcast_mac_for_mgid(dgid)
        else:
            dst = self.mac
        return dst + src + etype.to_bytes(2, "big") + body
