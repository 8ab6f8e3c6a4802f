/* The link's transmit side, the parts that cost per micropacket or per frame (README
 * "Data plane").  Included by _link.c before the VC queues.
 *
 *  tx_stamp:  the link fields (RSEQ, TSEQ, and VCR/CR on the first ng micropackets) of a
 *             run just copied into a datagram, stamped while it is still in the cache,
 *             LCRC fixed by linearity from the three bytes that change (a corrupt
 *             micropacket stays detectably corrupt).
 *  tx_pool:   the blocks a TAP frame's micropackets are encoded into, kept for the next
 *             frames instead of going back to malloc (a 64 KiB frame's 82 KB block was
 *             mapped and unmapped per frame: page faults and zeroing in the kernel).
 */
#ifndef GSN_TXFAST_H
#define GSN_TXFAST_H

#define TX_POOL_MPS ((RA_PREFIX + DP_FRAME_BYTES + MP_DATA - 1) / MP_DATA) /* the largest TAP frame */
#define TX_POOL_MIN 64 /* smaller frames: PyMem's small-object allocator is fast already */
#define TX_POOL_MAX 32 /* blocks kept (2.6 MB) */

static uint8_t *tx_pool[TX_POOL_MAX];
static int tx_pool_len;

/* A block for n (<= TX_POOL_MPS) micropackets; *pooled says which kind (for tx_free). */
static uint8_t *tx_alloc(Py_ssize_t n, int *pooled)
{
    *pooled = n >= TX_POOL_MIN;
    if (!*pooled)
        return PyMem_Malloc(n * MP_BYTES);
    return tx_pool_len ? tx_pool[--tx_pool_len] : PyMem_Malloc(TX_POOL_MPS * MP_BYTES);
}

static void tx_free(uint8_t *b, int pooled)
{
    if (pooled && tx_pool_len < TX_POOL_MAX)
        tx_pool[tx_pool_len++] = b;
    else
        PyMem_Free(b);
}

/* Micropackets mp[0:k], the datagram's i0.. (TSEQ seq + i), RSEQ bits r; the first ng
 * of the datagram carry grants[2i] (VCR), grants[2i+1] (CR). */
static inline void tx_stamp(uint8_t *mp, int64_t i0, int64_t k, uint64_t r, uint64_t seq, const uint8_t *grants,
                            int64_t ng)
{
    for (int64_t i = i0; i < i0 + k; i++, mp += MP_BYTES) {
        const uint64_t old = load_be64(mp + MP_DATA);
        uint64_t neu = (old & ~LINK_BITS) | r | ((uint64_t)((seq + (uint64_t)i) & 0xFF) << 32);
        if (i < ng)
            neu |= ((uint64_t)grants[2 * i] << 54) | ((uint64_t)grants[2 * i + 1] << 48);
        const uint64_t d = old ^ neu; /* only VCR/CR, RSEQ, TSEQ: control bytes 1, 2, 3 */
        const uint16_t lcrc = (uint16_t)old ^ T[4][(d >> 48) & 0xFF] ^ T[3][(d >> 40) & 0xFF] ^ T[2][(d >> 32) & 0xFF];
        store_be64(mp + MP_DATA, (neu & ~0xFFFFull) | lcrc);
    }
}

#endif
