/* The TAP with a virtio_net_hdr in front of every frame (IFF_VNET_HDR, offload TUN_F_CSUM;
 * daemons/io/tap.py opens it so when the compiled data plane runs; the Python oracle is
 * daemons/wire/vnet.py).
 *
 * Read: the kernel leaves a TCP/UDP checksum for the device (NEEDS_CSUM, CHECKSUM_PARTIAL):
 * gsnd completes it in one pass over the frame just read, still in the cache, before the
 * frame is encoded, so the frame on the cable is exactly the IP packet with its checksum
 * (RFC 2835: the peer need not be a gsnd).  The kernel then skips its own pass (and the
 * software segmentation's checksum) on the sending host.
 * Write: DATA_VALID, so the receiving host's kernel does not verify the checksum again:
 * the Message's ECRC was checked end to end over the payload, checksum field included.
 * Included by _pump.h.
 */
#ifndef GSN_VNET_H
#define GSN_VNET_H

#define VNET_HDR 10              /* struct virtio_net_hdr (TUNSETVNETHDRSZ: tap.py VNET_HDR_BYTES) */
#define VNET_F_NEEDS_CSUM 1
#define VNET_F_DATA_VALID 2
#define VNET_GSO_NONE 0

_Static_assert(TX_HEADROOM == VNET_HDR, "a TAP frame is read at TX_HEADROOM: its virtio_net_hdr fills the headroom");

/* The ones' complement sum of p[0:n] (RFC 1071), in the machine's byte order (the sum's
 * bytes land in memory in network order when stored the same way: RFC 1071 §2(B)). */
static uint16_t vnet_sum(const uint8_t *p, size_t n)
{
    uint64_t a = 0, b = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) { /* 32-bit words into 64-bit sums: no carry lost below 2^32 words */
        uint32_t x, y;
        memcpy(&x, p + i, 4);
        memcpy(&y, p + i + 4, 4);
        a += x, b += y;
    }
    a += b;
    if (i + 4 <= n) {
        uint32_t x;
        memcpy(&x, p + i, 4);
        a += x, i += 4;
    }
    if (i + 2 <= n) {
        uint16_t x;
        memcpy(&x, p + i, 2);
        a += x, i += 2;
    }
    if (i < n) { /* an odd last byte: the high byte of a word padded with zero */
        uint16_t x = 0;
        memcpy(&x, p + i, 1);
        a += x;
    }
    a = (a & 0xFFFFFFFFu) + (a >> 32);
    a = (a & 0xFFFFFFFFu) + (a >> 32);
    a = (a & 0xFFFF) + (a >> 16);
    a = (a & 0xFFFF) + (a >> 16);
    a = (a & 0xFFFF) + (a >> 16);
    return (uint16_t)a;
}

/* The header at buf[0:VNET_HDR], the frame after it (len bytes with the header): the
 * frame's length with its checksum completed, or -1 with the drop counted. */
static Py_ssize_t vnet_take(DataPlane *dp, uint8_t *buf, Py_ssize_t len)
{
    if (len < VNET_HDR) {
        dp->counters[DP_IP_RUNT]++;
        return -1;
    }
    uint8_t *f = buf + VNET_HDR;
    const Py_ssize_t flen = len - VNET_HDR;
    if (buf[1] != VNET_GSO_NONE) { /* gsnd offers no TSO/USO: the kernel never sends these */
        dp->counters[DP_TAP_GSO]++;
        return -1;
    }
    if (!(buf[0] & VNET_F_NEEDS_CSUM))
        return flen;
    /* csum_start and csum_offset: little-endian (virtio 1.0 on x86, the TAP's default) */
    const Py_ssize_t start = buf[6] | (buf[7] << 8), at = start + (buf[8] | (buf[9] << 8));
    if (at + 2 > flen) {
        dp->counters[DP_TAP_BAD_CSUM]++;
        return -1;
    }
    uint16_t c = (uint16_t)~vnet_sum(f + start, (size_t)(flen - start)); /* the field holds the pseudo-header's */
    if (!c)
        c = 0xFFFF; /* as the kernel does: 0 is "no checksum" to UDP */
    memcpy(f + at, &c, 2);
    return flen;
}

/* buf[0:VNET_HDR]: the header of a frame whose checksum is known good. */
static inline void vnet_valid(uint8_t *buf)
{
    memset(buf, 0, VNET_HDR);
    buf[0] = VNET_F_DATA_VALID;
}

#endif
