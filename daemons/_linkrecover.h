/* Loss recovery of the compiled link (included by _link.c after Core): the
 * receiver's bounded buffer of out-of-order datagrams and the SACK it reports,
 * the sender's SACK scoreboard, loss detection and adaptive RTO.
 * daemons/link/link.py (Link._buffer, sack_ranges, _process_sack, _rtt_sample,
 * _resend) is the oracle: the same decisions, counters and bytes.
 *
 * SACK NULL: the 32 data bytes of a NULL hold SACK_RANGES pairs of big-endian u32
 * (start, end) offsets from the shim's ack, lowest first, (0, 0) unused.
 */

/* --- receiver: out-of-order buffer --------------------------------------------- */

static void ooo_clear(Core *s)
{
    for (Py_ssize_t i = 0; i < s->ooo_len; i++)
        Py_CLEAR(s->ooo[i].b);
    s->ooo_len = 0;
    s->buffered_mps = 0;
}

/* Forget the first k entries (already taken, their references dropped). */
static void ooo_drop_front(Core *s, Py_ssize_t k)
{
    if (!k)
        return; /* s->ooo may be NULL (never allocated) */
    memmove(s->ooo, s->ooo + k, (s->ooo_len - k) * sizeof(OooEntry));
    s->ooo_len -= k;
}

/* A datagram (its first n micropackets passed the LCRC check) ahead of the next
 * expected one; its ack was taken already.  Kept as shim + micropackets. */
static int ooo_add(Core *s, const uint8_t *shim, const uint8_t *mps, Py_ssize_t n, uint64_t seq, double now)
{
    want_ack(s, now, 1);
    s->sack_due = 1;
    uint64_t end = seq + (uint64_t)n;
    int64_t limit = s->window > OOO_MAX_MPS ? s->window : OOO_MAX_MPS; /* the peer's window may be larger */
    /* seq > expected (the caller's test) and end may wrap: the distance is unsigned,
     * or a seq 2^63 ahead (one flipped bit) reads as behind and is buffered; and an
     * end past 2^64 (seq 2^64 - 1, n > expected + 1) is far ahead, as Link's ints say,
     * not the small wrapped distance */
    if (end < seq || end - s->expected > (uint64_t)limit) {
        s->counters[C_OUT_OF_WINDOW]++;
        return 0;
    }
    Py_ssize_t at = s->ooo_len; /* where seq goes (sorted by seq) */
    for (Py_ssize_t i = 0; i < s->ooo_len; i++) {
        OooEntry *e = &s->ooo[i];
        if (e->seq <= seq && end <= e->seq + (uint64_t)e->n) {
            s->counters[C_DUPLICATE]++;
            return 0;
        }
        if (at == s->ooo_len && e->seq >= seq)
            at = i;
    }
    s->counters[C_OUT_OF_ORDER]++;
    int same = at < s->ooo_len && s->ooo[at].seq == seq; /* a shorter one from the same seq (re-cut) */
    int64_t old = same ? s->ooo[at].n : 0;
    if (s->buffered_mps - old + n > limit || (!same && s->ooo_len >= OOO_MAX_DATAGRAMS)) {
        s->counters[C_OOO_FULL]++;
        return 0;
    }
    PyObject *b = PyBytes_FromStringAndSize(NULL, SHIM_BYTES + n * MP_BYTES);
    if (!b)
        return -1;
    memcpy(PyBytes_AS_STRING(b), shim, SHIM_BYTES);
    memcpy(PyBytes_AS_STRING(b) + SHIM_BYTES, mps, n * MP_BYTES);
    if (same) {
        Py_SETREF(s->ooo[at].b, b);
    } else {
        if (s->ooo_len == s->ooo_cap) {
            Py_ssize_t cap = s->ooo_cap ? 2 * s->ooo_cap : 32;
            OooEntry *o = PyMem_Realloc(s->ooo, cap * sizeof(OooEntry));
            if (!o) {
                Py_DECREF(b);
                PyErr_NoMemory();
                return -1;
            }
            s->ooo = o, s->ooo_cap = cap;
        }
        memmove(s->ooo + at + 1, s->ooo + at, (s->ooo_len - at) * sizeof(OooEntry));
        s->ooo[at].seq = seq;
        s->ooo[at].b = b;
        s->ooo_len++;
    }
    s->ooo[at].n = n;
    s->buffered_mps += n - old;
    return 0;
}

/* Write the SACK ranges of the buffer into a NULL's 32 data bytes. */
static void sack_write(Core *s, uint8_t *data)
{
    uint64_t lo[SACK_RANGES], hi[SACK_RANGES];
    int nr = 0;
    for (Py_ssize_t i = 0; i < s->ooo_len; i++) {
        uint64_t a = s->ooo[i].seq, b = a + (uint64_t)s->ooo[i].n;
        if (nr && a <= hi[nr - 1]) {
            if (b > hi[nr - 1])
                hi[nr - 1] = b;
        } else if (nr == SACK_RANGES) {
            break;
        } else {
            lo[nr] = a, hi[nr] = b, nr++;
        }
    }
    memset(data, 0, MP_DATA);
    for (int i = 0; i < nr; i++) {
        put_be32(data + 8 * i, (uint32_t)(lo[i] - s->expected));
        put_be32(data + 8 * i + 4, (uint32_t)(hi[i] - s->expected));
    }
}

/* --- sender: RTT, scoreboard, resends -------------------------------------------- */

static void rtt_sample(Core *s, double r)
{
    if (s->srtt < 0) {
        s->srtt = r;
        s->rttvar = r / 2;
    } else {
        double dev = s->srtt - r;
        s->rttvar = (1 - RTT_BETA) * s->rttvar + RTT_BETA * (dev < 0 ? -dev : dev);
        s->srtt = (1 - RTT_ALPHA) * s->srtt + RTT_ALPHA * r;
    }
    double rto = s->srtt + 4 * s->rttvar;
    if (rto < s->t_rtx_min)
        rto = s->t_rtx_min;
    if (rto > s->t_rtx_max)
        rto = s->t_rtx_max;
    s->rto = rto;
}

/* A datagram is lost (resent by the next datagrams()) when SACK_DUPTHRESH
 * transmissions after it were selectively acked. */
static void detect_losses(Core *s)
{
    uint64_t top[SACK_DUPTHRESH]; /* ascending: the latest transmissions selectively acked */
    int ntop = 0;
    for (Py_ssize_t i = s->ring_len - 1; i >= 0; i--) {
        Inflight *e = &s->ring[(s->ring_head + i) % s->ring_cap];
        if (e->sacked) {
            uint64_t x = e->xmit;
            if (ntop < SACK_DUPTHRESH) {
                int j = ntop++;
                for (; j > 0 && top[j - 1] > x; j--)
                    top[j] = top[j - 1];
                top[j] = x;
            } else if (x > top[0]) {
                int j = 0;
                for (; j + 1 < SACK_DUPTHRESH && top[j + 1] < x; j++)
                    top[j] = top[j + 1];
                top[j] = x;
            }
        } else if (!e->lost && ntop == SACK_DUPTHRESH && top[0] > e->xmit) {
            e->lost = 1;
        }
    }
}

/* A SACK NULL's data (the peer's cumulative ack taken already): mark the datagrams it
 * covers, then look for losses. */
static void sack_process(Core *s, uint64_t ack, const uint8_t *data)
{
    uint64_t lo[SACK_RANGES], hi[SACK_RANGES];
    int nr = 0;
    for (int i = 0; i < SACK_RANGES; i++) {
        uint32_t a = get_be32(data + 8 * i), b = get_be32(data + 8 * i + 4);
        if (!a && !b)
            continue;
        if (!(a > 0 && a < b && ack + b <= s->next_seq)) {
            s->counters[C_BAD_SACK]++;
            return;
        }
        lo[nr] = ack + a, hi[nr] = ack + b, nr++;
    }
    if (!nr)
        return;
    s->counters[C_RX_SACK]++;
    for (Py_ssize_t i = 0; i < s->ring_len; i++) {
        Inflight *e = &s->ring[(s->ring_head + i) % s->ring_cap];
        for (int k = 0; k < nr && !e->sacked; k++)
            e->sacked = lo[k] <= e->seq && e->seq + (uint64_t)e->n <= hi[k];
    }
    detect_losses(s);
}

enum { RESEND_LOST, RESEND_UNSACKED, RESEND_HEAD };

/* Resend the ring's datagrams that are lost (RESEND_LOST), not selectively acked
 * (RESEND_UNSACKED) or the first of those (RESEND_HEAD), restamped with our current
 * ack; appends them to out. */
static int resend(Core *s, PyObject *out, int which)
{
    int fast = which == RESEND_LOST, done = 0;
    const uint64_t r = (uint64_t)((s->expected - 1) & 0xFF) << 40;
    for (Py_ssize_t i = 0; i < s->ring_len; i++) {
        Inflight *e = &s->ring[(s->ring_head + i) % s->ring_cap];
        if (fast ? !e->lost : e->sacked)
            continue;
        if (which == RESEND_HEAD && done++)
            break;
        Py_ssize_t len = PyBytes_GET_SIZE(e->dgram);
        PyObject *b = PyBytes_FromStringAndSize(PyBytes_AS_STRING(e->dgram), len);
        if (!b)
            return -1;
        uint8_t *p = (uint8_t *)PyBytes_AS_STRING(b);
        store_be64(p + 24, s->expected);
        for (Py_ssize_t j = 0; j < e->n; j++) {
            uint8_t *m = p + SHIM_BYTES + j * MP_BYTES;
            restamp_ctrl(m, (load_be64(m + MP_DATA) & ~RSEQ_BITS) | r);
        }
        Py_SETREF(e->dgram, b);
        if (PyList_Append(out, b) < 0)
            return -1;
        e->lost = 0, e->sent = -1.0, e->xmit = s->xmit_count++;
        s->counters[C_RTX_MPS] += e->n;
        s->counters[fast ? C_FAST_RTX : C_TIMEOUT_RTX] += e->n;
    }
    return 0;
}
