/* gsn-switch's data path compiled (issue 11): class SwitchPlane, on the switch's CLinks.
 *
 * What Switch._ingress + Switch.pump (daemons/switch/core.py) do in Python, per
 * micropacket batch, is done here, with the same results (the Python Switch without a
 * plane is the oracle: tests/unit/test_switchloop_differential.py):
 *   - a batch a port's link accepts goes straight to the compiled ingress walk
 *     (daemons._switchfwd.Forwarder, called through the C API): no Received event, no
 *     numpy array; the walk's segments are copied into the input queue of (port, VC);
 *   - pump(): input segments move to the output links' VC queues where the output VC
 *     is free or owned by that input (the wormhole) and the output queue is under the
 *     VC's buffer (the back-pressure); input credits are released as they leave;
 *   - rx(now, limit): per wake-up, one call receives every ready datagram of every port
 *     (recvmsg, UDP GRO split) into its link, forwards it and pumps.
 * Python keeps what is rare: ADMIN micropackets (on_admin), link up/down (on_events,
 * called after the datagram that raised them, so the order is the oracle's), the
 * source shuffle of pump() (the Switch's rng, so the permutation is the oracle's).
 * A batch the link accepts while link events wait unhandled goes up as a Received
 * event, as before, and comes back through ingress(): the order is kept.
 * Included by _link.c after Core's functions (_pump.h first: its socket headers).
 */
#ifndef GSN_SWITCHLOOP_H
#define GSN_SWITCHLOOP_H

#include "_udpio.h"
#include "_switchfwdapi.h"

static PyTypeObject CoreType; /* defined after this header, in _link.c */

#define SW_MAX_PORTS 64 /* targets are a bitmask of port indices (constants.SWITCH_PLANE_PORTS) */
#define SW_FREE (-1)    /* owner of an output VC: none */
#define SW_WALK_COUNTERS 16 /* room for the walk's counters (daemons._switchfwd.COUNTERS: 10) */

/* PROJECT CHOICE: a segment of at least this many bytes is forwarded out of the received
 * datagram's own buffer (a reference to it, no copy); a smaller one is copied, so that a
 * few micropackets never hold a whole receive buffer: what waits in the queues holds at
 * most 8x its own size (bench/ip_over_gsn.py (b): the copy was ~7% of the switch's CPU).
 * An eighth, not a quarter: a 9000-byte underlay's datagram carries up to 8,920 bytes of
 * micropackets, so with a quarter (16 KiB) every segment was copied there; an eighth
 * (8 KiB) forwards its full datagrams by reference (bench/switch_cost.py --mtu 9000: the
 * switch's CPU per 64 KiB Message ~4% lower, medians of 14 alternating runs). */
#define SW_REF_MIN_BYTES (DP_RECV_BYTES / 8)

typedef struct {
    uint8_t *buf;  /* n micropackets: in own, or a PyMem block when own is NULL */
    PyObject *own; /* the bytes object holding buf (a reference), or NULL */
    Py_ssize_t n;
    uint64_t targets; /* bitmask of port indices */
    int tail;
    int credit; /* index of the input port whose buffer it occupies, -1: none */
} SwSeg;

typedef struct {
    SwSeg *s;
    Py_ssize_t cap, start, end;
} SwQ;

struct SwitchPlane {
    PyObject_HEAD
    int n;                                  /* ports; index n is the Switch's Admin engine */
    PyObject *sw;                           /* the Switch */
    PyObject *fwd;                          /* sw.forwarder: a daemons._switchfwd.Forwarder */
    const SwitchFwdApi *api;                /* its walk, called directly */
    PyObject *on_admin, *on_events, *shuffle;
    PyObject *names;                        /* the walk's counter names */
    PyObject *sw_counters;                  /* Switch.counters */
    PyObject *s_tx_mps, *s_dropped, *s_aborted, *s_rx_dgrams, *s_foreign, *s_trunc, *s_gro;
    PyObject *s_tx_dgrams, *s_gso_sends, *s_gso_dgrams;
    PyObject *s_broadcast, *s_tree, *s_gso, *s_max_sent; /* attribute names, per batch */
    PyObject *numbers[SW_MAX_PORTS];        /* port numbers (int) */
    long nums[SW_MAX_PORTS];
    PyObject *pcounters[SW_MAX_PORTS];      /* Port.counters */
    Core *links[SW_MAX_PORTS];
    PyObject *current[SW_MAX_PORTS][NUM_VCS]; /* the open Message's targets: None or a tuple */
    SwQ inq[SW_MAX_PORTS + 1][NUM_VCS];
    int owner[SW_MAX_PORTS][NUM_VCS];       /* input index owning the output VC, SW_FREE */
    int64_t buffers[NUM_VCS];
    uint8_t abort_mp[NUM_VCS][MP_BYTES];    /* DATA, TAIL + ERROR */
    int fd[SW_MAX_PORTS];                   /* cables, -1: fed by Python */
    struct sockaddr_storage peer[SW_MAX_PORTS];
    PyObject *ccounters[SW_MAX_PORTS];      /* the cable transport's counters */
    PyObject *cables[SW_MAX_PORTS];         /* the cable transports (io/udp.py UdpTransport) */
    PyObject *rxobj;                        /* bytes of DP_RECV_BYTES: the receive buffer */
    uint8_t *rx;                            /* its bytes; a new one when segments hold the old */
    int64_t py_calls;                       /* calls into the Switch (events, ADMIN): run() returns */
};

/* --- helpers --------------------------------------------------------------------- */

static int cnt_add(PyObject *counter, PyObject *name, long long k)
{
    PyObject *old = PyDict_GetItemWithError(counter, name); /* borrowed */
    if (!old && PyErr_Occurred())
        return -1;
    long long v = old ? PyLong_AsLongLong(old) : 0;
    if (v == -1 && PyErr_Occurred())
        return -1;
    PyObject *nv = PyLong_FromLongLong(v + k);
    if (!nv)
        return -1;
    int r = PyDict_SetItem(counter, name, nv);
    Py_DECREF(nv);
    return r;
}

static int cnt_add_str(PyObject *counter, const char *name, long long k)
{
    PyObject *s = PyUnicode_FromString(name);
    if (!s)
        return -1;
    int r = cnt_add(counter, s, k);
    Py_DECREF(s);
    return r;
}

static inline int link_up(Core *c) { return c->ready && c->state == ST_UP; }

/* Core.release(vc, n): the input buffer is free again, its credit goes back. */
static void link_release(Core *c, int vc, int64_t n)
{
    if (n > c->used[vc])
        n = c->used[vc];
    c->used[vc] -= n;
    c->pending[vc] += n;
}

/* A segment's micropackets given up: the reference to what holds them, or the block. */
static void seg_free(uint8_t *buf, PyObject *own)
{
    if (own)
        Py_DECREF(own);
    else
        PyMem_Free(buf);
}

/* Core.enqueue(vc, recs) of micropackets the link takes over: a PyMem block (own NULL)
 * or buf inside own (the reference is the link's now; chunk_release drops it). */
static int link_push(Core *c, int vc, uint8_t *buf, PyObject *own, Py_ssize_t n)
{
    VcQueue *q = &c->q[vc];
    if (q_room(q) < 0) {
        seg_free(buf, own);
        return -1;
    }
    Chunk *ch = &q->c[q->end++];
    memset(ch, 0, sizeof *ch); /* view.obj NULL: PyBuffer_Release leaves own to chunk_release */
    ch->obj = own, ch->view.buf = buf, ch->view.len = n * MP_BYTES, ch->n = n;
    q->count += n;
    return 0;
}

static uint8_t *mp_copy(const uint8_t *src, Py_ssize_t n)
{
    uint8_t *b = PyMem_Malloc(n * MP_BYTES);
    if (!b)
        PyErr_NoMemory();
    else
        memcpy(b, src, n * MP_BYTES);
    return b;
}

static int swq_push(SwQ *q, uint8_t *buf, PyObject *own, Py_ssize_t n, uint64_t targets, int tail, int credit)
{
    if (q->end == q->cap) {
        if (q->start > 0) {
            memmove(q->s, q->s + q->start, (q->end - q->start) * sizeof(SwSeg));
            q->end -= q->start;
            q->start = 0;
        } else {
            Py_ssize_t cap = q->cap ? 2 * q->cap : 16;
            SwSeg *s = PyMem_Realloc(q->s, cap * sizeof(SwSeg));
            if (!s) {
                seg_free(buf, own);
                PyErr_NoMemory();
                return -1;
            }
            q->s = s, q->cap = cap;
        }
    }
    q->s[q->end++] = (SwSeg){buf, own, n, targets, tail, credit};
    return 0;
}

static void swq_clear(SwQ *q)
{
    for (Py_ssize_t i = q->start; i < q->end; i++)
        seg_free(q->s[i].buf, q->s[i].own);
    q->start = q->end = 0;
}

static int sw_index(SwitchPlane *pl, long number)
{
    for (int i = 0; i < pl->n; i++)
        if (pl->nums[i] == number)
            return i;
    return -1;
}

/* A tuple of port numbers (the walk's targets) as a bitmask; -1 with KeyError. */
static int targets_mask(SwitchPlane *pl, PyObject *t, uint64_t *mask)
{
    *mask = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t); i++) {
        long p = PyLong_AsLong(PyTuple_GET_ITEM(t, i));
        if (p == -1 && PyErr_Occurred())
            return -1;
        int k = sw_index(pl, p);
        if (k < 0) {
            PyErr_Format(PyExc_KeyError, "no port %ld", p);
            return -1;
        }
        *mask |= (uint64_t)1 << k;
    }
    return 0;
}

/* --- ingress: Switch._ingress -------------------------------------------------------- */

/* What the walk's segments go into: the input queue of (port idx, VC vc). */
typedef struct {
    SwitchPlane *pl;
    int idx, vc;
    const uint8_t *buf;
    Py_ssize_t n;
    PyObject *owner;
} SwWalk;

static int sw_sink(void *ctx, Py_ssize_t start, Py_ssize_t end, PyObject *targets, int tail)
{
    SwWalk *w = ctx;
    SwQ *q = &w->pl->inq[w->idx][w->vc];
    uint64_t mask;
    if (targets_mask(w->pl, targets, &mask) < 0)
        return -1;
    if (start < 0 || end > w->n || start > end) {
        PyErr_SetString(PyExc_ValueError, "the walk returned a segment out of range");
        return -1;
    }
    if (start == end) {
        uint8_t *b = mp_copy(w->pl->abort_mp[w->vc], 1);
        return b ? swq_push(q, b, NULL, 1, mask, 1, -1) : -1;
    }
    if (w->owner && (end - start) * MP_BYTES >= SW_REF_MIN_BYTES) { /* no copy */
        Py_INCREF(w->owner);
        return swq_push(q, (uint8_t *)w->buf + start * MP_BYTES, w->owner, end - start, mask, tail, w->idx);
    }
    uint8_t *b = mp_copy(w->buf + start * MP_BYTES, end - start);
    return b ? swq_push(q, b, NULL, end - start, mask, tail, w->idx) : -1;
}

/* n micropackets at buf, accepted by port idx's link on vc, through the compiled walk
 * (Forwarder.ingress without its Python tuples); owner: a bytes object holding buf,
 * whose large segments are queued by reference (NULL: every segment is copied). */
static int sw_walk(SwitchPlane *pl, int idx, int vc, const uint8_t *buf, Py_ssize_t n, PyObject *owner, double now)
{
    Py_ssize_t pos = 0;
    Core *link = pl->links[idx];
    PyObject *bc = PyObject_GetAttr(pl->sw, pl->s_broadcast);
    PyObject *tree = bc ? PyObject_GetAttr(pl->sw, pl->s_tree) : NULL;
    int rc = -1, broadcast = bc ? PyObject_IsTrue(bc) : -1;
    unsigned long long tree_bits = tree ? PyLong_AsUnsignedLongLong(tree) : 0;
    if (broadcast < 0 || !tree || (tree_bits == (unsigned long long)-1 && PyErr_Occurred()))
        goto done;
    SwWalk w = {pl, idx, vc, buf, n, owner};
    while (pos < n) {
        Py_ssize_t counts[SW_WALK_COUNTERS] = {0}, strays = 0;
        PyObject *cur = pl->current[idx][vc];
        Py_INCREF(cur);
        int r = pl->api->walk(pl->fwd, pl->numbers[idx], buf, n, &pos, &cur, broadcast, tree_bits, counts, &strays,
                              sw_sink, &w);
        Py_SETREF(pl->current[idx][vc], cur);
        if (r < 0)
            goto done;
        for (int i = 0; i < pl->api->n_counters; i++)
            if (counts[i] && cnt_add(pl->pcounters[idx], PyTuple_GET_ITEM(pl->names, i), counts[i]) < 0)
                goto done;
        if (strays)
            link_release(link, vc, strays);
        if (pos < n) { /* an ADMIN micropacket: the Switch handles it (it may change the table) */
            link_release(link, vc, 1);
            pl->py_calls++;
            PyObject *r = PyObject_CallFunction(pl->on_admin, "Oy#Od", pl->numbers[idx],
                                                (const char *)buf + pos * MP_BYTES, (Py_ssize_t)MP_BYTES,
                                                pl->current[idx][vc], now);
            if (!r)
                goto done;
            Py_DECREF(r);
            pos++;
        }
    }
    rc = 0;
done:
    Py_XDECREF(bc);
    Py_XDECREF(tree);
    return rc;
}

/* Called from receive_sequenced (instead of a Received event): acc micropackets of vc,
 * contiguous from mps + first, or to be gathered. */
static int sw_take(Core *s, int vc, const uint8_t *mps, Py_ssize_t first, Py_ssize_t acc, int contiguous, double now)
{
    if (contiguous) { /* walked where they lie */
        const uint8_t *run = mps + first * MP_BYTES;
        SwitchPlane *pl = s->sw; /* in the receive buffer: large segments are forwarded from it */
        PyObject *own = pl->rxobj && run >= pl->rx && run < pl->rx + DP_RECV_BYTES ? pl->rxobj : NULL;
        return sw_walk(pl, s->sw_idx, vc, run, acc, own, now);
    }
    PyObject *recs = PyBytes_FromStringAndSize(NULL, acc * MP_BYTES);
    if (!recs)
        return -1;
    uint8_t *q = (uint8_t *)PyBytes_AS_STRING(recs);
    for (Py_ssize_t i = first, got = 0; got < acc; i++) { /* gathered, as Received would be */
        const uint8_t *m = mps + i * MP_BYTES;
        uint64_t c = load_be64(m + MP_DATA);
        if ((int)(c >> 62) == vc && ((c >> 58) & 0xF) != T_CREDIT)
            memcpy(q + got++ * MP_BYTES, m, MP_BYTES);
    }
    int r = sw_walk(s->sw, s->sw_idx, vc, q, acc, recs, now);
    Py_DECREF(recs);
    return r;
}

/* --- pump: Switch.pump ----------------------------------------------------------------- */

/* The sources in the order the oracle's rng shuffles them, when two or more have
 * segments waiting (Switch.pump: the order of one does not matter, and the rng draws
 * only then); -1 on error, 0 when none waits. */
static int sw_order(SwitchPlane *pl, int *order, int ns)
{
    int waiting = 0;
    for (int i = 0; i < ns; i++) {
        order[i] = i;
        for (int vc = 0; vc < NUM_VCS; vc++)
            if (pl->inq[i][vc].start < pl->inq[i][vc].end) {
                waiting++;
                break;
            }
    }
    if (waiting < 2)
        return waiting;
    PyObject *src = PyList_New(ns);
    if (!src)
        return -1;
    for (int i = 0; i < ns; i++)
        PyList_SET_ITEM(src, i, PyLong_FromLong(i)); /* small ints: cannot fail */
    PyObject *r = PyObject_CallOneArg(pl->shuffle, src); /* the oracle's permutation: same rng, same length */
    if (!r) {
        Py_DECREF(src);
        return -1;
    }
    Py_DECREF(r);
    for (int i = 0; i < ns; i++)
        order[i] = (int)PyLong_AsLong(PyList_GET_ITEM(src, i));
    Py_DECREF(src);
    return waiting;
}

/* Switch.pump's counters, added once per pump (not per segment). */
static int sw_count_tx(SwitchPlane *pl, const int64_t *tx, int64_t dropped)
{
    for (int t = 0; t < pl->n; t++)
        if (tx[t] && cnt_add(pl->pcounters[t], pl->s_tx_mps, tx[t]) < 0)
            return -1;
    return dropped ? cnt_add(pl->sw_counters, pl->s_dropped, dropped) : 0;
}

static int sw_pump(SwitchPlane *pl)
{
    int order[SW_MAX_PORTS + 1], ns = pl->n + 1;
    int waiting = sw_order(pl, order, ns);
    if (waiting <= 0)
        return waiting;
    int64_t tx[SW_MAX_PORTS] = {0}, dropped = 0;
    for (int vc = 0; vc < NUM_VCS; vc++) {
        int64_t limit = pl->buffers[vc];
        for (int o = 0; o < ns; o++) {
            int si = order[o];
            if (si < 0 || si >= ns)
                continue;
            SwQ *q = &pl->inq[si][vc];
            while (q->start < q->end) {
                SwSeg seg = q->s[q->start];
                uint64_t live = 0;
                int ok = 1;
                for (int t = 0; t < pl->n; t++)
                    if (seg.targets >> t & 1 && link_up(pl->links[t])) {
                        live |= (uint64_t)1 << t;
                        int ow = pl->owner[t][vc];
                        if ((ow != SW_FREE && ow != si) || pl->links[t]->q[vc].count >= limit)
                            ok = 0;
                    }
                if (live && !ok)
                    break;
                q->start++;
                if (q->start == q->end)
                    q->start = q->end = 0;
                int last = 63;
                while (live && !(live >> last & 1))
                    last--;
                for (int t = 0; live && t <= last; t++) {
                    if (!(live >> t & 1))
                        continue;
                    uint8_t *b = t == last ? seg.buf : mp_copy(seg.buf, seg.n);
                    PyObject *own = t == last ? seg.own : NULL;
                    if (t == last)
                        seg.buf = NULL, seg.own = NULL;
                    if (!b || link_push(pl->links[t], vc, b, own, seg.n) < 0) {
                        seg_free(seg.buf, seg.own);
                        return -1;
                    }
                    pl->owner[t][vc] = seg.tail ? SW_FREE : si;
                    tx[t] += seg.n;
                }
                if (seg.credit >= 0)
                    link_release(pl->links[seg.credit], vc, seg.n);
                seg_free(seg.buf, seg.own);
                if (!live)
                    dropped += seg.n;
            }
        }
    }
    return sw_count_tx(pl, tx, dropped);
}

/* --- Python type ----------------------------------------------------------------------- */

static void sw_detach(SwitchPlane *pl)
{
    for (int i = 0; i < pl->n; i++)
        if (pl->links[i] && pl->links[i]->sw == pl)
            pl->links[i]->sw = NULL;
}

static int Plane_traverse(SwitchPlane *pl, visitproc visit, void *arg)
{
    Py_VISIT(pl->sw);
    Py_VISIT(pl->fwd);
    Py_VISIT(pl->on_admin);
    Py_VISIT(pl->on_events);
    Py_VISIT(pl->shuffle);
    Py_VISIT(pl->sw_counters);
    for (int i = 0; i < pl->n; i++) {
        Py_VISIT(pl->pcounters[i]);
        Py_VISIT(pl->links[i]);
        Py_VISIT(pl->ccounters[i]);
        Py_VISIT(pl->cables[i]);
        for (int v = 0; v < NUM_VCS; v++)
            Py_VISIT(pl->current[i][v]);
    }
    return 0;
}

static int Plane_clear(SwitchPlane *pl)
{
    sw_detach(pl);
    Py_CLEAR(pl->sw);
    Py_CLEAR(pl->fwd);
    Py_CLEAR(pl->on_admin);
    Py_CLEAR(pl->on_events);
    Py_CLEAR(pl->shuffle);
    Py_CLEAR(pl->sw_counters);
    for (int i = 0; i < pl->n; i++) {
        Py_CLEAR(pl->pcounters[i]);
        Py_CLEAR(pl->links[i]);
        Py_CLEAR(pl->ccounters[i]);
        Py_CLEAR(pl->cables[i]);
        for (int v = 0; v < NUM_VCS; v++)
            Py_CLEAR(pl->current[i][v]);
    }
    return 0;
}

static void Plane_dealloc(SwitchPlane *pl)
{
    PyObject_GC_UnTrack(pl);
    Plane_clear(pl);
    for (int i = 0; i <= SW_MAX_PORTS; i++)
        for (int v = 0; v < NUM_VCS; v++) {
            swq_clear(&pl->inq[i][v]);
            PyMem_Free(pl->inq[i][v].s);
        }
    for (int i = 0; i < SW_MAX_PORTS; i++)
        Py_XDECREF(pl->numbers[i]);
    Py_XDECREF(pl->names);
    Py_XDECREF(pl->s_tx_mps), Py_XDECREF(pl->s_dropped), Py_XDECREF(pl->s_aborted);
    Py_XDECREF(pl->s_rx_dgrams), Py_XDECREF(pl->s_foreign), Py_XDECREF(pl->s_trunc), Py_XDECREF(pl->s_gro);
    Py_XDECREF(pl->s_tx_dgrams), Py_XDECREF(pl->s_gso_sends), Py_XDECREF(pl->s_gso_dgrams);
    Py_XDECREF(pl->s_broadcast), Py_XDECREF(pl->s_tree), Py_XDECREF(pl->s_gso);
    Py_XDECREF(pl->s_max_sent);
    Py_XDECREF(pl->rxobj);
    Py_TYPE(pl)->tp_free((PyObject *)pl);
}

static PyObject *getattr_chain(PyObject *o, const char *a, const char *b)
{
    PyObject *x = PyObject_GetAttrString(o, a);
    if (!x || !b)
        return x;
    PyObject *y = PyObject_GetAttrString(x, b);
    Py_DECREF(x);
    return y;
}

/* SwitchPlane(switch, counter_names, abort_mps): switch.ports (dict of Port, each with
 * a CLink), switch.forwarder, switch._admin_from_plane, switch._link_events, switch.rng,
 * switch.counters, switch.buffers; abort_mps: 4 micropackets (DATA, TAIL + ERROR, VC v). */
static int Plane_init(SwitchPlane *pl, PyObject *args, PyObject *kw)
{
    PyObject *sw, *names;
    Py_buffer ab;
    if (pl->sw) {
        PyErr_SetString(PyExc_RuntimeError, "SwitchPlane is initialised already");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "OO!y*:SwitchPlane", &sw, &PyTuple_Type, &names, &ab))
        return -1;
    int ok = ab.len == NUM_VCS * MP_BYTES;
    if (ok)
        memcpy(pl->abort_mp, ab.buf, ab.len);
    PyBuffer_Release(&ab);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "abort_mps: 4 micropackets");
        return -1;
    }
    PyObject *ports = PyObject_GetAttrString(sw, "ports");
    if (!ports)
        return -1;
    if (!PyDict_Check(ports) || PyDict_GET_SIZE(ports) > SW_MAX_PORTS) {
        Py_DECREF(ports);
        PyErr_Format(PyExc_ValueError, "a switch plane takes a dict of at most %d ports", SW_MAX_PORTS);
        return -1;
    }
    Py_INCREF(sw), Py_INCREF(names);
    pl->sw = sw, pl->names = names;
    pl->fwd = PyObject_GetAttrString(sw, "forwarder");
    pl->api = PyCapsule_Import(SWITCHFWD_CAPSULE, 0);
    pl->on_admin = PyObject_GetAttrString(sw, "_admin_from_plane");
    pl->on_events = PyObject_GetAttrString(sw, "_link_events");
    pl->shuffle = getattr_chain(sw, "rng", "shuffle");
    pl->sw_counters = PyObject_GetAttrString(sw, "counters");
    PyObject *bufs = PyObject_GetAttrString(sw, "buffers");
    pl->s_tx_mps = PyUnicode_InternFromString("tx_mps");
    pl->s_dropped = PyUnicode_InternFromString("dropped_mps");
    pl->s_aborted = PyUnicode_InternFromString("messages_aborted");
    pl->s_rx_dgrams = PyUnicode_InternFromString("rx_datagrams");
    pl->s_foreign = PyUnicode_InternFromString("rx_foreign_datagram");
    pl->s_trunc = PyUnicode_InternFromString("rx_truncated");
    pl->s_gro = PyUnicode_InternFromString("rx_gro_coalesced");
    pl->s_tx_dgrams = PyUnicode_InternFromString("tx_datagrams");
    pl->s_gso_sends = PyUnicode_InternFromString("tx_gso_sends");
    pl->s_gso_dgrams = PyUnicode_InternFromString("tx_gso_datagrams");
    pl->s_broadcast = PyUnicode_InternFromString("broadcast");
    pl->s_tree = PyUnicode_InternFromString("tree_ports");
    pl->s_gso = PyUnicode_InternFromString("gso");
    pl->s_max_sent = PyUnicode_InternFromString("max_sent");
    int rc = -1;
    if (!pl->fwd || !pl->api || !pl->on_admin || !pl->on_events || !pl->shuffle || !pl->sw_counters || !bufs || !pl->s_tx_mps
        || !pl->s_dropped || !pl->s_aborted || !pl->s_rx_dgrams || !pl->s_foreign || !pl->s_trunc || !pl->s_gro
        || !pl->s_tx_dgrams || !pl->s_gso_sends || !pl->s_gso_dgrams || !pl->s_broadcast || !pl->s_tree
        || !pl->s_gso || !pl->s_max_sent)
        goto done;
    if (!PyDict_Check(pl->sw_counters)) {
        PyErr_SetString(PyExc_TypeError, "switch.counters must be a dict (Counter)");
        goto done;
    }
    if (Py_TYPE(pl->fwd) != pl->api->type || pl->api->n_counters != PyTuple_GET_SIZE(names)
        || pl->api->n_counters > SW_WALK_COUNTERS) {
        PyErr_SetString(PyExc_TypeError, "a switch plane needs the compiled Forwarder (daemons._switchfwd) and its "
                                         "counter names");
        goto done;
    }
    for (int v = 0; v < NUM_VCS; v++) {
        PyObject *b = PySequence_GetItem(bufs, v);
        pl->buffers[v] = b ? PyLong_AsLongLong(b) : -1;
        Py_XDECREF(b);
        if (PyErr_Occurred())
            goto done;
    }
    PyObject *key, *port;
    Py_ssize_t it = 0;
    int i = 0;
    while (PyDict_Next(ports, &it, &key, &port)) {
        PyObject *link = PyObject_GetAttrString(port, "link");
        PyObject *cnt = link ? PyObject_GetAttrString(port, "counters") : NULL;
        if (!cnt) {
            Py_XDECREF(link);
            goto done;
        }
        if (!PyObject_TypeCheck(link, &CoreType) || !PyDict_Check(cnt) || ((Core *)link)->sw) {
            Py_DECREF(link), Py_DECREF(cnt);
            PyErr_SetString(PyExc_TypeError, "every port needs its own CLink and a Counter");
            goto done;
        }
        Py_INCREF(key);
        pl->numbers[i] = key;
        pl->nums[i] = PyLong_AsLong(key);
        pl->links[i] = (Core *)link, pl->pcounters[i] = cnt, pl->fd[i] = -1;
        for (int v = 0; v < NUM_VCS; v++) {
            Py_INCREF(Py_None);
            pl->current[i][v] = Py_None;
            pl->owner[i][v] = SW_FREE;
        }
        pl->n = ++i;
        if (PyErr_Occurred())
            goto done;
    }
    for (int k = 0; k < pl->n; k++) {
        pl->links[k]->sw = pl;
        pl->links[k]->sw_idx = k;
    }
    rc = 0;
done:
    Py_DECREF(ports);
    Py_XDECREF(bufs);
    return rc;
}

static int port_arg(SwitchPlane *pl, PyObject *o)
{
    long p = PyLong_AsLong(o);
    if (p == -1 && PyErr_Occurred())
        return -1;
    int k = sw_index(pl, p);
    if (k < 0)
        PyErr_Format(PyExc_KeyError, "no port %ld", p);
    return k;
}

#define PLANE_READY(pl)                                                                  \
    if (!(pl)->sw) {                                                                     \
        PyErr_SetString(PyExc_RuntimeError, "SwitchPlane.__init__ was not called");      \
        return NULL;                                                                     \
    }

/* ingress(port, vc, recs, now): a Received batch (the order-keeping way round). */
static PyObject *Plane_ingress(SwitchPlane *pl, PyObject *args)
{
    PyObject *po;
    int vc;
    Py_buffer b;
    double now;
    PLANE_READY(pl);
    if (!PyArg_ParseTuple(args, "Oiy*d:ingress", &po, &vc, &b, &now))
        return NULL;
    int k = port_arg(pl, po);
    PyObject *recs = NULL;
    if (k >= 0 && (vc < 0 || vc >= NUM_VCS || b.len % MP_BYTES))
        PyErr_SetString(PyExc_ValueError, "ingress: VC 0..3 and whole micropackets");
    else if (k >= 0)
        recs = PyBytes_FromStringAndSize(b.buf, b.len);
    PyBuffer_Release(&b);
    if (!recs)
        return NULL;
    int r = sw_walk(pl, k, vc, (const uint8_t *)PyBytes_AS_STRING(recs), PyBytes_GET_SIZE(recs) / MP_BYTES, recs, now);
    Py_DECREF(recs);
    if (r < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Plane_pump(SwitchPlane *pl, PyObject *Py_UNUSED(ignored))
{
    PLANE_READY(pl);
    if (sw_pump(pl) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* admin(vc, out, recs): the Switch's Admin engine queues micropackets for port out. */
static PyObject *Plane_admin(SwitchPlane *pl, PyObject *args)
{
    PyObject *po;
    int vc;
    Py_buffer b;
    PLANE_READY(pl);
    if (!PyArg_ParseTuple(args, "iOy*:admin", &vc, &po, &b))
        return NULL;
    int k = port_arg(pl, po), r = -1;
    if (k >= 0 && (vc < 0 || vc >= NUM_VCS || !b.len || b.len % MP_BYTES)) {
        PyErr_SetString(PyExc_ValueError, "admin: VC 0..3 and whole micropackets");
    } else if (k >= 0) {
        uint8_t *buf = mp_copy(b.buf, b.len / MP_BYTES);
        r = buf ? swq_push(&pl->inq[pl->n][vc], buf, NULL, b.len / MP_BYTES, (uint64_t)1 << k, 1, -1) : -1;
    }
    PyBuffer_Release(&b);
    if (r < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* port_down(port): Switch._port_down -- its queues and open Messages go, the Messages it
 * was sending through other outputs end with TAIL + ERROR. */
static PyObject *Plane_port_down(SwitchPlane *pl, PyObject *po)
{
    PLANE_READY(pl);
    int k = port_arg(pl, po);
    if (k < 0)
        return NULL;
    for (int vc = 0; vc < NUM_VCS; vc++) {
        swq_clear(&pl->inq[k][vc]);
        Py_INCREF(Py_None);
        Py_SETREF(pl->current[k][vc], Py_None);
        for (int out = 0; out < pl->n; out++)
            if (pl->owner[out][vc] == k) {
                uint8_t *b = mp_copy(pl->abort_mp[vc], 1);
                if (!b || link_push(pl->links[out], vc, b, NULL, 1) < 0)
                    return NULL;
                pl->owner[out][vc] = SW_FREE;
                if (cnt_add(pl->sw_counters, pl->s_aborted, 1) < 0)
                    return NULL;
            }
        pl->owner[k][vc] = SW_FREE;
    }
    Py_RETURN_NONE;
}

/* state() -> {port: {"inq": [segments per VC], "current": [...], "owner": [...]}} plus
 * "admin": [segments per VC]: what Switch keeps in Port.inq/current and Switch.owner. */
static PyObject *Plane_state(SwitchPlane *pl, PyObject *Py_UNUSED(ignored))
{
    PLANE_READY(pl);
    PyObject *out = PyDict_New(), *admin = PyUnicode_FromString("admin");
    if (!out || !admin) {
        Py_XDECREF(out), Py_XDECREF(admin);
        return NULL;
    }
    for (int i = 0; out && i <= pl->n; i++) {
        PyObject *inq = PyList_New(NUM_VCS), *cur = PyList_New(NUM_VCS), *own = PyList_New(NUM_VCS);
        PyObject *d = inq && cur && own ? Py_BuildValue("{sOsOsO}", "inq", inq, "current", cur, "owner", own) : NULL;
        for (int v = 0; d && v < NUM_VCS; v++) {
            SwQ *q = &pl->inq[i][v];
            Py_ssize_t mps = 0;
            for (Py_ssize_t j = q->start; j < q->end; j++)
                mps += q->s[j].n;
            PyList_SET_ITEM(inq, v, Py_BuildValue("(nn)", q->end - q->start, mps));
            PyObject *c = i < pl->n ? pl->current[i][v] : Py_None;
            Py_INCREF(c);
            PyList_SET_ITEM(cur, v, c);
            int ow = i < pl->n ? pl->owner[i][v] : SW_FREE;
            PyObject *o = ow == SW_FREE ? Py_NewRef(Py_None)
                          : ow == pl->n ? PyLong_FromLong(-1) /* the Admin engine, as Switch.owner says */
                                        : Py_NewRef(pl->numbers[ow]);
            PyList_SET_ITEM(own, v, o);
        }
        Py_XDECREF(inq), Py_XDECREF(cur), Py_XDECREF(own);
        if (!d || PyDict_SetItem(out, i < pl->n ? pl->numbers[i] : admin, d) < 0) {
            Py_XDECREF(d);
            Py_DECREF(out);
            Py_DECREF(admin);
            return NULL;
        }
        Py_DECREF(d);
    }
    Py_DECREF(admin);
    return out;
}

/* cable(port, transport): rx() receives that port's datagrams from transport.sock (from
 * transport.peer only, counted in transport.counters), flush() sends them. */
static PyObject *Plane_cable(SwitchPlane *pl, PyObject *args)
{
    PyObject *po, *tr;
    int port;
    const char *host;
    PLANE_READY(pl);
    if (!PyArg_ParseTuple(args, "OO:cable", &po, &tr))
        return NULL;
    int k = port_arg(pl, po);
    if (k < 0)
        return NULL;
    PyObject *sock = PyObject_GetAttrString(tr, "sock");
    PyObject *fdo = sock ? PyObject_CallMethod(sock, "fileno", NULL) : NULL;
    PyObject *peer = fdo ? PyObject_GetAttrString(tr, "peer") : NULL;
    PyObject *cnt = peer ? PyObject_GetAttrString(tr, "counters") : NULL;
    Py_XDECREF(sock);
    int fd = fdo ? (int)PyLong_AsLong(fdo) : -1, ok = cnt && !PyErr_Occurred();
    Py_XDECREF(fdo);
    if (ok && (!PyDict_Check(cnt) || !PyArg_ParseTuple(peer, "si", &host, &port))) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "cable: transport.counters must be a Counter");
        ok = 0;
    }
    struct sockaddr_storage *ss = &pl->peer[k];
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (ok) {
        memset(ss, 0, sizeof *ss);
        if (port < 0 || port > 65535)
            ok = 0, PyErr_Format(PyExc_ValueError, "cable: port %d", port);
        else if (inet_pton(AF_INET, host, &v4->sin_addr) == 1)
            v4->sin_family = AF_INET, v4->sin_port = htons((uint16_t)port);
        else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1)
            v6->sin6_family = AF_INET6, v6->sin6_port = htons((uint16_t)port);
        else
            ok = 0, PyErr_Format(PyExc_ValueError, "cable: %s is not a numeric IP address", host);
    }
    Py_XDECREF(peer);
    if (ok && !pl->rxobj && !(pl->rxobj = PyBytes_FromStringAndSize(NULL, DP_RECV_BYTES)))
        ok = 0;
    if (ok)
        pl->rx = (uint8_t *)PyBytes_AS_STRING(pl->rxobj);
    if (!ok) {
        Py_XDECREF(cnt);
        return NULL;
    }
    Py_XSETREF(pl->ccounters[k], cnt);
    Py_INCREF(tr);
    Py_XSETREF(pl->cables[k], tr);
    pl->fd[k] = fd;
    Py_RETURN_NONE;
}

/* One port's ready datagrams, up to about limit: each into the link (which forwards what
 * it accepts), link events to Python right after the datagram that raised them. */
static Py_ssize_t sw_rx_port(SwitchPlane *pl, int k, double now, Py_ssize_t limit)
{
    Core *link = pl->links[k];
    PyObject *cnt = pl->ccounters[k];
    Py_ssize_t got = 0, tries = 0;
    while (got < limit && tries++ < 4 * limit) {
        struct sockaddr_storage from;
        socklen_t fromlen;
        int flags, gro;
        if (Py_REFCNT(pl->rxobj) > 1) { /* queued segments hold it: receive into a new one */
            PyObject *fresh = PyBytes_FromStringAndSize(NULL, DP_RECV_BYTES);
            if (!fresh)
                return -1;
            Py_SETREF(pl->rxobj, fresh);
            pl->rx = (uint8_t *)PyBytes_AS_STRING(fresh);
        }
        ssize_t len = udpio_recv(pl->fd[k], pl->rx, DP_RECV_BYTES, &from, &fromlen, &flags, &gro);
        if (len < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            const char *en = strerrorname_np(errno); /* ICMP errors from a previous send surface here */
            char name[64];
            if (en)
                snprintf(name, sizeof name, "rx_error_%s", en);
            else
                snprintf(name, sizeof name, "rx_error_%d", errno);
            if (cnt_add_str(cnt, name, 1) < 0)
                return -1;
            continue;
        }
        if (!udpio_same_peer(&from, fromlen, &pl->peer[k])) {
            if (cnt_add(cnt, pl->s_foreign, 1) < 0)
                return -1;
            continue;
        }
        if (flags & MSG_TRUNC) {
            if (cnt_add(cnt, pl->s_trunc, 1) < 0)
                return -1;
            continue;
        }
        Py_ssize_t seg = gro;
        if (seg <= 0 || seg >= len)
            seg = len ? len : 1;
        else if (cnt_add(cnt, pl->s_gro, 1) < 0)
            return -1;
        for (Py_ssize_t off = 0; off < len || !off; off += seg) { /* an empty one too: counted bad */
            Py_ssize_t n = len - off < seg ? len - off : seg;
            got++;
            if (receive_raw(link, pl->rx + off, n, NULL, now) < 0)
                return -1;
            if (PyList_GET_SIZE(link->events)) {
                pl->py_calls++;
                PyObject *r = PyObject_CallFunction(pl->on_events, "Od", pl->numbers[k], now);
                if (!r)
                    return -1;
                Py_DECREF(r);
            }
        }
    }
    if (got && cnt_add(cnt, pl->s_rx_dgrams, got) < 0)
        return -1;
    return got;
}

/* rx(now, limit) -> {port: datagrams}: every cable's ready datagrams (up to about limit
 * each), forwarded, then pumped, as Switch.process does per port. */
static PyObject *Plane_rx(SwitchPlane *pl, PyObject *args)
{
    double now;
    Py_ssize_t limit;
    PLANE_READY(pl);
    if (!PyArg_ParseTuple(args, "dn:rx", &now, &limit))
        return NULL;
    PyObject *out = PyDict_New();
    if (!out)
        return NULL;
    for (int k = 0; k < pl->n; k++) {
        if (pl->fd[k] < 0)
            continue;
        Py_ssize_t got = sw_rx_port(pl, k, now, limit);
        if (got < 0 || (got && sw_pump(pl) < 0)) {
            Py_DECREF(out);
            return NULL;
        }
        if (got) {
            PyObject *g = PyLong_FromSsize_t(got);
            if (!g || PyDict_SetItem(out, pl->numbers[k], g) < 0) {
                Py_XDECREF(g);
                Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(g);
        }
    }
    return out;
}

/* One port's datagrams (a list of bytes) to its peer: runs of equal size (the last may be
 * shorter) as one GSO sendmsg when transport.gso.  Returns how many left; stops at the
 * first refusal, for the Python path (re-cut after EMSGSIZE, learn no-GSO, count). */
static Py_ssize_t sw_send(SwitchPlane *pl, int k, PyObject *list)
{
    PyObject *tr = pl->cables[k], *cnt = pl->ccounters[k];
    PyObject *g = PyObject_GetAttr(tr, pl->s_gso);
    int gso = g ? PyObject_IsTrue(g) : -1;
    Py_XDECREF(g);
    if (gso < 0)
        return -1;
    Py_ssize_t n = PyList_GET_SIZE(list), i = 0, sends = 0, segs = 0, biggest = 0;
    socklen_t plen = pl->peer[k].ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    while (i < n) {
        struct iovec iov[DP_GSO_SEGMENTS];
        int run = udpio_run(iov, udpio_iov_list(list, i, gso, DP_GSO_SEGMENTS, iov), DP_GSO_SEGMENTS, DP_GSO_BYTES);
        Py_ssize_t size = (Py_ssize_t)iov[0].iov_len;
        if (udpio_send(pl->fd[k], &pl->peer[k], plen, iov, run) < 0)
            break;
        if (run > 1)
            sends++, segs += run;
        if (size > biggest)
            biggest = size;
        i += run;
    }
    if ((i && cnt_add(cnt, pl->s_tx_dgrams, i) < 0) || (sends && cnt_add(cnt, pl->s_gso_sends, sends) < 0)
        || (segs && cnt_add(cnt, pl->s_gso_dgrams, segs) < 0))
        return -1;
    if (biggest) {
        PyObject *m = PyObject_GetAttr(tr, pl->s_max_sent);
        long long was = m ? PyLong_AsLongLong(m) : -1;
        Py_XDECREF(m);
        if (was == -1 && PyErr_Occurred())
            return -1;
        if (biggest > was) {
            PyObject *b = PyLong_FromSsize_t(biggest);
            int r = b ? PyObject_SetAttr(tr, pl->s_max_sent, b) : -1;
            Py_XDECREF(b);
            if (r < 0)
                return -1;
        }
    }
    return n - i;
}

/* flush(now) -> {port: [datagrams the kernel refused, in order]}: every cabled port's
 * datagrams due now (Core.datagrams), sent (empty dict: all went). */
static PyObject *Plane_flush(SwitchPlane *pl, PyObject *nowo)
{
    PLANE_READY(pl);
    PyObject *out = PyDict_New();
    if (!out)
        return NULL;
    for (int k = 0; k < pl->n; k++) {
        if (pl->fd[k] < 0)
            continue;
        PyObject *list = Core_datagrams(pl->links[k], nowo);
        if (!list)
            goto fail;
        Py_ssize_t left = PyList_GET_SIZE(list) ? sw_send(pl, k, list) : 0;
        PyObject *rest = left > 0 ? PyList_GetSlice(list, PyList_GET_SIZE(list) - left, PyList_GET_SIZE(list)) : NULL;
        Py_DECREF(list);
        if (left < 0 || (left > 0 && (!rest || PyDict_SetItem(out, pl->numbers[k], rest) < 0))) {
            Py_XDECREF(rest);
            goto fail;
        }
        Py_XDECREF(rest);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

#include "_switchrun.h"

static PyMethodDef Plane_methods[] = {
    {"flush", (PyCFunction)Plane_flush, METH_O, "flush(now) -> {port: datagrams refused}: send what is due"},
    {"ingress", (PyCFunction)Plane_ingress, METH_VARARGS, "ingress(port, vc, recs, now): a Received batch"},
    {"pump", (PyCFunction)Plane_pump, METH_NOARGS, "move input segments to free (or owned) output VCs"},
    {"admin", (PyCFunction)Plane_admin, METH_VARARGS, "admin(vc, out, recs): queue Admin micropackets"},
    {"port_down", (PyCFunction)Plane_port_down, METH_O, "port_down(port): drop its queues, abort its Messages"},
    {"state", (PyCFunction)Plane_state, METH_NOARGS, "{port: {inq: [(segments, mps)], current, owner}}"},
    {"cable", (PyCFunction)Plane_cable, METH_VARARGS, "cable(port, transport): rx() and flush() use its socket"},
    {"rx", (PyCFunction)Plane_rx, METH_VARARGS, "rx(now, limit) -> {port: datagrams received}"},
    SWITCHRUN_METHODS
    {NULL},
};

static PyTypeObject PlaneType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "daemons._link.SwitchPlane",
    .tp_basicsize = sizeof(SwitchPlane),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "SwitchPlane(switch, counter_names, abort_mps): gsn-switch's data path on its CLinks",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Plane_init,
    .tp_dealloc = (destructor)Plane_dealloc,
    .tp_traverse = (traverseproc)Plane_traverse,
    .tp_clear = (inquiry)Plane_clear,
    .tp_methods = Plane_methods,
};

#endif
