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
        for (Py_ssize_t j = 0; j < cn; j++, m += MP_BYTES, q += MP_DATA) {
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
