/* The TAP with a virtio_net_hdr in front of every frame (IFF_VNET_HDR, offload TUN_F_CSUM;
 * daemons/io/tap.py opens it so when the compiled data plane runs; the Python oracle is
 * daemons/wire/vnet.py).
 *
 * Read: the kernel leaves a TCP/UDP checksum for the device (NEEDS_CSUM, CHECKSUM_PARTIAL):
 * gsnd completes it in one pass over the frame just read, still in the cache, before the
 * frame is encoded, so the frame on the cable is exactly the IP packet with its checksum
 * (RFC 2835: the peer need not be a gsnd).  The kernel then skips its own pass (and the
 * software segmentation's checksum) on the sending host.
 * Write: a TCP/UDP segment goes to the kernel as CHECKSUM_PARTIAL (vnet_to_tap), so the
 * receiving host's kernel does not verify the checksum again: the Message's ECRC was
 * checked end to end over the segment.
 * Included by _pump.h.
 */
#ifndef GSN_VNET_H
#define GSN_VNET_H

#define VNET_HDR 10              /* struct virtio_net_hdr (TUNSETVNETHDRSZ: tap.py VNET_HDR_BYTES) */
#define VNET_F_NEEDS_CSUM 1
#define VNET_GSO_NONE 0

_Static_assert(TX_HEADROOM == VNET_HDR, "a TAP frame is read at TX_HEADROOM: its virtio_net_hdr fills the headroom");

/* The ones' complement sum of p[0:n] (RFC 1071), in the machine's byte order (the sum's
 * bytes land in memory in network order when stored the same way: RFC 1071 §2(B)).
 * Compiled three times (the loop vectorised for SSE2, AVX2, AVX-512), chosen by the CPU:
 * 2.7, 1.3, 0.9 us per 64 KiB frame. */
__attribute__((always_inline)) static inline uint16_t vnet_sum_body(const uint8_t *p, size_t n)
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

static uint16_t vnet_sum_sse2(const uint8_t *p, size_t n) { return vnet_sum_body(p, n); }
__attribute__((target("avx2"))) static uint16_t vnet_sum_avx2(const uint8_t *p, size_t n)
{
    return vnet_sum_body(p, n);
}
__attribute__((target("avx512f,avx512bw"))) static uint16_t vnet_sum_avx512(const uint8_t *p, size_t n)
{
    return vnet_sum_body(p, n);
}

static uint16_t vnet_sum(const uint8_t *p, size_t n)
{
    static uint16_t (*sum)(const uint8_t *, size_t);
    if (!sum) {
        __builtin_cpu_init();
        sum = __builtin_cpu_supports("avx512bw") ? vnet_sum_avx512
              : __builtin_cpu_supports("avx2")   ? vnet_sum_avx2
                                                 : vnet_sum_sse2;
    }
    return sum(p, n);
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
    /* csum_start and csum_offset: little-endian on every host (io/tap.py sets TUNSETVNETLE
       where the kernel has it, so a big-endian host's TAP speaks little-endian too; without
       it the TAP uses the host's order, which is little-endian on x86) */
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

static inline unsigned vnet_be16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }

/* The header at h for the frame f[0:flen] written to the TAP.  tun ignores DATA_VALID;
 * what makes the kernel skip its verify is CHECKSUM_PARTIAL (NEEDS_CSUM): a TCP or UDP
 * checksum over IPv4 (not a fragment) or IPv6 (no extension header) is left to the
 * "device" as the kernel's own sockets leave it: the field holds the pseudo-header's sum
 * (folded, not complemented) and the kernel computes the rest only if the packet leaves
 * the host again.  The Message's ECRC was checked end to end over the segment, so a
 * segment the sending host checksummed is the one that arrives.  Anything else: no flags
 * (the kernel verifies as before). */
static void vnet_to_tap(uint8_t *h, uint8_t *f, size_t flen)
{
    memset(h, 0, VNET_HDR);
    const uint8_t *ip = f + 14;
    const size_t iplen = flen - 14;
    size_t l4, l4len;
    unsigned proto;
    uint32_t sum = 0;
    if (flen >= 14 + 20 && vnet_be16(f + 12) == ETH_IPV4 && ip[0] >> 4 == 4) {
        const size_t ihl = (size_t)(ip[0] & 15) * 4, total = vnet_be16(ip + 2);
        if (ihl < 20 || total > iplen || total < ihl || vnet_be16(ip + 6) & 0x3FFF) /* MF or an offset: a fragment */
            return;
        proto = ip[9], l4 = ihl, l4len = total - ihl;
        for (int i = 12; i < 20; i += 2)
            sum += vnet_be16(ip + i);
    } else if (flen >= 14 + 40 && vnet_be16(f + 12) == ETH_IPV6 && ip[0] >> 4 == 6) {
        l4len = vnet_be16(ip + 4);
        if (40 + l4len > iplen)
            return;
        proto = ip[6], l4 = 40;
        for (int i = 8; i < 40; i += 2)
            sum += vnet_be16(ip + i);
    } else {
        return;
    }
    const size_t off = proto == 6 ? 16 : proto == 17 ? 6 : 0;
    if (!off || l4len < off + 2 + (proto == 6 ? 2 : 0))
        return;
    uint8_t *c = f + 14 + l4 + off;
    if (proto == 17 && !(c[0] | c[1])) /* UDP over IPv4 without a checksum: nothing to leave */
        return;
    sum += proto + (uint32_t)l4len;
    sum = (sum & 0xFFFF) + (sum >> 16);
    sum = (sum & 0xFFFF) + (sum >> 16);
    c[0] = (uint8_t)(sum >> 8), c[1] = (uint8_t)sum;
    const size_t start = 14 + l4;
    h[0] = VNET_F_NEEDS_CSUM;
    h[6] = (uint8_t)start, h[7] = (uint8_t)(start >> 8), h[8] = (uint8_t)off;
}

#endif
