"""The virtio_net_hdr in front of each frame of a TAP opened with IFF_VNET_HDR (gsnd's TAP
while the compiled data plane runs: daemons/io/tap.py; the C path is daemons/_vnet.h,
which this module is the oracle of).

With TUNSETOFFLOAD(TUN_F_CSUM) the kernel may hand over a TCP/UDP frame whose checksum
is left to the device (NEEDS_CSUM: csum_start, csum_offset; the field holds the
pseudo-header's sum).  gsnd completes it before the frame becomes a Message, so the frame
on the cable is the IP packet with its checksum (RFC 2835), whoever the peer is.  Frames
written to the TAP carry DATA_VALID: their ECRC was checked end to end.
Layout (linux/virtio_net.h, little-endian: TUNSETVNETLE): flags u8, gso_type u8,
hdr_len u16, gso_size u16, csum_start u16, csum_offset u16.
"""

from __future__ import annotations

import struct

HDR = struct.Struct("<BBHHHH")
HDR_BYTES = HDR.size  # 10
F_NEEDS_CSUM = 1
F_DATA_VALID = 2
GSO_NONE = 0
DATA_VALID = HDR.pack(F_DATA_VALID, GSO_NONE, 0, 0, 0, 0)


def inet_sum(data: bytes | memoryview) -> int:
    """The 16-bit ones' complement sum of ``data`` as big-endian words (RFC 1071), an odd
    last byte padded with zero."""
    if len(data) % 2:
        data = bytes(data) + b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
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
