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

from ..runtime.oserrors import errno_name
from ..wire import vnet as vnet_hdr

TUNSETIFF = 0x400454CA
TUNSETCARRIER = 0x400454E2
TUNSETPERSIST = 0x400454CB
IFF_TUN = 0x0001
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
IFF_VNET_HDR = 0x4000
TUNSETOFFLOAD = 0x400454D0
TUNSETVNETHDRSZ = 0x400454D8
TUNSETVNETLE = 0x400454DC
TUN_F_CSUM = 0x01
READ_BYTES = 65536 + 64
TUN_DEVICE = "/dev/net/tun"
CAP_NET_ADMIN = 12  # bit in /proc/self/status CapEff


def set_vnet_le(fd: int) -> bool:
    """Make the virtio_net_hdr little-endian (TUNSETVNETLE), as wire/vnet.py and
    daemons/_vnet.h write and read it on every host; a big-endian host's default is its
    own order.  False when the kernel has no such ioctl (EINVAL, ENOTTY: before 4.2, or
    not a TUN/TAP descriptor): its header is then the host's order, little-endian on x86."""
    try:
        fcntl.ioctl(fd, TUNSETVNETLE, struct.pack("i", 1))
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTTY):
            raise
        return False
    return True


def _has_cap_net_admin() -> bool:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> CAP_NET_ADMIN & 1)
    except (OSError, ValueError):
        pass
    return False


def _who() -> str:
    return f"uid {os.geteuid()} gid {os.getegid()}" + (f" groups {','.join(map(str, os.getgroups()))}"
                                                      if os.getgroups() else "")


def explain_open(exc: OSError, device: str) -> OSError:
    """Why ``device`` (/dev/net/tun) could not be opened, as one line naming the real cause."""
    if exc.errno == errno.ENOENT:
        return FileNotFoundError(f"{device}: no such device (load the tun module: modprobe tun)")
    if exc.errno == errno.EACCES:
        try:
            st = os.stat(device)
            mode = f"mode {st.st_mode & 0o7777:04o} owner {st.st_uid}:{st.st_gid}"
        except OSError:
            mode = "mode unknown"
        return PermissionError(f"{device}: {mode} does not let {_who()} read and write it; CAP_NET_ADMIN does not "
                               f"override file permissions: make it 0666 (the kernel's default) or give this user's "
                               f"group rw")
    if exc.errno == errno.EPERM:
        return PermissionError(f"{device}: the device cgroup refuses it (systemd: DeviceAllow={device} rw)")
    return exc


def explain_tunsetiff(exc: OSError, name: str) -> OSError:
    """Why TUNSETIFF failed: the capability is missing, or the TAP is someone else's."""
    if exc.errno != errno.EPERM:
        return exc
    if not _has_cap_net_admin():
        return PermissionError(f"TAP {name}: creating or attaching it needs CAP_NET_ADMIN, which this process "
                               f"({_who()}) lacks: run as root or with AmbientCapabilities=CAP_NET_ADMIN")
    return PermissionError(f"TAP {name}: it exists and belongs to another user or group than {_who()}: "
                           f"recreate it with ip tuntap add {name} mode tap user <gsnd's user>, or delete it")


class Tap:
    def __init__(self, name: str, persist: bool = True, device: str = TUN_DEVICE, *, tun: bool = False,
                 vnet: bool = False) -> None:
        """``tun``: a TUN device instead (IP packets, no link layer), e.g. PacketWay's pw0.
        ``vnet``: each frame behind a virtio_net_hdr, checksums left to gsnd (TUN_F_CSUM:
        wire/vnet.py, daemons/_vnet.h); what the compiled data plane reads and writes."""
        self.name, self.vnet = name, vnet
        try:
            self.fd = os.open(device, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise explain_open(exc, device) from None
        try:
            fcntl.ioctl(self.fd, TUNSETIFF, struct.pack("16sH", name.encode(), (IFF_TUN if tun else IFF_TAP) | IFF_NO_PI
                                                        | (IFF_VNET_HDR if vnet else 0)))
        except OSError as exc:
            os.close(self.fd)
            raise explain_tunsetiff(exc, name) from None
        if vnet:
            fcntl.ioctl(self.fd, TUNSETVNETHDRSZ, struct.pack("i", vnet_hdr.HDR_BYTES))
            vnet_le = set_vnet_le(self.fd)
        # also without vnet: a persistent TAP keeps the offloads an earlier attach set
        fcntl.ioctl(self.fd, TUNSETOFFLOAD, TUN_F_CSUM if vnet else 0)
        if persist:  # the interface and its addresses outlive a crash, like a NIC's
            fcntl.ioctl(self.fd, TUNSETPERSIST, 1)
        self.counters: Counter[str] = Counter()
        if vnet and not vnet_le:
            self.counters["vnet_le_unsupported"] = 1
        with IPRoute() as ipr:
            self.index = ipr.link_lookup(ifname=name)[0]

    def configure(self, *, mac: bytes | None = None, mtu: int | None = None) -> None:
        kw: dict[str, str | int] = {}
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
            self.counters[f"carrier_ioctl_{errno_name(exc)}"] += 1

    async def wait_readable(self) -> None:
        await trio.lowlevel.wait_readable(self.fd)

    def drain(self, limit: int = 64) -> list[bytes]:
        """Frames (without the virtio_net_hdr, checksums completed); a frame that cannot be
        taken is counted (``tap`` counters, or returned as an empty runt frame)."""
        out = []
        read = os.read
        for _ in range(limit):
            try:
                buf = read(self.fd, READ_BYTES + (vnet_hdr.HDR_BYTES if self.vnet else 0))
            except BlockingIOError:
                break
            except OSError as exc:  # EIO while the interface is down
                self.counters[f"read_{errno_name(exc)}"] += 1
                break
            if not self.vnet:
                out.append(buf)
            elif isinstance(frame := vnet_hdr.take(buf), bytes):
                out.append(frame)
            elif frame == "tx_drop_runt_frame":
                out.append(b"")  # counted as a runt by whoever turns it into a Message
            else:
                self.counters[frame] += 1
        return out

    def write(self, frame: bytes) -> None:
        try:
            os.write(self.fd, vnet_hdr.to_tap(frame) if self.vnet else frame)
        except BlockingIOError:
            self.counters["tx_dropped_tap_full"] += 1
        except OSError as exc:
            self.counters[f"tx_error_{errno_name(exc)}"] += 1

    def close(self) -> None:
        os.close(self.fd)
