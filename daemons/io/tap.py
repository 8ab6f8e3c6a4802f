"""TAP device: create or attach (TUNSETIFF), MAC/MTU via pyroute2, carrier via TUNSETCARRIER.

Attaching to a pre-created persistent TAP (``ip tuntap add gsn0 mode tap user gsn``)
lets gsnd run as a service user holding only CAP_NET_ADMIN.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from collections import Counter

import trio
from pyroute2 import IPRoute

TUNSETIFF = 0x400454CA
TUNSETCARRIER = 0x400454E2
TUNSETPERSIST = 0x400454CB
IFF_TUN = 0x0001
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
READ_BYTES = 65536 + 64


class Tap:
    def __init__(self, name: str, persist: bool = True, *, tun: bool = False) -> None:
        """``tun``: a TUN device instead (IP packets, no link layer), e.g. PacketWay's pw0."""
        self.name = name
        self.fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            fcntl.ioctl(self.fd, TUNSETIFF, struct.pack("16sH", name.encode(), (IFF_TUN if tun else IFF_TAP) | IFF_NO_PI))
        except OSError:
            os.close(self.fd)
            raise
        if persist:  # the interface and its addresses outlive a crash, like a NIC's
            fcntl.ioctl(self.fd, TUNSETPERSIST, 1)
        self.counters: Counter[str] = Counter()
        with IPRoute() as ipr:
            self.index = ipr.link_lookup(ifname=name)[0]

    def configure(self, *, mac: bytes | None = None, mtu: int | None = None) -> None:
        kw = {}
        if mac is not None:
            kw["address"] = ":".join(f"{b:02x}" for b in mac)
        if mtu is not None:
            kw["mtu"] = mtu
        if kw:
            with IPRoute() as ipr:
                ipr.link("set", index=self.index, **kw)

    def set_carrier(self, up: bool) -> None:
        try:
            fcntl.ioctl(self.fd, TUNSETCARRIER, struct.pack("i", int(up)))
        except OSError as exc:  # kernels before 4.18 lack TUNSETCARRIER
            self.counters[f"carrier_ioctl_{errno.errorcode.get(exc.errno, exc.errno)}"] += 1

    async def wait_readable(self) -> None:
        await trio.lowlevel.wait_readable(self.fd)

    def drain(self, limit: int = 64) -> list[bytes]:
        out = []
        read = os.read
        for _ in range(limit):
            try:
                out.append(read(self.fd, READ_BYTES))
            except BlockingIOError:
                break
            except OSError as exc:  # EIO while the interface is down
                self.counters[f"read_{errno.errorcode.get(exc.errno, exc.errno)}"] += 1
                break
        return out

    def write(self, frame: bytes) -> None:
        try:
            os.write(self.fd, frame)
        except BlockingIOError:
            self.counters["tx_dropped_tap_full"] += 1
        except OSError as exc:
            self.counters[f"tx_error_{errno.errorcode.get(exc.errno, exc.errno)}"] += 1

    def close(self) -> None:
        os.close(self.fd)
