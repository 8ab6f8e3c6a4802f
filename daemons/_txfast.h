/* The link's transmit side, the parts that cost per micropacket or per frame (README
 * "Data plane").  Included by _link.c after the VC queue types.
 *
 *  A large TAP frame is queued as it was read ("raw" chunk: the Message's stream, MAC
 *  header first, built in place in front of the IP packet), not as micropackets: the
 *  datagram that takes its micropackets has them encoded straight into it (copy, block
 *  CRCs, ECRC, link fields and LCRC in one pass per 64), so a frame's payload is copied
 *  once in user space instead of twice (encode, then the take into the datagram).
 *  Other chunks (micropackets from Python, small frames, ULP Messages, the switch's
 *  forwarded segments) are copied with their link fields stamped in the same pass
 *  (tx_copy_stamp: LCRC fixed by linearity from the three bytes that change, so a
 *  corrupt micropacket stays corrupt).
 *  The raw chunks' buffers come from a pool, not from malloc per frame (an 82 KB block
 *  per 64 KiB frame was mapped and unmapped: page faults and zeroing in the kernel).
 */
#ifndef GSN_TXFAST_H
#define GSN_TXFAST_H

#define TX_HEADROOM 10 /* the TAP frame is read here: its Ethernet header ends where the stream's head does */
#define TX_BUF_BYTES (TX_HEADROOM + DP_FRAME_BYTES + MP_DATA)
#define TX_RAW_MIN 64  /* micropackets: smaller frames are encoded at once (no pool buffer held) */
#define TX_POOL_MAX 32 /* buffers kept (2.1 MB) */

static uint8_t *tx_pool[TX_POOL_MAX];
static int tx_pool_len;

static uint8_t *tx_buf_get(void)
{
    return tx_pool_len ? tx_pool[--tx_pool_len] : PyMem_Malloc(TX_BUF_BYTES);
}

static void tx_buf_put(uint8_t *b)
{
    if (b && tx_pool_len < TX_POOL_MAX)
        tx_pool[tx_pool_len++] = b;
    else
        PyMem_Free(b);
}

/* Buffers for ULP SENDs larger than a pool buffer (_ulpraw.h: a client whose last frame
 * spilled reads its next ones into one of these, whole, so that a large Message is
 * queued raw too).  Each is a frame's room at the socket's payload limit (4 MiB + a
 * little), of which only what frames used is ever touched; its size is kept in front of
 * it, so one of another dp's size is not reused.  A few are kept (malloc'ing and freeing
 * them per Message was page faults, brk and zeroing: ~20% of a gsnd sending 256 KiB ST
 * Messages). */
#define TX_BIG_MAX 4
#define TX_BIG_PREFIX 16

static uint8_t *tx_big[TX_BIG_MAX];
static int tx_nbig;

static size_t tx_big_size(const uint8_t *b)
{
    size_t len;
    memcpy(&len, b - TX_BIG_PREFIX, sizeof len);
    return len;
}

static uint8_t *tx_big_get(size_t len)
{
    while (tx_nbig) {
        uint8_t *b = tx_big[--tx_nbig];
        if (tx_big_size(b) == len)
            return b;
        PyMem_Free(b - TX_BIG_PREFIX);
    }
    uint8_t *p = PyMem_Malloc(len + TX_BIG_PREFIX);
    if (!p)
        return NULL;
    memcpy(p, &len, sizeof len);
    return p + TX_BIG_PREFIX;
}

static void tx_big_put(uint8_t *b)
{
    if (!b)
        return;
    if (tx_nbig < TX_BIG_MAX)
        tx_big[tx_nbig++] = b;
    else
        PyMem_Free(b - TX_BIG_PREFIX);
}

/* Datagrams the peer has acknowledged, kept for the next ones instead of going back to
 * malloc (with a 1500-byte underlay a 64 KiB frame is 57 datagrams, and malloc/free of
 * each was 5-6% of the sender).  Only full datagrams (max_mps micropackets, the most
 * of them) up to a 9000-byte underlay's are kept, at most TX_SPARE_BUDGET bytes of them,
 * and only one nothing else holds (the ring's was the last reference), its cached hash
 * reset when it is used again. */
#define TX_SPARE_MAX 1536
#define TX_SPARE_BYTES 9100
#define TX_SPARE_BUDGET (2 << 20)

static PyObject *tx_spare[TX_SPARE_MAX];
static int tx_nspare;

static PyObject *tx_dgram_new(Py_ssize_t len)
{
    if (tx_nspare && PyBytes_GET_SIZE(tx_spare[tx_nspare - 1]) == len) {
        PyObject *b = tx_spare[--tx_nspare];
        _Py_COMP_DIAG_PUSH
        _Py_COMP_DIAG_IGNORE_DEPR_DECLS
        ((PyBytesObject *)b)->ob_shash = -1;
        _Py_COMP_DIAG_POP
        return b;
    }
    return PyBytes_FromStringAndSize(NULL, len);
}

/* b leaves the ring; full: the size of a datagram of max_mps micropackets now. */
static void tx_dgram_done(PyObject *b, Py_ssize_t full)
{
    if (Py_REFCNT(b) != 1 || !PyBytes_CheckExact(b) || PyBytes_GET_SIZE(b) != full || full > TX_SPARE_BYTES) {
        Py_DECREF(b);
        return;
    }
    if (tx_nspare && PyBytes_GET_SIZE(tx_spare[0]) != full) /* max_mps changed: the old size is no use */
        while (tx_nspare)
            Py_DECREF(tx_spare[--tx_nspare]);
    if (tx_nspare < TX_SPARE_MAX && (tx_nspare + 1) * full <= TX_SPARE_BUDGET)
        tx_spare[tx_nspare++] = b;
    else
        Py_DECREF(b);
}

/* The link fields of the datagram's micropacket i: TSEQ seq + i, RSEQ bits r; the first
 * ng carry grants[2i] (VCR), grants[2i+1] (CR). */
static inline uint64_t tx_link(int64_t i, uint64_t r, uint64_t seq, const uint8_t *grants, int64_t ng)
{
    uint64_t l = r | ((uint64_t)((seq + (uint64_t)i) & 0xFF) << 32);
    if (i < ng)
        l |= ((uint64_t)grants[2 * i] << 54) | ((uint64_t)grants[2 * i + 1] << 48);
    return l;
}

/* Micropackets mp[0:k], the datagram's at..: their link fields, LCRC by linearity. */
static inline void tx_stamp(uint8_t *mp, int64_t at, int64_t k, uint64_t r, uint64_t seq, const uint8_t *grants,
                            int64_t ng)
{
    for (int64_t i = at; i < at + k; i++, mp += MP_BYTES) {
        const uint64_t old = load_be64(mp + MP_DATA), neu = (old & ~LINK_BITS) | tx_link(i, r, seq, grants, ng);
        const uint64_t d = old ^ neu; /* only VCR/CR, RSEQ, TSEQ: control bytes 1, 2, 3 */
        const uint16_t lcrc = (uint16_t)old ^ T[4][(d >> 48) & 0xFF] ^ T[3][(d >> 40) & 0xFF] ^ T[2][(d >> 32) & 0xFF];
        store_be64(mp + MP_DATA, (neu & ~0xFFFFull) | lcrc);
    }
}

/* Micropackets src[0:k] copied to mp[0:k], the datagram's at.., their link fields
 * stamped on the way (as memcpy then tx_stamp, byte for byte): each control word is read
 * from the source, not from the copy just written (that load waited for the copy's
 * stores: about a quarter of build_batch in gsn-switch, perf), and there is no separate
 * memcpy pass. */
static inline void tx_copy_stamp(uint8_t *mp, const uint8_t *src, int64_t at, int64_t k, uint64_t r, uint64_t seq,
                                 const uint8_t *grants, int64_t ng)
{
    for (int64_t i = at; i < at + k; i++, mp += MP_BYTES, src += MP_BYTES) {
        const uint64_t old = load_be64(src + MP_DATA), neu = (old & ~LINK_BITS) | tx_link(i, r, seq, grants, ng);
        const uint64_t d = old ^ neu; /* only VCR/CR, RSEQ, TSEQ: control bytes 1, 2, 3 */
        const uint16_t lcrc = (uint16_t)old ^ T[4][(d >> 48) & 0xFF] ^ T[3][(d >> 40) & 0xFF] ^ T[2][(d >> 32) & 0xFF];
        memcpy(mp, src, MP_DATA);
        store_be64(mp + MP_DATA, (neu & ~0xFFFFull) | lcrc);
    }
}

/* Micropackets i0..i0+k-1 of a raw chunk's Message (vc, HEADER first) encoded at dst as
 * the datagram's at..; the running ECRC is kept in the chunk between takes. */
static void tx_encode(Chunk *ch, int vc, Py_ssize_t i0, Py_ssize_t k, uint8_t *dst, int64_t at, uint64_t r,
                      uint64_t seq, const uint8_t *grants, int64_t ng)
{
    const uint8_t *stream = ch->view.buf;
    const Py_ssize_t slen = ch->view.len, n = ch->n;
    uint16_t bs[ENC_CHUNK], es[ENC_CHUNK];
    /* a DATA micropacket without grants: the control word's CRC is its fixed bytes' (VC,
       TYPE, RSEQ: once) plus TSEQ's and ECRC's, by linearity; the others in full */
    const uint64_t data_ctrl = ((uint64_t)vc << 62) | ((uint64_t)T_DATA << 58) | r;
    const uint16_t data_cc = ctrl6_crc0(data_ctrl);
    for (Py_ssize_t c0 = 0; c0 < k; c0 += ENC_CHUNK) {
        const Py_ssize_t cn = k - c0 < ENC_CHUNK ? k - c0 : ENC_CHUNK;
        uint8_t *m = dst + c0 * MP_BYTES;
        const Py_ssize_t off = (i0 + c0) * MP_DATA;
        Py_ssize_t full = (slen - off) / MP_DATA; /* whole blocks left in the stream */
        if (full > cn)
            full = cn;
        block_crcs_copy(stream + off, m, MP_BYTES, full, bs); /* copied and CRCed in one pass */
        if (full < cn) { /* the last: zero-filled */
            uint8_t *last = m + full * MP_BYTES;
            memset(last, 0, MP_DATA);
            memcpy(last, stream + off + full * MP_DATA, (size_t)(slen - off - full * MP_DATA));
            block_crcs(last, MP_BYTES, cn - full, bs + full);
        }
        ch->ecrc = ecrc_run(ch->ecrc, bs, cn, es);
        /* j in [vlo, vhi): DATA micropackets without grants (not the HEADER, not the last,
           past the grants), their control words four at a time where the CPU can */
        Py_ssize_t vlo = 0, vhi = 0;
#ifdef GSN_CLMUL
        if (crc_vec) {
            vlo = 1 - i0 - c0;
            if (vlo < ng - at - c0)
                vlo = (Py_ssize_t)(ng - at - c0);
            if (vlo < 0)
                vlo = 0;
            vhi = n - 1 - i0 - c0;
            if (vhi > cn)
                vhi = cn;
            if (vhi - vlo >= 4)
                vhi = vlo + ((vhi - vlo) & ~(Py_ssize_t)3);
            else
                vlo = vhi = 0;
        }
#endif
        for (Py_ssize_t j = 0; j < cn; j++, m += MP_BYTES) {
#ifdef GSN_CLMUL
            if (j == vlo && vhi > vlo) {
                tx_ctrl_vpclmul(m, vhi - vlo, bs + j, es + j, data_ctrl, seq + (uint64_t)(at + c0 + j));
                m += (vhi - vlo - 1) * MP_BYTES;
                j = vhi - 1;
                continue;
            }
#endif
            const Py_ssize_t i = i0 + c0 + j;
            const int64_t a = at + c0 + j;
            const unsigned tseq = (unsigned)((seq + (uint64_t)a) & 0xFF);
            uint64_t ctrl;
            uint16_t cc;
            if (i && i < n - 1 && a >= ng) {
                ctrl = data_ctrl | ((uint64_t)tseq << 32) | ((uint64_t)es[j] << 16);
                cc = data_cc ^ T[2][tseq] ^ T[1][es[j] >> 8] ^ T[0][es[j] & 0xFF];
            } else {
                ctrl = ((uint64_t)vc << 62) | ((uint64_t)(i ? T_DATA : T_HEADER) << 58) |
                       tx_link(a, r, seq, grants, ng) | ((uint64_t)es[j] << 16);
                if (i == n - 1)
                    ctrl |= 1ull << 57;
                cc = ctrl6_crc0(ctrl);
            }
            store_be64(m + MP_DATA, ctrl | (uint16_t)(adv6(K32 ^ bs[j]) ^ cc));
        }
    }
}

static void chunk_release(Chunk *ch);

/* The next k (<= count) micropackets of VC vc's queue into a datagram at dst (its
 * micropackets at..), stamped. */
static void tx_take(VcQueue *q, int vc, Py_ssize_t k, uint8_t *dst, int64_t at, uint64_t r, uint64_t seq,
                    const uint8_t *grants, int64_t ng)
{
    q->count -= k;
    while (k > 0) {
        Chunk *ch = &q->c[q->start];
        Py_ssize_t m = ch->n - q->head;
        if (m > k)
            m = k;
        if (ch->raw) {
            tx_encode(ch, vc, q->head, m, dst, at, r, seq, grants, ng);
        } else {
            tx_copy_stamp(dst, (const uint8_t *)ch->view.buf + q->head * MP_BYTES, at, m, r, seq, grants, ng);
        }
        dst += m * MP_BYTES, at += m, k -= m;
        q->head += m;
        if (q->head == ch->n) {
            chunk_release(ch);
            q->start++;
            q->head = 0;
        }
    }
    if (q->start == q->end)
        q->start = q->end = 0;
}

#endif
