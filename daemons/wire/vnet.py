"""The virtio_net_hdr in front of each frame of a TAP opened with IFF_VNET_HDR (gsnd's TAP
while the compiled data plane runs: daemons/io/tap.py; the C path is daemons/_vnet.h,
which this module is the oracle of).

With TUNSETOFFLOAD(TUN_F_CSUM) the kernel may hand over a TCP/UDP frame whose checksum
is left to the device (NEEDS_CSUM: csum_start, csum_offset; the field holds the
pseudo-header's sum).  gsnd completes it before the frame becomes a Message, so the frame
on the cable is the IP packet with its checksum (RFC 2835), whoever the peer is.  A TCP
or UDP segment written to the TAP goes back to CHECKSUM_PARTIAL (``to_tap``: the field
holds the pseudo-header's sum again, as the sending kernel left it), so the receiving
kernel does not verify it (tun ignores DATA_VALID); its ECRC was checked end to end.
Layout (linux/virtio_net.h, little-endian: TUNSETVNETLE): flags u8, gso_type u8,
hdr_len u16, gso_size u16, csum_start u16, csum_offset u16.
"""

from __future__ import annotations

import struct

HDR = struct.Struct("<BBHHHH")
HDR_BYTES = HDR.size  # 10
F_NEEDS_CSUM = 1
GSO_NONE = 0
PLAIN = bytes(HDR_BYTES)  # no flags: the kernel verifies the frame's checksums itself
TCP, UDP = 6, 17
L4_CSUM_OFFSET = {TCP: 16, UDP: 6}


def inet_sum(data: bytes | memoryview) -> int:
    """The 16-bit ones' complement sum of ``data`` as big-endian words (RFC 1071), an odd
    last byte padded with zero."""
    if len(data) % 2:
        data = bytes(data) + b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def take(buf: bytes) -> bytes | str:
    """The frame behind a TAP read's header, its checksum completed, or why it is dropped
    (a ``tap`` counter: read_drop_gso, read_drop_bad_csum_offsets; a read too short for
    the header is a runt frame, ``tx_drop_runt_frame``, as in C)."""
    if len(buf) < HDR_BYTES:
        return "tx_drop_runt_frame"
    flags, gso, _hdr_len, _gso_size, start, offset = HDR.unpack_from(buf)
    frame = buf[HDR_BYTES:]
    if gso != GSO_NONE:
        return "read_drop_gso"
    if not flags & F_NEEDS_CSUM:
        return frame
    at = start + offset
    if at + 2 > len(frame):
        return "read_drop_bad_csum_offsets"
    c = ~inet_sum(frame[start:]) & 0xFFFF or 0xFFFF  # 0 means "no checksum" to UDP
    return frame[:at] + c.to_bytes(2, "big") + frame[at + 2:]


def to_tap(frame: bytes) -> bytes:
    """Header and frame for a TAP write: a TCP or UDP checksum over IPv4 (not a fragment)
    or IPv6 (no extension header) left partial, anything else as it is (PLAIN)."""
    ip = frame[14:]
    (ethertype,) = struct.unpack_from("!H", frame, 12) if len(frame) >= 14 else (0,)
    if ethertype == 0x0800 and len(ip) >= 20 and ip[0] >> 4 == 4:
        ihl, (total, frag) = (ip[0] & 15) * 4, struct.unpack_from("!H2xH", ip, 2)
        if ihl < 20 or not ihl <= total <= len(ip) or frag & 0x3FFF:
            return PLAIN + frame
        proto, l4, l4len, addrs = ip[9], ihl, total - ihl, ip[12:20]
    elif ethertype == 0x86DD and len(ip) >= 40 and ip[0] >> 4 == 6:
        (l4len,) = struct.unpack_from("!H", ip, 4)
        if 40 + l4len > len(ip):
            return PLAIN + frame
        proto, l4, addrs = ip[6], 40, ip[8:40]
    else:
        return PLAIN + frame
    off = L4_CSUM_OFFSET.get(proto)
    if off is None or l4len < off + 2 + (2 if proto == TCP else 0):
        return PLAIN + frame
    at = 14 + l4 + off
    if proto == UDP and frame[at:at + 2] == b"\0\0":  # UDP over IPv4 without a checksum
        return PLAIN + frame
    seed = inet_sum(addrs + struct.pack("!HH", proto, l4len))
    return HDR.pack(F_NEEDS_CSUM, GSO_NONE, 0, 0, 14 + l4, off) + frame[:at] + seed.to_bytes(2, "big") + frame[at + 2:]
