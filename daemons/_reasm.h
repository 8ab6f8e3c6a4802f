/* Per-VC Message reassembly in C (spec §3.2): the algorithm of
 * daemons/link/reassembly.py (class Reassembler, its oracle), the same outputs and
 * the same counters for the same batches of micropackets.
 *
 * A HEADER opens a Message, DATA appends, TAIL closes; a HEADER or ADMIN while a
 * Message is open discards it and the stray micropacket; DATA with none open is
 * counted stray.  Checks run per batch ("run": the micropackets of one batch up to a
 * TAIL), in the oracle's order: count against M_len, ERROR bit, ECRC (exact, per
 * micropacket).  Data is de-interleaved into the Message's stream buffer as it
 * arrives; the buffer is kept between Messages (no allocation per Message once grown).
 * Outputs go to a sink: a whole Message's stream (MAC header first) or an ADMIN
 * micropacket's 32 data bytes.  Included by _link.c only.
 */
#ifndef GSN_REASM_H
#define GSN_REASM_H

#define RA_VCS 4
#define RA_MAC 16
#define RA_PREFIX 24 /* MAC header + LLC/SNAP: the payload starts here */
#define RA_LLC 8

/* Reasons, in the oracle's counter names. */
#define RA_COUNTERS(X)                                                                             \
    X(ABORTED, "aborted_on_reset") X(STRAY, "stray_data_mps")                                        \
    X(D_HDR_OPEN, "discard_header_in_open_message") X(D_VC_LIMIT, "discard_vc_limit")                \
    X(D_TOO_LARGE, "discard_too_large") X(D_MLEN, "discard_header_M_len")                            \
    X(D_LLC, "discard_header_LLC/SNAP") X(D_LONGER, "discard_longer_than_m_len")                     \
    X(D_ERROR, "discard_error_bit") X(D_ECRC, "discard_ecrc") X(D_SHORTER, "discard_shorter_than_m_len") \
    X(D_ADMIN_NO_TAIL, "discard_admin_without_tail")

#define RA_ENUM(id, name) RA_##id,
#define RA_NAME(id, name) name,
enum { RA_COUNTERS(RA_ENUM) RA_N };
static const char *ra_names[RA_N] = {RA_COUNTERS(RA_NAME)};

static const uint64_t ra_vc_max_data[RA_VCS] = {68, 4100, 4100, 1ull << 27}; /* constants.VC_MAX_DATA_MPS */
static const uint8_t ra_llc_snap[6] = {0xAA, 0xAA, 0x03, 0x00, 0x00, 0x00};

typedef struct {
    int open;
    int bad;          /* an RA_D_* reason, or -1 */
    uint64_t count;   /* micropackets so far, HEADER included */
    uint64_t expect;  /* micropackets M_len announces */
    uint16_t last_ecrc;
    uint8_t *buf;     /* the stream: count * 32 bytes while good */
    uint64_t cap;
} RaOpen;

typedef struct {
    int64_t max_payload; /* -1: no limit */
    RaOpen vc[RA_VCS];
    uint64_t counters[RA_N];
} Reasm;

/* sink(ctx, vc, stream, mps) for a Message, sink(ctx, vc, data32, 0) for an ADMIN;
 * returns < 0 to stop (a Python error is set). */
typedef int (*ra_sink)(void *ctx, int vc, uint8_t *data, uint64_t mps);

static inline unsigned ra_type(const uint8_t *mp) { return (unsigned)(load_be64(mp + MP_DATA) >> 58) & 0xF; }

#ifdef GSN_CLMUL
/* The control words of the eight micropackets at m (AVX-512, with crc_vec), decoded
 * (big-endian): they are qwords 4, 9, ..., 39 of the 320 bytes, so five loads and three
 * permutes instead of eight dependent scalar loads.  Also receive_sequenced's. */
__attribute__((target("avx512f,avx512bw"))) static inline __m512i ctrl8_avx512(const uint8_t *m)
{
    const __m512i bswap = _mm512_broadcast_i32x4(_mm_set_epi8(8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
    const __m512i ix = _mm512_setr_epi64(4, 9, 14, 0, 0, 0, 0, 0); /* qwords 0..15: v0, v1 */
    const __m512i iy = _mm512_setr_epi64(0, 0, 0, 3, 8, 13, 0, 0); /* qwords 16..31: v2, v3 */
    const __m512i iz = _mm512_setr_epi64(0, 0, 0, 0, 0, 0, 2, 7);  /* qwords 32..39: v4 */
    const __m512i v0 = _mm512_loadu_si512(m), v1 = _mm512_loadu_si512(m + 64);
    const __m512i v2 = _mm512_loadu_si512(m + 128), v3 = _mm512_loadu_si512(m + 192);
    const __m512i v4 = _mm512_loadu_si512(m + 256);
    __m512i c = _mm512_mask_blend_epi64(0x38, _mm512_permutex2var_epi64(v0, ix, v1),
                                        _mm512_permutex2var_epi64(v2, iy, v3));
    c = _mm512_mask_blend_epi64(0xC0, c, _mm512_permutexvar_epi64(iz, v4));
    return _mm512_shuffle_epi8(c, bswap);
}

/* ra_append's loop, eight micropackets per step, for the whole groups of eight of the n
 * at m (their block CRCs b, the stream at q) up to the first group with an ERROR bit
 * (the scalar loop takes that one, in order): each copied, and each stored ECRC s[i]
 * checked against adv32(s[i-1]) ^ b[i] (s[-1] = *e; adv32 by nibble tables, M32N, in
 * each 64-bit lane), ORing the differences into *bad (0: all right).  Returns how many
 * it took (a multiple of 8) and leaves *e = the last one's stored ECRC. */
__attribute__((target("avx512f,avx512bw"))) static Py_ssize_t ra_ecrc_copy_avx512(const uint8_t *m, const uint16_t *b,
                                                                                  Py_ssize_t n, uint8_t *q,
                                                                                  uint16_t *e, unsigned *bad_out)
{
    const __m512i n0l = _mm512_loadu_si512(M32N[0]), n0h = _mm512_loadu_si512(M32N[0] + 8);
    const __m512i n1l = _mm512_loadu_si512(M32N[1]), n1h = _mm512_loadu_si512(M32N[1] + 8);
    const __m512i n2l = _mm512_loadu_si512(M32N[2]), n2h = _mm512_loadu_si512(M32N[2] + 8);
    const __m512i n3l = _mm512_loadu_si512(M32N[3]), n3h = _mm512_loadu_si512(M32N[3] + 8);
    const __m512i nib = _mm512_set1_epi64(0xF), w16 = _mm512_set1_epi64(0xFFFF), err = _mm512_set1_epi64(1ll << 56);
    __m512i prev = _mm512_set1_epi64(*e), bad = _mm512_setzero_si512();
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8, m += 8 * MP_BYTES, q += 8 * MP_DATA) {
        const __m512i c = ctrl8_avx512(m);
        if (_mm512_test_epi64_mask(c, err))
            break;
        const __m512i s = _mm512_and_si512(_mm512_srli_epi64(c, 16), w16); /* stored ECRCs */
        const __m512i x = _mm512_alignr_epi64(s, prev, 7); /* s[i-1]: prev's last, then s[0..6] */
        __m512i a = _mm512_permutex2var_epi64(n0l, _mm512_and_si512(x, nib), n0h);
        a = _mm512_xor_si512(a, _mm512_permutex2var_epi64(n1l, _mm512_and_si512(_mm512_srli_epi64(x, 4), nib), n1h));
        a = _mm512_xor_si512(a, _mm512_permutex2var_epi64(n2l, _mm512_and_si512(_mm512_srli_epi64(x, 8), nib), n2h));
        a = _mm512_xor_si512(a, _mm512_permutex2var_epi64(n3l, _mm512_srli_epi64(x, 12), n3h));
        const __m512i bv = _mm512_cvtepu16_epi64(_mm_loadu_si128((const __m128i *)(b + i)));
        bad = _mm512_ternarylogic_epi64(bad, s, _mm512_xor_si512(a, bv), 0xF6); /* bad | (s ^ adv32(x) ^ b) */
        prev = s;
        for (int k = 0; k < 8; k++)
            memcpy(q + k * MP_DATA, m + k * MP_BYTES, MP_DATA);
    }
    *e = (uint16_t)_mm_extract_epi16(_mm512_extracti32x4_epi32(prev, 3), 4);
    *bad_out |= (unsigned)_mm512_reduce_or_epi64(bad);
    return i;
}
#endif

static inline uint64_t ra_max_m_len(int vc)
{
    uint64_t m = RA_MAC + MP_DATA * ra_vc_max_data[vc];
    return m < 0xFFFFFFFFull ? m : 0xFFFFFFFFull;
}

static void ra_init(Reasm *r, int64_t max_payload)
{
    memset(r, 0, sizeof *r);
    r->max_payload = max_payload;
}

static void ra_free(Reasm *r)
{
    for (int v = 0; v < RA_VCS; v++) {
        PyMem_Free(r->vc[v].buf);
        r->vc[v].buf = NULL;
        r->vc[v].cap = 0;
    }
}

static void ra_reset(Reasm *r)
{
    for (int v = 0; v < RA_VCS; v++)
        if (r->vc[v].open) {
            r->counters[RA_ABORTED]++;
            r->vc[v].open = 0;
        }
}

static void ra_start(Reasm *r, int vc, const uint8_t *h)
{
    RaOpen *st = &r->vc[vc];
    st->open = 1, st->bad = -1, st->count = 0, st->expect = 0, st->last_ecrc = CRC_INIT;
    uint64_t m_len = ((uint64_t)h[12] << 24) | ((uint64_t)h[13] << 16) | ((uint64_t)h[14] << 8) | h[15];
    if (m_len < RA_LLC) {
        st->bad = RA_D_MLEN;
        return;
    }
    if (memcmp(h + RA_MAC, ra_llc_snap, 6)) {
        st->bad = RA_D_LLC;
        return;
    }
    st->expect = (RA_MAC + m_len + MP_DATA - 1) / MP_DATA;
    if (m_len > ra_max_m_len(vc))
        st->bad = RA_D_VC_LIMIT;
    else if (r->max_payload >= 0 && m_len - RA_LLC > (uint64_t)r->max_payload)
        st->bad = RA_D_TOO_LARGE;
}

/* The run mps[0:k] of an open Message (b0: their data's zero-init CRCs, or NULL).  0, or
 * -1 when out of memory (error set). */
static int ra_append(Reasm *r, int vc, const uint8_t *mps, Py_ssize_t k, const uint16_t *b0)
{
    RaOpen *st = &r->vc[vc];
    uint64_t at = st->count;
    st->count += (uint64_t)k;
    if (st->bad >= 0)
        return 0;
    if (st->count > st->expect) {
        st->bad = RA_D_LONGER;
        return 0;
    }
    uint64_t need = st->count * MP_DATA;
    if (need > st->cap) { /* doubling, up to what M_len announced (need <= expect * 32) */
        uint64_t cap = st->cap ? st->cap : 4096, most = st->expect * MP_DATA;
        while (cap < need)
            cap *= 2;
        if (cap > most)
            cap = most;
        uint8_t *b = PyMem_Realloc(st->buf, cap);
        if (!b) {
            PyErr_NoMemory();
            return -1;
        }
        st->buf = b, st->cap = cap;
    }
    /* one pass: ERROR bits, ECRC, the copy into the stream; an ERROR bit anywhere in the
       run is the reason before a wrong ECRC (the oracle's order).  The running ECRC is
       e[i] = M32(e[i-1]) ^ b[i]; each micropacket's stored value s[i] is checked against
       M32(s[i-1]) ^ b[i], its predecessor's STORED value: when every check holds, s[i] = e[i]
       for all i by induction (s[-1] = the last good value), and the first i where s[i] !=
       e[i] is the first failing check.  So the same verdict as comparing with ecrc_run's
       chain, without its dependency from one micropacket to the next. */
    uint8_t *q = st->buf + at * MP_DATA;
    uint16_t e = st->last_ecrc, bs[ENC_CHUNK];
    unsigned ecrc_bad = 0;
    for (Py_ssize_t c0 = 0; c0 < k; c0 += ENC_CHUNK) {
        const Py_ssize_t cn = k - c0 < ENC_CHUNK ? k - c0 : ENC_CHUNK;
        const uint8_t *m = mps + c0 * MP_BYTES;
        if (!b0)
            block_crcs(m, MP_BYTES, cn, bs);
        const uint16_t *b = b0 ? b0 + c0 : bs;
        Py_ssize_t j = 0;
#ifdef GSN_CLMUL
        if (crc_vec && cn >= 8) { /* whole groups of eight at once, up to one with an ERROR bit */
            j = ra_ecrc_copy_avx512(m, b, cn, q, &e, &ecrc_bad);
            m += j * MP_BYTES, q += j * MP_DATA;
        }
#endif
        for (; j < cn; j++, m += MP_BYTES, q += MP_DATA) {
            const uint64_t c = load_be64(m + MP_DATA);
            if ((c >> 56) & 1) {
                st->bad = RA_D_ERROR;
                return 0;
            }
            const uint16_t stored = (uint16_t)(c >> 16);
            ecrc_bad |= (unsigned)(stored ^ adv32(e) ^ b[j]);
            e = stored;
            memcpy(q, m, MP_DATA);
        }
    }
    if (ecrc_bad) {
        st->bad = RA_D_ECRC;
        return 0;
    }
    st->last_ecrc = e;
    return 0;
}

static int ra_finish(Reasm *r, int vc, ra_sink sink, void *ctx)
{
    RaOpen *st = &r->vc[vc];
    st->open = 0;
    if (st->bad < 0 && st->count != st->expect)
        st->bad = RA_D_SHORTER;
    if (st->bad >= 0) {
        r->counters[st->bad]++;
        return 0;
    }
    return sink(ctx, vc, st->buf, st->count);
}

static int ra_admin(Reasm *r, int vc, const uint8_t *mp, ra_sink sink, void *ctx)
{
    uint64_t ctrl = load_be64(mp + MP_DATA);
    if (!((ctrl >> 57) & 1)) {
        r->counters[RA_D_ADMIN_NO_TAIL]++;
        return 0;
    }
    if ((ctrl >> 56) & 1) {
        r->counters[RA_D_ERROR]++;
        return 0;
    }
    if ((uint16_t)(K32 ^ block_crc0(mp)) != (uint16_t)(ctrl >> 16)) { /* CRC from 0xFFFF of 32 bytes */
        r->counters[RA_D_ECRC]++;
        return 0;
    }
    return sink(ctx, vc, (uint8_t *)mp, 0);
}

/* Feed n micropackets received in order on vc (one batch, as the link hands them up);
 * b0: the zero-init CRC of each one's data, computed by the LCRC check (or NULL); plain:
 * the caller saw that none of them is a HEADER or an ADMIN or has the tail bit (the
 * bulk of a large Message), so an open Message takes them all without a scan. */
static int ra_feed(Reasm *r, int vc, const uint8_t *mps, Py_ssize_t n, const uint16_t *b0, int plain,
                   ra_sink sink, void *ctx)
{
    Py_ssize_t pos = 0;
    while (pos < n) {
        RaOpen *st = &r->vc[vc];
        Py_ssize_t first = pos;
        if (!st->open) {
            unsigned kind = ra_type(mps + pos * MP_BYTES);
            if (kind == T_ADMIN) {
                if (ra_admin(r, vc, mps + pos * MP_BYTES, sink, ctx) < 0)
                    return -1;
                pos++;
                continue;
            }
            if (kind != T_HEADER) {
                Py_ssize_t nxt = pos;
                while (nxt < n && ra_type(mps + nxt * MP_BYTES) != T_HEADER && ra_type(mps + nxt * MP_BYTES) != T_ADMIN)
                    nxt++;
                r->counters[RA_STRAY] += (uint64_t)(nxt - pos);
                pos = nxt;
                continue;
            }
            ra_start(r, vc, mps + pos * MP_BYTES);
            first = pos + 1;
        }
        /* one pass to the Message's tail (end: one past it, or n) or to a HEADER or ADMIN
           inside it (j), whichever comes first */
        Py_ssize_t end = plain ? n : pos, tail = 0, j = -1;
        while (end < n) {
            const uint64_t c = load_be64(mps + end * MP_BYTES + MP_DATA);
            const unsigned t = (unsigned)(c >> 58) & 0xF;
            if (end >= first && (t == T_HEADER || t == T_ADMIN)) {
                j = end;
                break;
            }
            end++;
            if ((c >> 57) & 1) {
                tail = 1;
                break;
            }
        }
        if (j >= 0) {
            r->counters[RA_D_HDR_OPEN]++;
            st->open = 0;
            pos = j + 1;
            continue;
        }
        if (ra_append(r, vc, mps + pos * MP_BYTES, end - pos, b0 ? b0 + pos : NULL) < 0)
            return -1;
        pos = end;
        if (tail && ra_finish(r, vc, sink, ctx) < 0)
            return -1;
    }
    return 0;
}

static PyObject *ra_counter_dict(const Reasm *r)
{
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    for (int i = 0; i < RA_N; i++) {
        if (!r->counters[i])
            continue;
        PyObject *v = PyLong_FromUnsignedLongLong(r->counters[i]);
        if (!v || PyDict_SetItemString(d, ra_names[i], v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(v);
    }
    return d;
}

#endif
