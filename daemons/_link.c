/* The GSN link protocol, compiled (DESIGN §4, layer 1): the per-micropacket work
 * of daemons/link/link.py (class Link) with the same behaviour, the same wire
 * bytes for the same inputs and the same counters.  Sans-IO: fed datagrams and
 * the time, asked for datagrams, events and the next deadline.
 *
 * daemons.link.clink.CLink subclasses the type defined here (Core) and adds the
 * Python-facing conveniences (counters as a Counter, status(), the ledger view).
 *
 * Layout of a sequenced datagram (daemons/wire/shim.py): the 32-byte shim, then
 * n micropackets of 40 bytes.  The ring of datagrams in flight holds them exactly
 * as sent; a retransmission copies one and restamps RSEQ (micropackets) and the
 * shim's ack, nothing else.  Loss recovery (selective repeat: receive buffer,
 * SACK, adaptive RTO) is in _linkrecover.h.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_gsncrc.h"

#define NUM_VCS 4
#define SHIM_BYTES 32
#define SHIM_MAGIC 0x4753
#define SHIM_VERSION 1
#define FLAG_SEQ 0x01
#define MAX_DGRAM_MPS 1600 /* below 65536: run_scan_add counts them in 16-bit fields */
#define VC_QUANTUM 512
#define CR_MAX 63
#define NO_ACK UINT64_MAX
/* loss recovery, daemons/constants.py (PROJECT CHOICE) */
#define SACK_RANGES 4
#define SACK_DUPTHRESH 3
#define RTT_ALPHA 0.125
#define RTT_BETA 0.25
#define OOO_MAX_MPS 87552 /* SEQ_WINDOW_MPS */
#define OOO_MAX_DATAGRAMS 4096

enum { T_NULL = 0, T_DATA, T_HEADER, T_ADMIN, T_CREDIT, T_RESET, T_RESET_ACK, T_INIT, T_INIT_ACK, T_LAST = T_INIT_ACK };
enum { ST_RESETTING = 0, ST_UP = 1 };

#include "_reasm.h"
#include "_dataplane.h"

/* Counters: the names of daemons/link/link.py, in one table. */
#define COUNTERS(X)                                                                                 \
    X(BAD_SHIM_SHIM, "bad_shim_shim") X(BAD_SHIM_MAGIC, "bad_shim_magic")                            \
    X(BAD_SHIM_VERSION, "bad_shim_version") X(BAD_SHIM_FLAGS, "bad_shim_flags")                      \
    X(BAD_SHIM_MPS, "bad_shim_micropackets") X(WRONG_CABLE, "wrong_cable") X(LCRC_ERROR, "lcrc_error") \
    X(DROPPED_AFTER_LCRC, "dropped_after_lcrc_error_mps") X(RX_WHILE_RESETTING, "rx_while_resetting") \
    X(STALE_NONCE, "stale_nonce") X(BAD_ACK, "bad_ack") X(RSEQ_MISMATCH, "rseq_mismatch")            \
    X(UNSEQ_IN_SEQ, "unsequenced_in_sequenced_batch") X(TSEQ_MISMATCH, "tseq_mismatch")             \
    X(OUT_OF_ORDER, "out_of_order") X(DUPLICATE, "duplicate") X(RX_MPS, "rx_mps")                    \
    X(CV0, "credit_violation_vc0_mps") X(CV1, "credit_violation_vc1_mps")                            \
    X(CV2, "credit_violation_vc2_mps") X(CV3, "credit_violation_vc3_mps")                            \
    X(BAD_CONTROL_TYPE, "bad_control_TYPE") X(RX_RESET, "rx_reset") X(RX_INIT, "rx_init")            \
    X(DUP_RESET_ACK, "duplicate_reset_ack") X(STALE_RESET_ACK, "stale_reset_ack")                    \
    X(SEQ_IN_CONTROL, "sequenced_in_control_batch") X(DUP_RESET, "duplicate_reset")                  \
    X(DOWN_PEER_RESET, "link_down_peer_reset") X(DOWN_SILENT, "link_down_silent")                    \
    X(DOWN_RTX_LIMIT, "link_down_rtx_limit") X(LINK_UP, "link_up") X(WINDOW_FULL, "window_full")     \
    X(TX_MPS, "tx_mps") X(TX_RESET, "tx_reset") X(RTX_MPS, "rtx_mps")                                \
    X(DROPPED_ON_RESET, "dropped_on_reset_mps") X(OUT_OF_WINDOW, "out_of_window")                      \
    X(OOO_FULL, "ooo_buffer_full") X(OOO_DELIVERED, "ooo_delivered_mps") X(BAD_SACK, "bad_sack")      \
    X(RX_SACK, "rx_sack") X(TX_SACK, "tx_sack") X(FAST_RTX, "fast_rtx_mps")                          \
    X(TIMEOUT_RTX, "timeout_rtx_mps") X(STALE_ACK, "stale_ack")

#define AS_ENUM(id, name) C_##id,
#define AS_NAME(id, name) name,
enum { COUNTERS(AS_ENUM) N_COUNTERS };
static const char *counter_names[N_COUNTERS] = {COUNTERS(AS_NAME)};

/* Python objects set once by daemons.link.clink (setup()). */
static PyObject *ev_up, *ev_down, *ev_received, *np_frombuffer, *mp_dtype;

typedef struct {
    PyObject *obj; /* a reference to what was enqueued, or NULL: view.buf is ours (PyMem) */
    Py_buffer view;
    Py_ssize_t n; /* micropackets */
    int raw;      /* view.buf[0:view.len] is a Message's stream from tx_buf_get() (1) or tx_big_get() (2),
                     encoded when taken (_txfast.h) */
    uint16_t ecrc; /* raw: the running ECRC of the micropackets taken so far */
} Chunk;

typedef struct {
    Chunk *c;
    Py_ssize_t cap, start, end; /* live chunks c[start:end] */
    Py_ssize_t head;            /* micropackets of c[start] already taken */
    Py_ssize_t count;
} VcQueue;

#include "_txfast.h"

typedef struct {
    uint64_t seq;
    Py_ssize_t n;
    PyObject *dgram; /* bytes: shim + n micropackets, as last sent */
    uint64_t xmit;   /* number of its last (re)transmission */
    double sent;     /* time of its first transmission; -1: retransmitted (no RTT sample) */
    uint8_t sacked, lost;
} Inflight;

typedef struct {
    uint64_t seq;
    Py_ssize_t n;
    PyObject *b; /* bytes: shim + n micropackets */
} OooEntry;

typedef struct {
    PyObject_HEAD
    int ready;
    uint32_t cable_id;
    int max_mps;
    int64_t window;
    int64_t buffers[NUM_VCS];
    double t_ack, t_rtx, t_reset, t_keepalive, t_dead, t_rtx_max, t_rtx_min;
    long rtx_limit;
    PyObject *rng;
    PyObject *events;      /* list */
    PyObject *control_out; /* list of bytes */
    int state;
    uint32_t my_nonce, peer_nonce;
    double last_heard, last_sent, reset_due;
    int rr;
    uint64_t next_seq, base, expected;
    double rtx_deadline, ack_due, credit_due; /* INFINITY = not set */
    long rtx_count;
    double srtt, rttvar, rto; /* srtt < 0: no sample yet */
    uint64_t xmit_count;
    OooEntry *ooo; /* out-of-order datagrams, sorted by seq */
    Py_ssize_t ooo_len, ooo_cap;
    int64_t buffered_mps;
    int sack_due;
    int64_t unacked_rx;
    int64_t tx[NUM_VCS], used[NUM_VCS], pending[NUM_VCS], rxo[NUM_VCS];
    VcQueue q[NUM_VCS];
    Inflight *ring;
    Py_ssize_t ring_cap, ring_head, ring_len;
    uint64_t counters[N_COUNTERS];
    uint8_t credit_mp[MP_BYTES]; /* an empty CREDIT micropacket */
    DataPlane *dp;               /* NULL unless dp_attach() was called */
    struct SwitchPlane *sw;      /* a gsn-switch's port: what it accepts is forwarded (_switchloop.h) */
    int sw_idx;
} Core;

typedef struct SwitchPlane SwitchPlane;
static int dp_take(Core *s, int vc, const uint8_t *mps, const uint16_t *b0, Py_ssize_t n, int plain);
static int sw_take(Core *s, int vc, const uint8_t *mps, Py_ssize_t first, Py_ssize_t acc, int contiguous, double now);

/* --- small helpers ---------------------------------------------------------- */

static inline void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = v >> 24, p[1] = v >> 16, p[2] = v >> 8, p[3] = (uint8_t)v;
}
static inline uint32_t get_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void write_shim(Core *s, uint8_t *p, int flags, uint32_t dst, uint64_t seq, uint64_t ack)
{
    p[0] = SHIM_MAGIC >> 8, p[1] = SHIM_MAGIC & 0xFF, p[2] = SHIM_VERSION, p[3] = (uint8_t)flags;
    put_be32(p + 4, s->cable_id);
    put_be32(p + 8, s->my_nonce);
    put_be32(p + 12, dst);
    store_be64(p + 16, seq);
    store_be64(p + 24, ack);
}

static inline int any_pending(Core *s)
{
    for (int v = 0; v < NUM_VCS; v++)
        if (s->pending[v])
            return 1;
    return 0;
}

static int add_event(Core *s, PyObject *ev)
{
    if (!ev)
        return -1;
    int r = PyList_Append(s->events, ev);
    Py_DECREF(ev);
    return r;
}

/* --- VC queues ---------------------------------------------------------------- */

static void chunk_release(Chunk *ch)
{
    if (ch->obj) {
        PyBuffer_Release(&ch->view);
        Py_DECREF(ch->obj);
    } else if (ch->raw == 2) {
        tx_big_put(ch->view.buf);
    } else if (ch->raw) {
        tx_buf_put(ch->view.buf);
    } else {
        PyMem_Free(ch->view.buf);
    }
}

static void q_clear(VcQueue *q)
{
    for (Py_ssize_t i = q->start; i < q->end; i++)
        chunk_release(&q->c[i]);
    q->start = q->end = q->head = q->count = 0;
}

static int q_room(VcQueue *q);

static int q_push(VcQueue *q, PyObject *obj)
{
    Chunk ch;
    PyObject *owned = NULL;
    ch.raw = 0;
    if (PyObject_GetBuffer(obj, &ch.view, PyBUF_C_CONTIGUOUS) < 0) {
        /* e.g. a strided numpy view: take a contiguous copy, as Link's concatenate would */
        if (!PyErr_ExceptionMatches(PyExc_BufferError) && !PyErr_ExceptionMatches(PyExc_ValueError))
            return -1;
        PyErr_Clear();
        if (!(owned = PyObject_CallMethod(obj, "tobytes", NULL)))
            return -1;
        obj = owned;
        if (PyObject_GetBuffer(obj, &ch.view, PyBUF_C_CONTIGUOUS) < 0) {
            Py_DECREF(owned);
            return -1;
        }
    }
    if (ch.view.len % MP_BYTES) {
        PyBuffer_Release(&ch.view);
        Py_XDECREF(owned);
        PyErr_SetString(PyExc_ValueError, "enqueue: not a whole number of 40-byte micropackets");
        return -1;
    }
    ch.n = ch.view.len / MP_BYTES;
    if (!ch.n) {
        PyBuffer_Release(&ch.view);
        Py_XDECREF(owned);
        return 0;
    }
    if (q_room(q) < 0) {
        PyBuffer_Release(&ch.view);
        Py_XDECREF(owned);
        return -1;
    }
    if (!owned)
        Py_INCREF(obj);
    ch.obj = obj; /* the reference: ours, or the copy's */
    q->c[q->end++] = ch;
    q->count += ch.n;
    return 0;
}

/* Room for one more chunk at q->c[q->end]; -1 (error set) if out of memory. */
static int q_room(VcQueue *q)
{
    if (q->end == q->cap) {
        if (q->start > 0) {
            memmove(q->c, q->c + q->start, (q->end - q->start) * sizeof(Chunk));
            q->end -= q->start;
            q->start = 0;
        }
        if (q->end == q->cap) {
            Py_ssize_t cap = q->cap ? 2 * q->cap : 16;
            Chunk *c = PyMem_Realloc(q->c, cap * sizeof(Chunk));
            if (!c) {
                PyErr_NoMemory();
                return -1;
            }
            q->c = c, q->cap = cap;
        }
    }
    return 0;
}

/* --- go-back-N ring -------------------------------------------------------- */

static void ring_clear(Core *s)
{
    for (Py_ssize_t i = 0; i < s->ring_len; i++)
        Py_CLEAR(s->ring[(s->ring_head + i) % s->ring_cap].dgram);
    s->ring_head = s->ring_len = 0;
}

static int ring_push(Core *s, uint64_t seq, Py_ssize_t n, PyObject *dgram, double now)
{
    if (s->ring_len == s->ring_cap) {
        Py_ssize_t cap = s->ring_cap ? 2 * s->ring_cap : 64;
        Inflight *r = PyMem_Malloc(cap * sizeof(Inflight));
        if (!r) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < s->ring_len; i++)
            r[i] = s->ring[(s->ring_head + i) % s->ring_cap];
        PyMem_Free(s->ring);
        s->ring = r, s->ring_cap = cap, s->ring_head = 0;
    }
    Inflight *e = &s->ring[(s->ring_head + s->ring_len) % s->ring_cap];
    e->seq = seq, e->n = n, e->dgram = dgram;
    e->xmit = s->xmit_count++, e->sent = now, e->sacked = e->lost = 0;
    Py_INCREF(dgram);
    s->ring_len++;
    return 0;
}

static inline void want_ack(Core *s, double now, int soon);
#include "_linkrecover.h"

/* --- state ------------------------------------------------------------------ */

static void clear_state(Core *s)
{
    s->next_seq = s->base = s->expected = 0;
    ring_clear(s);
    s->rtx_deadline = s->ack_due = s->credit_due = INFINITY;
    s->rtx_count = 0;
    s->xmit_count = 0;
    s->srtt = -1.0, s->rttvar = 0.0, s->rto = s->t_rtx;
    ooo_clear(s);
    s->sack_due = 0;
    s->unacked_rx = 0;
    for (int v = 0; v < NUM_VCS; v++) {
        s->tx[v] = s->used[v] = s->pending[v] = s->rxo[v] = 0;
        Py_ssize_t dropped = s->q[v].count;
        q_clear(&s->q[v]);
        s->counters[C_DROPPED_ON_RESET] += dropped;
    }
    if (s->dp) { /* the reset took the buffers back: nothing stays withheld */
        ra_reset(&s->dp->ra);
        memset(s->dp->withheld, 0, sizeof s->dp->withheld);
    }
}

static int start_reset(Core *s, double now)
{
    PyObject *r = PyObject_CallMethod(s->rng, "getrandbits", "i", 32);
    if (!r)
        return -1;
    unsigned long v = PyLong_AsUnsignedLong(r);
    Py_DECREF(r);
    if (v == (unsigned long)-1 && PyErr_Occurred())
        return -1;
    s->my_nonce = (uint32_t)v ? (uint32_t)v : 1;
    s->state = ST_RESETTING;
    clear_state(s);
    s->reset_due = now;
    return 0;
}

static int go_up(Core *s, uint32_t peer, double now)
{
    s->peer_nonce = peer;
    s->state = ST_UP;
    s->last_heard = now;
    for (int v = 0; v < NUM_VCS; v++) {
        s->pending[v] = s->buffers[v];
        s->used[v] = s->rxo[v] = 0;
    }
    s->counters[C_LINK_UP]++;
    return add_event(s, PyObject_CallFunction(ev_up, "k", (unsigned long)peer));
}

static int fail(Core *s, int counter, const char *reason, double now)
{
    s->counters[counter]++;
    if (add_event(s, PyObject_CallFunction(ev_down, "s", reason)) < 0)
        return -1;
    return start_reset(s, now);
}

/* --- send -------------------------------------------------------------------- */

static PyObject *control_datagram(Core *s, int kind, uint32_t dst)
{
    PyObject *b = PyBytes_FromStringAndSize(NULL, SHIM_BYTES + MP_BYTES);
    if (!b)
        return NULL;
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(b);
    write_shim(s, p, 0, dst, s->next_seq, s->expected);
    uint8_t *mp = p + SHIM_BYTES;
    memset(mp, 0, MP_DATA);
    if (kind == T_NULL && s->ooo_len) {
        sack_write(s, mp);
        s->counters[C_TX_SACK]++;
    }
    uint64_t ctrl = ((uint64_t)kind << 58) | ((uint64_t)((s->expected - 1) & 0xFF) << 40) |
                    ((uint64_t)((s->next_seq - 1) & 0xFF) << 32);
    store_be64(mp + MP_DATA, ctrl | lcrc_of(mp, ctrl));
    return b;
}

static inline void want_ack(Core *s, double now, int soon)
{
    double due = soon ? now : now + s->t_ack;
    if (due < s->ack_due)
        s->ack_due = due;
}

static inline void acked_out(Core *s)
{
    s->ack_due = INFINITY;
    s->unacked_rx = 0;
}

/* One sequenced datagram, or Py_None when there is nothing to send (NULL: error). */
static PyObject *build_batch(Core *s, double now, int force_credit)
{
    int64_t space = s->window - (int64_t)(s->next_seq - s->base);
    if (space > s->max_mps)
        space = s->max_mps;
    if (space <= 0) {
        s->counters[C_WINDOW_FULL]++;
        Py_RETURN_NONE;
    }
    int want_credit = force_credit;
    for (int v = 0; v < NUM_VCS && !want_credit; v++) {
        int64_t quarter = s->buffers[v] / 4;
        if (s->pending[v] >= (quarter > 1 ? quarter : 1))
            want_credit = 1;
    }
    uint8_t grants[2 * MAX_DGRAM_MPS];
    int64_t ng = 0;
    if (want_credit)
        for (int v = 0; v < NUM_VCS && ng < space; v++)
            for (int64_t left = s->pending[v]; left > 0 && ng < space; left -= CR_MAX) {
                grants[2 * ng] = (uint8_t)v;
                grants[2 * ng + 1] = (uint8_t)(left > CR_MAX ? CR_MAX : left);
                ng++;
            }
    /* plan the round robin: (vc, k) takes, in order */
    uint8_t take_vc[MAX_DGRAM_MPS + NUM_VCS];
    int32_t take_k[MAX_DGRAM_MPS + NUM_VCS];
    int ntakes = 0;
    int64_t taken = 0, avail[NUM_VCS], credit[NUM_VCS];
    for (int v = 0; v < NUM_VCS; v++)
        avail[v] = s->q[v].count, credit[v] = s->tx[v];
    int progress = 1;
    while (progress && taken < space) {
        progress = 0;
        for (int i = 0; i < NUM_VCS; i++) {
            int vc = (s->rr + i) % NUM_VCS;
            int64_t k = VC_QUANTUM;
            if (credit[vc] < k)
                k = credit[vc];
            if (avail[vc] < k)
                k = avail[vc];
            if (space - taken < k)
                k = space - taken;
            if (k > 0) {
                take_vc[ntakes] = (uint8_t)vc;
                take_k[ntakes++] = (int32_t)k;
                avail[vc] -= k, credit[vc] -= k, taken += k;
                progress = 1;
            }
        }
        s->rr = (s->rr + 1) % NUM_VCS;
    }
    if (!want_credit) /* credits ride free on the data micropackets (no micropacket of their own) */
        for (int v = 0; v < NUM_VCS && ng < taken; v++)
            for (int64_t left = s->pending[v]; left > 0 && ng < taken; left -= CR_MAX) {
                grants[2 * ng] = (uint8_t)v;
                grants[2 * ng + 1] = (uint8_t)(left > CR_MAX ? CR_MAX : left);
                ng++;
            }
    if (!taken && !ng)
        Py_RETURN_NONE;
    int64_t n = taken > ng ? taken : ng;
    PyObject *b = tx_dgram_new(SHIM_BYTES + n * MP_BYTES);
    if (!b)
        return NULL;
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(b), *mp = p + SHIM_BYTES;
    uint64_t seq = s->next_seq;
    const uint64_t r = (uint64_t)((s->expected - 1) & 0xFF) << 40;
    int64_t at = 0;
    for (int t = 0; t < ntakes; t++) {
        tx_take(&s->q[take_vc[t]], take_vc[t], take_k[t], mp, at, r, seq, grants, ng);
        s->tx[take_vc[t]] -= take_k[t];
        mp += (Py_ssize_t)take_k[t] * MP_BYTES, at += take_k[t];
    }
    for (int64_t i = taken; i < n; i++, mp += MP_BYTES) {
        memcpy(mp, s->credit_mp, MP_BYTES);
        tx_stamp(mp, i, 1, r, seq, grants, ng);
    }
    for (int64_t i = 0; i < ng; i++) {
        s->pending[grants[2 * i]] -= grants[2 * i + 1];
        s->rxo[grants[2 * i]] += grants[2 * i + 1];
    }
    write_shim(s, p, FLAG_SEQ, s->peer_nonce, seq, s->expected);
    s->next_seq += n;
    if (ring_push(s, seq, n, b, now) < 0) {
        Py_DECREF(b);
        return NULL;
    }
    if (isinf(s->rtx_deadline))
        s->rtx_deadline = now + s->rto;
    s->counters[C_TX_MPS] += n;
    return b;
}

/* --- receive ------------------------------------------------------------------- */

static inline int nonces_ok(Core *s, const uint8_t *shim)
{
    if (s->state != ST_UP) {
        s->counters[C_RX_WHILE_RESETTING]++;
        return 0;
    }
    if (get_be32(shim + 8) != s->peer_nonce || get_be32(shim + 12) != s->my_nonce) {
        s->counters[C_STALE_NONCE]++;
        return 0;
    }
    return 1;
}

/* The peer's cumulative ack (the sequenced datagram's RSEQs are checked by the caller). */
static int process_ack(Core *s, uint64_t ack, double now)
{
    if (ack == NO_ACK)
        ack = 0;
    if (ack > s->next_seq) {
        s->counters[C_BAD_ACK]++;
        return 0;
    }
    if (ack < s->base) { /* overtaken by a later ack: old news, the datagram is still good */
        s->counters[C_STALE_ACK]++;
        return 1;
    }
    if (ack > s->base) {
        s->base = ack;
        double sample = -1.0;
        while (s->ring_len) {
            Inflight *e = &s->ring[s->ring_head];
            if (e->seq + (uint64_t)e->n > ack)
                break;
            if (e->sent >= 0)
                sample = now - e->sent;
            tx_dgram_done(e->dgram, SHIM_BYTES + (Py_ssize_t)s->max_mps * MP_BYTES);
            e->dgram = NULL;
            s->ring_head = (s->ring_head + 1) % s->ring_cap;
            s->ring_len--;
        }
        if (!s->ring_len)
            s->ring_head = 0;
        if (sample >= 0)
            rtt_sample(s, sample);
        s->rtx_count = 0;
        s->rtx_deadline = s->ring_len ? now + s->rto : INFINITY;
    }
    return 1;
}

static PyObject *recs_array(PyObject *buf, Py_ssize_t count, Py_ssize_t offset)
{
    return PyObject_CallFunction(np_frombuffer, "OOnn", buf, mp_dtype, count, offset);
}

/* What accept_run needs of a run of micropackets, found in one pass over their control
 * words: the credits granted per VC, and per VC its data micropackets (not CREDIT): how
 * many, the first and the last; plain: none is a HEADER or an ADMIN or has the tail bit
 * (the reassembly need not look for a Message's end in them: ra_feed). */
typedef struct {
    int64_t credit[NUM_VCS];
    Py_ssize_t count[NUM_VCS], first[NUM_VCS], last[NUM_VCS];
    int plain;
} RunScan;

/* One micropacket's control word c (index i) into r; *counts holds the counts so far as
 * four 16-bit fields (a datagram has at most MAX_DGRAM_MPS micropackets), kept in a
 * register by the caller's loop: a count in memory made each micropacket wait for the
 * previous one's store. */
static inline void run_scan_add(RunScan *r, uint64_t *counts, uint64_t c, Py_ssize_t i)
{
    if (c & (0x3Full << 48)) /* credits (VCR/CR) ride only on the first micropackets */
        r->credit[(c >> 54) & 3] += (c >> 48) & 0x3F;
    if (((c >> 58) & 0xF) != T_CREDIT) {
        const int vc = (int)(c >> 62);
        if (!((*counts >> (16 * vc)) & 0xFFFF))
            r->first[vc] = i;
        r->last[vc] = i;
        *counts += 1ull << (16 * vc);
    }
}

static inline void run_scan_done(RunScan *r, uint64_t counts)
{
    for (int v = 0; v < NUM_VCS; v++)
        r->count[v] = (Py_ssize_t)((counts >> (16 * v)) & 0xFFFF);
}

static int accept_run(Core *s, PyObject *dgram, const uint8_t *shim, const uint8_t *mps, Py_ssize_t n,
                      const uint16_t *b0_run, const RunScan *scan, double now);


#ifdef GSN_CLMUL
/* receive_sequenced's pass over n8 (a multiple of 8) control words, eight per step by
 * AVX-512 (with crc_vec): their OR (*a), AND (*b), the OR of each one XOR the RSEQ and
 * TSEQ it should carry (*seqs: micropacket i, TSEQ seq + i), and the OR of 1 << TYPE
 * (*types); the scalar loop's values for the same micropackets (the scalar pass was ~60%
 * of receive_raw's samples on a receiving gsnd, perf). */
__attribute__((target("avx512f,avx512bw"))) static void ctrl_scan_avx512(const uint8_t *mps, Py_ssize_t n8,
                                                                          uint64_t seq, uint64_t rseq, uint64_t *a,
                                                                          uint64_t *b, uint64_t *seqs, unsigned *types)
{
    const __m512i one = _mm512_set1_epi64(1), nib = _mm512_set1_epi64(0xF), low8 = _mm512_set1_epi64(0xFF);
    const __m512i r40 = _mm512_set1_epi64((long long)(rseq << 40)), eight = _mm512_set1_epi64(8);
    __m512i va = _mm512_setzero_si512(), vb = _mm512_set1_epi64(-1), vs = _mm512_setzero_si512();
    __m512i vt = _mm512_setzero_si512();
    __m512i t = _mm512_add_epi64(_mm512_set1_epi64((long long)seq), _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7));
    for (Py_ssize_t i = 0; i < n8; i += 8, mps += 8 * MP_BYTES) {
        const __m512i c = ctrl8_avx512(mps);
        vt = _mm512_or_si512(vt, _mm512_sllv_epi64(one, _mm512_and_si512(_mm512_srli_epi64(c, 58), nib)));
        const __m512i want = _mm512_or_si512(r40, _mm512_slli_epi64(_mm512_and_si512(t, low8), 32));
        vs = _mm512_ternarylogic_epi64(vs, c, want, 0xF6); /* vs | (c ^ want) */
        va = _mm512_or_si512(va, c), vb = _mm512_and_si512(vb, c);
        t = _mm512_add_epi64(t, eight);
    }
    *a = (uint64_t)_mm512_reduce_or_epi64(va), *b = (uint64_t)_mm512_reduce_and_epi64(vb);
    *seqs = (uint64_t)_mm512_reduce_or_epi64(vs), *types = (unsigned)_mm512_reduce_or_epi64(vt);
}
#endif

/* dgram: the object holding shim.. (numpy views of it go up), or NULL: copies go up. */
static int receive_sequenced(Core *s, PyObject *dgram, const uint8_t *shim, const uint8_t *mps, Py_ssize_t n,
                             double now)
{
    if (!nonces_ok(s, shim))
        return 0;
    uint64_t seq = load_be64(shim + 16), ack = load_be64(shim + 24);
    /* TYPE, TSEQ and RSEQ of every micropacket in one pass; the reasons in this order,
       RSEQ's after process_ack's own check of the ack */
    const uint64_t ack0 = ack == NO_ACK ? 0 : ack, rseq = (ack0 - 1) & 0xFF;
    RunScan scan = {{0}}; /* accept_run's pass, in this one: used when the whole datagram is new */
    uint64_t counts = 0, seqs = 0; /* seqs: the RSEQ and TSEQ bits that differ from the expected */
    uint64_t tails = 0;            /* the tail bits */
    unsigned types = 0;            /* bit t: a micropacket of TYPE t */
    Py_ssize_t i = 0;
#ifdef GSN_CLMUL
    if (crc_vec && n >= 8) { /* every whole group at once, kept when they make one run (else the loop below redoes them) */
        const Py_ssize_t n8 = n & ~(Py_ssize_t)7;
        uint64_t va, vb, vseqs;
        unsigned vtypes;
        ctrl_scan_avx512(mps, n8, seq, rseq, &va, &vb, &vseqs, &vtypes);
        if (!((va ^ vb) >> 62) && !(va & (0x3Full << 48)) && !(vtypes & (1u << T_CREDIT))) {
            const int vc = (int)(va >> 62);
            scan.first[vc] = 0, scan.last[vc] = n8 - 1;
            counts = (uint64_t)n8 << (16 * vc);
            seqs = vseqs, tails = va & (1ull << 57), types = vtypes;
            i = n8;
        }
    }
#endif
    /* eight at a time without a branch per micropacket: a group of one VC, no CREDIT
       micropacket and no credits (the common case) is one run_scan_add of eight; any other
       group takes run_scan_add per micropacket */
    for (; i + 8 <= n; i += 8) {
        uint64_t a = 0, b = ~0ull;
        unsigned t = 0;
        for (int k = 0; k < 8; k++) {
            const uint64_t c = load_be64(mps + (i + k) * MP_BYTES + MP_DATA);
            t |= 1u << ((c >> 58) & 0xF);
            seqs |= c ^ ((rseq << 40) | (((seq + (uint64_t)(i + k)) & 0xFF) << 32));
            a |= c, b &= c;
        }
        types |= t;
        tails |= a & (1ull << 57);
        if (!((a ^ b) >> 62) && !(a & (0x3Full << 48)) && !(t & (1u << T_CREDIT))) {
            const int vc = (int)(a >> 62);
            if (!((counts >> (16 * vc)) & 0xFFFF))
                scan.first[vc] = i;
            scan.last[vc] = i + 7;
            counts += 8ull << (16 * vc);
        } else {
            for (int k = 0; k < 8; k++)
                run_scan_add(&scan, &counts, load_be64(mps + (i + k) * MP_BYTES + MP_DATA), i + k);
        }
    }
    for (; i < n; i++) {
        const uint64_t c = load_be64(mps + i * MP_BYTES + MP_DATA);
        types |= 1u << ((c >> 58) & 0xF);
        seqs |= c ^ ((rseq << 40) | (((seq + (uint64_t)i) & 0xFF) << 32));
        tails |= c & (1ull << 57);
        run_scan_add(&scan, &counts, c, i);
    }
    run_scan_done(&scan, counts);
    scan.plain = !(tails & (1ull << 57)) && !(types & ((1u << T_HEADER) | (1u << T_ADMIN)));
    const int bad_type = (types & ~(((2u << T_CREDIT) - 1) & ~((1u << T_DATA) - 1))) != 0;
    const int bad_tseq = (seqs & (0xFFull << 32)) != 0, bad_rseq = (seqs & (0xFFull << 40)) != 0;
    if (bad_type || bad_tseq) {
        s->counters[bad_type ? C_UNSEQ_IN_SEQ : C_TSEQ_MISMATCH]++;
        return 0;
    }
    if (bad_rseq && ack0 <= s->next_seq) {
        s->counters[C_RSEQ_MISMATCH]++;
        return 0;
    }
    if (!process_ack(s, ack, now))
        return 0;
    s->last_heard = now;
    if (seq > s->expected)
        return ooo_add(s, shim, mps, n, seq, now);
    uint64_t start = s->expected - seq;
    if (start >= (uint64_t)n) {
        s->counters[C_DUPLICATE]++;
        want_ack(s, now, 1);
        s->sack_due = s->ooo_len > 0;
        return 0;
    }
    int holes = s->ooo_len > 0;
    const uint16_t *b0 = !dgram && s->dp ? s->dp->b0 + start : NULL;
    if (accept_run(s, dgram, shim, mps + start * MP_BYTES, n - (Py_ssize_t)start, b0, start ? NULL : &scan, now) < 0)
        return -1;
    Py_ssize_t done = 0; /* the hole is filled: what waited behind it, in sequence order */
    for (; done < s->ooo_len && s->ooo[done].seq <= s->expected; done++) {
        OooEntry e = s->ooo[done];
        s->ooo[done].b = NULL;
        s->buffered_mps -= e.n;
        uint64_t skip = s->expected - e.seq;
        int r = 0;
        if (skip >= (uint64_t)e.n) {
            s->counters[C_DUPLICATE]++;
        } else {
            const uint8_t *p = (const uint8_t *)PyBytes_AS_STRING(e.b);
            s->counters[C_OOO_DELIVERED] += e.n - skip;
            r = accept_run(s, e.b, p, p + SHIM_BYTES + skip * MP_BYTES, e.n - (Py_ssize_t)skip, NULL, NULL, now);
        }
        Py_DECREF(e.b);
        if (r < 0) {
            ooo_drop_front(s, done + 1);
            return -1;
        }
    }
    ooo_drop_front(s, done);
    if (holes) /* a hole filled (or some of it): the sender learns it at once */
        want_ack(s, now, 1);
    s->sack_due = s->ooo_len > 0;
    return 0;
}

/* Take n in-sequence micropackets mps[0:n] (dgram/shim: the datagram holding them, see
 * receive_sequenced; b0: their block CRCs from rx_pump, or NULL): credits granted to
 * us, then each VC's. */
static int accept_run(Core *s, PyObject *dgram, const uint8_t *shim, const uint8_t *mps, Py_ssize_t n,
                      const uint16_t *b0_run, const RunScan *scan, double now)
{
    s->expected += n;
    s->unacked_rx += n;
    s->counters[C_RX_MPS] += n;
    want_ack(s, now, s->unacked_rx >= s->window / 4);
    RunScan own = {{0}};
    if (!scan) { /* the caller's pass covered other micropackets too */
        uint64_t counts = 0;
        for (Py_ssize_t i = 0; i < n; i++)
            run_scan_add(&own, &counts, load_be64(mps + i * MP_BYTES + MP_DATA), i);
        run_scan_done(&own, counts);
        scan = &own;
    }
    const Py_ssize_t *count = scan->count, *first = scan->first, *last = scan->last;
    for (int v = 0; v < NUM_VCS; v++)
        s->tx[v] += scan->credit[v];
    for (int vc = 0; vc < NUM_VCS; vc++) {
        Py_ssize_t k = count[vc];
        if (!k)
            continue;
        Py_ssize_t acc = k < s->rxo[vc] ? k : (Py_ssize_t)s->rxo[vc];
        s->rxo[vc] -= acc;
        s->used[vc] += acc;
        if (acc < k)
            s->counters[C_CV0 + vc] += k - acc;
        if (!acc)
            continue;
        PyObject *arr;
        int contiguous = last[vc] - first[vc] + 1 == k || acc == 1;
        if (s->sw && !PyList_GET_SIZE(s->events)) { /* a switch port: forwarded in C */
            if (sw_take(s, vc, mps, first[vc], acc, contiguous, now) < 0)
                return -1;
            continue;
        }
        if (s->dp) { /* the data plane reassembles every VC here, not in Python */
            /* b0 (per micropacket, from the LCRC check) is there when the datagram came
               through rx_pump */
            const uint16_t *b0 = b0_run;
            const uint8_t *run = mps + first[vc] * MP_BYTES;
            if (!contiguous) {
                run = dp_gather(s->dp, mps, b0, first[vc], vc, acc);
                b0 = b0 ? s->dp->gather_b0 : NULL;
            } else if (b0) {
                b0 += first[vc];
            }
            if (dp_take(s, vc, run, b0, acc, scan->plain) < 0)
                return -1;
            continue;
        }
        /* the accepted ones are contiguous in the datagram: a view, like Link */
        if (contiguous && dgram) {
            arr = recs_array(dgram, acc, (mps - (const uint8_t *)shim) + first[vc] * MP_BYTES);
        } else if (contiguous) {
            PyObject *b = PyBytes_FromStringAndSize((const char *)(mps + first[vc] * MP_BYTES), acc * MP_BYTES);
            if (!b)
                return -1;
            arr = recs_array(b, acc, 0);
            Py_DECREF(b);
        } else {
            PyObject *b = PyBytes_FromStringAndSize(NULL, acc * MP_BYTES);
            if (!b)
                return -1;
            uint8_t *q = (uint8_t *)PyBytes_AS_STRING(b);
            for (Py_ssize_t i = first[vc], got = 0; got < acc; i++) {
                const uint8_t *m = mps + i * MP_BYTES;
                uint64_t c = load_be64(m + MP_DATA);
                if ((int)(c >> 62) == vc && ((c >> 58) & 0xF) != T_CREDIT) {
                    memcpy(q + got * MP_BYTES, m, MP_BYTES);
                    got++;
                }
            }
            arr = recs_array(b, acc, 0);
            Py_DECREF(b);
        }
        if (!arr)
            return -1;
        if (add_event(s, PyObject_CallFunction(ev_received, "iN", vc, arr)) < 0)
            return -1;
    }
    return 0;
}

static int on_reset(Core *s, uint32_t their, int answer, double now)
{
    if (s->state == ST_UP && their == s->peer_nonce) {
        s->counters[C_DUP_RESET]++;
    } else {
        if (s->state == ST_UP) {
            if (add_event(s, PyObject_CallFunction(ev_down, "s", "peer_reset")) < 0)
                return -1;
            s->counters[C_DOWN_PEER_RESET]++;
        }
        clear_state(s);
        if (go_up(s, their, now) < 0)
            return -1;
    }
    PyObject *d = control_datagram(s, answer, their);
    if (!d)
        return -1;
    int r = PyList_Append(s->control_out, d);
    Py_DECREF(d);
    return r;
}

/* kept[i]: indices of the micropackets with a good LCRC. */
static int receive_control(Core *s, const uint8_t *shim, const uint8_t *mps, const uint16_t *kept, Py_ssize_t n,
                           double now)
{
    for (Py_ssize_t i = 0; i < n; i++)
        if (((load_be64(mps + kept[i] * MP_BYTES + MP_DATA) >> 58) & 0xF) > T_LAST) {
            s->counters[C_BAD_CONTROL_TYPE]++;
            return 0;
        }
    uint32_t src = get_be32(shim + 8), dst = get_be32(shim + 12);
    uint64_t ack = load_be64(shim + 24);
    for (Py_ssize_t i = 0; i < n; i++) {
        int kind = (int)(load_be64(mps + kept[i] * MP_BYTES + MP_DATA) >> 58) & 0xF;
        if (kind == T_RESET || kind == T_INIT) {
            s->counters[kind == T_RESET ? C_RX_RESET : C_RX_INIT]++;
            if (on_reset(s, src, kind == T_RESET ? T_RESET_ACK : T_INIT_ACK, now) < 0)
                return -1;
        } else if (kind == T_RESET_ACK || kind == T_INIT_ACK) {
            if (s->state == ST_RESETTING && dst == s->my_nonce) {
                if (go_up(s, src, now) < 0)
                    return -1;
            } else if (s->state == ST_UP && src == s->peer_nonce && dst == s->my_nonce) {
                s->counters[C_DUP_RESET_ACK]++;
            } else {
                s->counters[C_STALE_RESET_ACK]++;
            }
        } else if (kind == T_NULL) {
            if (nonces_ok(s, shim) && process_ack(s, ack, now)) {
                s->last_heard = now;
                sack_process(s, ack == NO_ACK ? 0 : ack, mps + kept[i] * MP_BYTES);
            }
        } else {
            s->counters[C_SEQ_IN_CONTROL]++;
        }
    }
    return 0;
}

/* One datagram p[0:len]; dgram: its Python object (or NULL, see receive_sequenced). */
static int receive_raw(Core *s, const uint8_t *p, Py_ssize_t len, PyObject *dgram, double now)
{
    if (len < SHIM_BYTES) {
        s->counters[C_BAD_SHIM_SHIM]++;
        return 0;
    }
    if (((p[0] << 8) | p[1]) != SHIM_MAGIC) {
        s->counters[C_BAD_SHIM_MAGIC]++;
        return 0;
    }
    if (p[2] != SHIM_VERSION) {
        s->counters[C_BAD_SHIM_VERSION]++;
        return 0;
    }
    if (p[3] & ~FLAG_SEQ) {
        s->counters[C_BAD_SHIM_FLAGS]++;
        return 0;
    }
    Py_ssize_t body = len - SHIM_BYTES, n = body / MP_BYTES;
    if (body % MP_BYTES || n == 0 || n > MAX_DGRAM_MPS) {
        s->counters[C_BAD_SHIM_MPS]++;
        return 0;
    }
    if (get_be32(p + 4) != s->cable_id) {
        s->counters[C_WRONG_CABLE]++;
        return 0;
    }
    const uint8_t *mps = p + SHIM_BYTES;
    int sequenced = p[3] & FLAG_SEQ;
    uint16_t kept[MAX_DGRAM_MPS], bs[MAX_DGRAM_MPS];
    uint8_t ok[MAX_DGRAM_MPS];
    Py_ssize_t nkept = 0, prefix = -1;
    uint16_t *b0 = s->dp && !dgram ? s->dp->b0 : bs; /* kept for the ECRC check (the data plane's VC) */
    Py_ssize_t bad = lcrc_scan(mps, n, b0, ok);       /* every micropacket's LCRC on its own */
    if (bad || !sequenced)
        for (Py_ssize_t i = 0; i < n; i++) {
            if (ok[i])
                kept[nkept++] = (uint16_t)i;
            else if (prefix < 0)
                prefix = i;
        }
    if (bad) {
        s->counters[C_LCRC_ERROR] += bad;
        Py_ssize_t keep = sequenced ? prefix : nkept;
        s->counters[C_DROPPED_AFTER_LCRC] += n - bad - keep;
        if (!keep)
            return 0;
        if (sequenced)
            n = keep;
        else
            nkept = keep;
    }
    if (sequenced)
        return receive_sequenced(s, dgram, p, mps, n, now);
    return receive_control(s, p, mps, kept, nkept, now);
}

static int do_receive(Core *s, PyObject *dgram, double now)
{
    Py_buffer v;
    if (PyObject_GetBuffer(dgram, &v, PyBUF_SIMPLE) < 0)
        return -1;
    int ret = receive_raw(s, v.buf, v.len, dgram, now);
    PyBuffer_Release(&v);
    return ret;
}

/* --- Python type ---------------------------------------------------------------- */

static void Core_dealloc(Core *s)
{
    for (int v = 0; v < NUM_VCS; v++) {
        q_clear(&s->q[v]);
        PyMem_Free(s->q[v].c);
    }
    ring_clear(s);
    PyMem_Free(s->ring);
    ooo_clear(s);
    PyMem_Free(s->ooo);
    dp_free(s->dp);
    s->dp = NULL;
    Py_CLEAR(s->rng);
    Py_CLEAR(s->events);
    Py_CLEAR(s->control_out);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static int Core_init(Core *s, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"cable_id", "now", "buffers", "timers", "rng", "window", "max_mps", NULL};
    unsigned long cable;
    double now, t[7];
    PyObject *buffers, *rng;
    long rtx_limit;
    long long window;
    int max_mps;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "kdO(dddddldd)OLi:Core", kwlist, &cable, &now, &buffers, &t[0],
                                     &t[1], &t[2], &t[3], &t[4], &rtx_limit, &t[5], &t[6], &rng, &window, &max_mps))
        return -1;
    /* timers tuple order: ack_delay, rtx_timeout, reset_interval, keepalive, dead_interval, rtx_limit,
       rtx_timeout_max, rtx_timeout_min */
    if (s->ready) {
        PyErr_SetString(PyExc_RuntimeError, "Core already initialised");
        return -1;
    }
    if (!ev_up) {
        PyErr_SetString(PyExc_RuntimeError, "daemons._link.setup() was not called");
        return -1;
    }
    if (cable > 0xFFFFFFFFul) {
        PyErr_SetString(PyExc_ValueError, "cable_id must fit in 32 bits");
        return -1;
    }
    if (max_mps < 1 || max_mps > MAX_DGRAM_MPS) {
        PyErr_Format(PyExc_ValueError, "max_mps must be 1..%d, not %d", MAX_DGRAM_MPS, max_mps);
        return -1;
    }
    PyObject *seq = PySequence_Fast(buffers, "buffers must be a sequence of 4 integers");
    if (!seq)
        return -1;
    if (PySequence_Fast_GET_SIZE(seq) != NUM_VCS) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "buffers must hold 4 integers");
        return -1;
    }
    for (int v = 0; v < NUM_VCS; v++) {
        long long b = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, v));
        if (b == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        s->buffers[v] = b;
    }
    Py_DECREF(seq);
    s->cable_id = (uint32_t)cable;
    s->max_mps = max_mps;
    s->window = window;
    s->t_ack = t[0], s->t_rtx = t[1], s->t_reset = t[2], s->t_keepalive = t[3], s->t_dead = t[4];
    s->t_rtx_max = t[5], s->t_rtx_min = t[6];
    s->rtx_limit = rtx_limit;
    Py_INCREF(rng);
    s->rng = rng;
    if (!(s->events = PyList_New(0)) || !(s->control_out = PyList_New(0)))
        return -1;
    s->state = ST_RESETTING;
    s->peer_nonce = 0;
    s->last_heard = now;
    s->last_sent = -1e9;
    s->rr = 0;
    memset(s->credit_mp, 0, MP_BYTES);
    uint64_t ctrl = (uint64_t)T_CREDIT << 58;
    store_be64(s->credit_mp + MP_DATA, ctrl | lcrc_of(s->credit_mp, ctrl));
    if (start_reset(s, now) < 0)
        return -1;
    s->ready = 1;
    return 0;
}

#define READY(s, ret)                                                              \
    if (!(s)->ready) {                                                             \
        PyErr_SetString(PyExc_RuntimeError, "Core.__init__ was not called");       \
        return ret;                                                                \
    }

static PyObject *Core_receive(Core *s, PyObject *const *args, Py_ssize_t nargs)
{
    READY(s, NULL);
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "receive(datagram, now)");
        return NULL;
    }
    double now = PyFloat_AsDouble(args[1]);
    if (now == -1.0 && PyErr_Occurred())
        return NULL;
    if (do_receive(s, args[0], now) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Core_datagrams(Core *s, PyObject *arg)
{
    READY(s, NULL);
    double now = PyFloat_AsDouble(arg);
    if (now == -1.0 && PyErr_Occurred())
        return NULL;
    PyObject *out = s->control_out;
    if (!(s->control_out = PyList_New(0))) {
        s->control_out = out;
        return NULL;
    }
    if (s->state == ST_RESETTING) {
        if (now >= s->reset_due) {
            PyObject *d = control_datagram(s, T_RESET, 0);
            if (!d || PyList_Append(out, d) < 0) {
                Py_XDECREF(d);
                goto err;
            }
            Py_DECREF(d);
            s->reset_due = now + s->t_reset;
            s->counters[C_TX_RESET]++;
        }
    } else {
        int ack_due = now >= s->ack_due; /* false when unset (INFINITY) */
        if (!any_pending(s))
            s->credit_due = INFINITY;
        else if (isinf(s->credit_due))
            s->credit_due = now + s->t_ack;
        int credit_due = !isinf(s->credit_due) && (ack_due || now >= s->credit_due);
        if (resend(s, out, RESEND_LOST) < 0) /* holes the SACKs revealed */
            goto err;
        for (;;) {
            PyObject *d = build_batch(s, now, credit_due && any_pending(s));
            if (!d)
                goto err;
            if (d == Py_None) {
                Py_DECREF(d);
                break;
            }
            int r = PyList_Append(out, d);
            Py_DECREF(d);
            if (r < 0)
                goto err;
            ack_due = 0;
        }
        if (!any_pending(s))
            s->credit_due = INFINITY;
        int sent = PyList_GET_SIZE(out) > 0;
        if (sent)
            acked_out(s);
        if ((s->sack_due && s->ooo_len) || (!sent && (ack_due || now >= s->last_sent + s->t_keepalive))) {
            PyObject *d = control_datagram(s, T_NULL, s->peer_nonce);
            if (!d || PyList_Append(out, d) < 0) {
                Py_XDECREF(d);
                goto err;
            }
            Py_DECREF(d);
            acked_out(s);
        }
        s->sack_due = 0;
    }
    if (PyList_GET_SIZE(out))
        s->last_sent = now;
    return out;
err:
    Py_DECREF(out);
    return NULL;
}

static PyObject *Core_handle_timer(Core *s, PyObject *arg)
{
    READY(s, NULL);
    double now = PyFloat_AsDouble(arg);
    if (now == -1.0 && PyErr_Occurred())
        return NULL;
    if (s->state == ST_RESETTING)
        return PyList_New(0);
    if (now >= s->last_heard + s->t_dead) {
        if (fail(s, C_DOWN_SILENT, "silent", now) < 0)
            return NULL;
        return PyList_New(0);
    }
    if (isinf(s->rtx_deadline) || now < s->rtx_deadline)
        return PyList_New(0);
    if (++s->rtx_count > s->rtx_limit) {
        if (fail(s, C_DOWN_RTX_LIMIT, "rtx_limit", now) < 0)
            return NULL;
        return PyList_New(0);
    }
    /* back off: each timeout without progress doubles the next, up to t_rtx_max (a
       late peer is neither flooded with the window nor reset in 9 x t_rtx) */
    /* the first timeout came after the adaptive RTO; more without progress mean a
       late or gone peer: they back off from t_rtx as before */
    double backoff = s->t_rtx * (double)(1LL << (s->rtx_count < 30 ? s->rtx_count : 30));
    if (backoff > s->t_rtx_max)
        backoff = s->t_rtx_max;
    s->rtx_deadline = now + (backoff > s->rto ? backoff : s->rto);
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    /* the first timeout resends the oldest datagram the peer lacks (a late ack, a loaded
       host, costs one datagram); more resend all it holds neither in sequence nor out of order */
    if (resend(s, out, s->rtx_count == 1 ? RESEND_HEAD : RESEND_UNSACKED) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    if (PyList_GET_SIZE(out)) {
        acked_out(s);
        s->last_sent = now;
    }
    return out;
}

static PyObject *Core_timer(Core *s, PyObject *Py_UNUSED(ignored))
{
    READY(s, NULL);
    if (s->state == ST_RESETTING)
        return PyFloat_FromDouble(s->reset_due);
    double t = s->last_sent + s->t_keepalive, d = s->last_heard + s->t_dead;
    if (d < t)
        t = d;
    if (s->ack_due < t)
        t = s->ack_due;
    if (s->credit_due < t)
        t = s->credit_due;
    if (s->rtx_deadline < t)
        t = s->rtx_deadline;
    return PyFloat_FromDouble(t);
}

static PyObject *Core_events(Core *s, PyObject *Py_UNUSED(ignored))
{
    READY(s, NULL);
    PyObject *ev = s->events, *fresh = PyList_New(0);
    if (!fresh)
        return NULL;
    s->events = fresh;
    return ev;
}

static int vc_arg(PyObject *o, int *vc)
{
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0 || v >= NUM_VCS) {
        PyErr_Format(PyExc_IndexError, "VC %ld out of range", v);
        return -1;
    }
    *vc = (int)v;
    return 0;
}

static PyObject *Core_enqueue(Core *s, PyObject *const *args, Py_ssize_t nargs)
{
    READY(s, NULL);
    int vc;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "enqueue(vc, recs)");
        return NULL;
    }
    if (vc_arg(args[0], &vc) < 0 || q_push(&s->q[vc], args[1]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Core_queued(Core *s, PyObject *arg)
{
    READY(s, NULL);
    int vc;
    if (vc_arg(arg, &vc) < 0)
        return NULL;
    return PyLong_FromSsize_t(s->q[vc].count);
}

static int vc_n(PyObject *const *args, Py_ssize_t nargs, int *vc, long long *n)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "expected (vc, n)");
        return -1;
    }
    if (vc_arg(args[0], vc) < 0)
        return -1;
    *n = PyLong_AsLongLong(args[1]);
    return (*n == -1 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *Core_release(Core *s, PyObject *const *args, Py_ssize_t nargs)
{
    READY(s, NULL);
    int vc;
    long long n;
    if (vc_n(args, nargs, &vc, &n) < 0)
        return NULL;
    if (n > s->used[vc])
        n = s->used[vc];
    s->used[vc] -= n;
    s->pending[vc] += n;
    Py_RETURN_NONE;
}

static PyObject *Core_reclaim(Core *s, PyObject *const *args, Py_ssize_t nargs)
{
    READY(s, NULL);
    int vc;
    long long n;
    if (vc_n(args, nargs, &vc, &n) < 0)
        return NULL;
    if (n > s->pending[vc])
        n = s->pending[vc];
    if (n < 0)
        n = 0;
    s->pending[vc] -= n;
    s->used[vc] += n;
    return PyLong_FromLongLong(n);
}

static PyObject *list4(const int64_t *a)
{
    return Py_BuildValue("[LLLL]", (long long)a[0], (long long)a[1], (long long)a[2], (long long)a[3]);
}

static PyObject *Core_ledger_get(Core *s, PyObject *Py_UNUSED(ignored))
{
    READY(s, NULL);
    return Py_BuildValue("NNNNN", list4(s->tx), list4(s->used), list4(s->pending), list4(s->rxo), list4(s->buffers));
}

/* Test hook: overwrite one ledger entry (what "link.ledger.tx[1] += 100" does to Link). */
static PyObject *Core_ledger_set(Core *s, PyObject *args)
{
    READY(s, NULL);
    const char *name;
    int vc;
    long long value;
    if (!PyArg_ParseTuple(args, "siL", &name, &vc, &value))
        return NULL;
    if (vc < 0 || vc >= NUM_VCS)
        return PyErr_Format(PyExc_IndexError, "VC %d out of range", vc);
    int64_t *a = !strcmp(name, "tx") ? s->tx : !strcmp(name, "used") ? s->used
               : !strcmp(name, "pending") ? s->pending : !strcmp(name, "rx_outstanding") ? s->rxo : NULL;
    if (!a)
        return PyErr_Format(PyExc_KeyError, "%s", name);
    a[vc] = value;
    Py_RETURN_NONE;
}

static PyObject *Core_counter_dict(Core *s, PyObject *Py_UNUSED(ignored))
{
    READY(s, NULL);
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    for (int i = 0; i < N_COUNTERS; i++) {
        if (!s->counters[i])
            continue;
        PyObject *v = PyLong_FromUnsignedLongLong(s->counters[i]);
        if (!v || PyDict_SetItemString(d, counter_names[i], v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(v);
    }
    return d;
}

static PyObject *Core_counter(Core *s, PyObject *arg)
{
    READY(s, NULL);
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name)
        return NULL;
    for (int i = 0; i < N_COUNTERS; i++)
        if (!strcmp(name, counter_names[i]))
            return PyLong_FromUnsignedLongLong(s->counters[i]);
    return PyLong_FromLong(0);
}

static PyObject *Core_control_datagram(Core *s, PyObject *args)
{
    READY(s, NULL);
    int kind;
    PyObject *dst = Py_None;
    if (!PyArg_ParseTuple(args, "i|O", &kind, &dst))
        return NULL;
    if (kind < 0 || kind > 15)
        return PyErr_Format(PyExc_ValueError, "TYPE %d", kind);
    uint32_t d = s->peer_nonce;
    if (dst != Py_None) {
        unsigned long v = PyLong_AsUnsignedLong(dst);
        if (v == (unsigned long)-1 && PyErr_Occurred())
            return NULL;
        d = (uint32_t)v;
    }
    return control_datagram(s, kind, d);
}

static PyObject *Core_go_up(Core *s, PyObject *args)
{
    READY(s, NULL);
    unsigned long peer;
    double now;
    if (!PyArg_ParseTuple(args, "kd", &peer, &now))
        return NULL;
    if (go_up(s, (uint32_t)peer, now) < 0)
        return NULL;
    Py_RETURN_NONE;
}

#include "_cableauth.h"
#include "_pump.h"
#include "_switchloop.h"
#include "_ulpsend.h"

static PyObject *Core_get_up(Core *s, void *c) { return PyBool_FromLong(s->ready && s->state == ST_UP); }
static PyObject *Core_get_state_code(Core *s, void *c) { return PyLong_FromLong(s->state); }
static PyObject *Core_get_my_nonce(Core *s, void *c) { return PyLong_FromUnsignedLong(s->my_nonce); }
static PyObject *Core_get_peer_nonce(Core *s, void *c) { return PyLong_FromUnsignedLong(s->peer_nonce); }
static PyObject *Core_get_expected(Core *s, void *c) { return PyLong_FromUnsignedLongLong(s->expected); }
static PyObject *Core_get_next_seq(Core *s, void *c) { return PyLong_FromUnsignedLongLong(s->next_seq); }
static PyObject *Core_get_base(Core *s, void *c) { return PyLong_FromUnsignedLongLong(s->base); }
static PyObject *Core_get_cable_id(Core *s, void *c) { return PyLong_FromUnsignedLong(s->cable_id); }
static PyObject *Core_get_max_mps(Core *s, void *c) { return PyLong_FromLong(s->max_mps); }
static int Core_set_max_mps(Core *s, PyObject *v, void *c)
{
    if (!v) {
        PyErr_SetString(PyExc_AttributeError, "max_mps cannot be deleted");
        return -1;
    }
    long n = PyLong_AsLong(v);
    if (n == -1 && PyErr_Occurred())
        return -1;
    if (n < 1 || n > MAX_DGRAM_MPS) {
        PyErr_Format(PyExc_ValueError, "max_mps must be 1..%d, not %ld", MAX_DGRAM_MPS, n);
        return -1;
    }
    s->max_mps = (int)n;
    return 0;
}
static PyObject *Core_get_queued_all(Core *s, void *c)
{
    return Py_BuildValue("[nnnn]", s->q[0].count, s->q[1].count, s->q[2].count, s->q[3].count);
}

static PyGetSetDef Core_getset[] = {
    {"up", (getter)Core_get_up, NULL, "the link is up", NULL},
    {"_state_code", (getter)Core_get_state_code, NULL, NULL, NULL},
    {"my_nonce", (getter)Core_get_my_nonce, NULL, NULL, NULL},
    {"peer_nonce", (getter)Core_get_peer_nonce, NULL, NULL, NULL},
    {"expected", (getter)Core_get_expected, NULL, "wide TSEQ we accept next", NULL},
    {"next_seq", (getter)Core_get_next_seq, NULL, "wide TSEQ of the next micropacket we sequence", NULL},
    {"base", (getter)Core_get_base, NULL, "oldest unacknowledged", NULL},
    {"cable_id", (getter)Core_get_cable_id, NULL, NULL, NULL},
    {"max_mps", (getter)Core_get_max_mps, (setter)Core_set_max_mps, "micropackets per cable datagram", NULL},
    {"_queued_all", (getter)Core_get_queued_all, NULL, NULL, NULL},
    {"dp_vc", (getter)Core_get_dp_vc, NULL, "the VC the data plane reassembles (-1: not attached)", NULL},
    {NULL},
};

static PyMethodDef Core_methods[] = {
    {"receive", (PyCFunction)(void (*)(void))Core_receive, METH_FASTCALL, "receive(datagram, now)"},
    {"datagrams", (PyCFunction)Core_datagrams, METH_O, "datagrams(now) -> list of bytes to send now"},
    {"handle_timer", (PyCFunction)Core_handle_timer, METH_O, "handle_timer(now) -> retransmissions"},
    {"timer", (PyCFunction)Core_timer, METH_NOARGS, "the next time handle_timer must run"},
    {"events", (PyCFunction)Core_events, METH_NOARGS, "events since the last call"},
    {"enqueue", (PyCFunction)(void (*)(void))Core_enqueue, METH_FASTCALL, "enqueue(vc, recs)"},
    {"queued", (PyCFunction)Core_queued, METH_O, "queued(vc) -> micropackets waiting"},
    {"release", (PyCFunction)(void (*)(void))Core_release, METH_FASTCALL, "release(vc, n)"},
    {"reclaim", (PyCFunction)(void (*)(void))Core_reclaim, METH_FASTCALL, "reclaim(vc, n) -> int"},
    {"_ledger", (PyCFunction)Core_ledger_get, METH_NOARGS, "(tx, used, pending, rx_outstanding, buffers)"},
    {"_ledger_set", (PyCFunction)Core_ledger_set, METH_VARARGS, "test hook"},
    {"_counter_dict", (PyCFunction)Core_counter_dict, METH_NOARGS, "non-zero counters"},
    {"_counter", (PyCFunction)Core_counter, METH_O, "one counter"},
    {"_control_datagram", (PyCFunction)Core_control_datagram, METH_VARARGS, "(kind, dst_nonce=None)"},
    {"_go_up", (PyCFunction)Core_go_up, METH_VARARGS, "test hook: (peer_nonce, now)"},
    PUMP_METHODS
    ULPSEND_METHODS
    CABLEAUTH_METHODS
    {NULL},
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "daemons._link.Core",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The compiled GSN link core (use daemons.link.clink.CLink).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Core_init,
    .tp_dealloc = (destructor)Core_dealloc,
    .tp_methods = Core_methods,
    .tp_getset = Core_getset,
};

static PyObject *mod_setup(PyObject *self, PyObject *args)
{
    PyObject *up, *down, *rec, *fb, *dt;
    if (!PyArg_ParseTuple(args, "OOOOO:setup", &up, &down, &rec, &fb, &dt))
        return NULL;
    Py_INCREF(up), Py_INCREF(down), Py_INCREF(rec), Py_INCREF(fb), Py_INCREF(dt);
    Py_XSETREF(ev_up, up);
    Py_XSETREF(ev_down, down);
    Py_XSETREF(ev_received, rec);
    Py_XSETREF(np_frombuffer, fb);
    Py_XSETREF(mp_dtype, dt);
    Py_RETURN_NONE;
}

static PyMethodDef mod_methods[] = {
    {"setup", mod_setup, METH_VARARGS, "setup(LinkUp, LinkDown, Received, numpy.frombuffer, MP_DTYPE)"},
    PUMP_MODULE_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "daemons._link",
    "The GSN link protocol compiled (daemons.link.link.Link is its oracle).", -1, mod_methods,
};

PyMODINIT_FUNC PyInit__link(void)
{
    init_tables();
    if (PyType_Ready(&CoreType) < 0 || PyType_Ready(&CableAuthCoreType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    if (PyModule_AddIntConstant(m, "OOO_MAX_MPS", OOO_MAX_MPS) < 0 ||
        PyModule_AddIntConstant(m, "OOO_MAX_DATAGRAMS", OOO_MAX_DATAGRAMS) < 0 ||
        PyModule_AddIntConstant(m, "SACK_RANGES", SACK_RANGES) < 0 ||
        PyModule_AddIntConstant(m, "SACK_DUPTHRESH", SACK_DUPTHRESH) < 0 ||
        PyModule_AddIntConstant(m, "UL_CLIENTS", UL_CLIENTS) < 0 ||
        PyModule_AddObject(m, "LOOP_TAP_RETRY_S", PyFloat_FromDouble(LOOP_TAP_RETRY_S)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&CoreType);
    if (PyModule_AddObject(m, "Core", (PyObject *)&CoreType) < 0) {
        Py_DECREF(&CoreType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyType_Ready(&PlaneType) < 0 || PyModule_AddObjectRef(m, "SwitchPlane", (PyObject *)&PlaneType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&CableAuthCoreType);
    if (PyModule_AddObject(m, "CableAuthCore", (PyObject *)&CableAuthCoreType) < 0) {
        Py_DECREF(&CableAuthCoreType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
