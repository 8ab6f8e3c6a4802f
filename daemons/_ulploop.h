/* gsnd's ULP clients served from C (README "ULP"): no Python per Message either way.
 *
 * SENDs: dp_run (_loop.h) polls the registered clients' sockets with the cable and the
 * TAP.  A frame that is a well-formed SEND the client may make (not a privileged
 * EtherType unless it is privileged, not gsnd's drop-notice protocol, within the VC's
 * and the socket's payload limits) while the link is up and the port has a ULA is
 * encoded and queued here (the fused encode of enqueue_message).  Every other frame
 * (BIND, UNBIND, malformed, refused, link down) goes up to Python whole (UlpFrameIn),
 * which answers it exactly as when it reads the socket itself; the client's end goes up
 * as UlpClosed.  Like Python's wait_room, a SEND for a VC whose queue holds more than
 * `high` micropackets stays in the socket (peeked, not read) and the client is not
 * polled until that queue drains.
 *
 * RECVs: received Messages are written to a client from C.
 *
 * A Message the data plane reassembled (any VC) goes straight to a client's socket as a
 * RECV frame (sendmsg, header + the payload in the reassembly buffer: no copy) when:
 * its EtherType is not IP's (IP goes to the TAP, or to Python when a client binds it),
 * it is not a drop notice, it is for this port (ULA or alias), exactly one registered
 * client binds its EtherType, and that client is `direct` (Python holds nothing for it).
 * Everything else goes up to Python as before (Delivered), and so does a Message whose
 * write the kernel refuses: the client's `direct` is cleared on the spot, so the Python
 * Delivery sees the full (or gone) socket itself, holds the Message and the VC's credits
 * exactly as documented, and no later Message overtakes it; Python sets `direct` again
 * once that client's backlog is empty (daemons/io/ulp.py).
 *
 *   ulp_client(fd, ethertypes, privileged, direct)  add or update (ethertypes: 2 bytes each)
 *   ulp_forget(fd)                                  the client left
 *
 * Included by _pump.h before dp_sink.
 */
#ifndef GSN_ULPLOOP_H
#define GSN_ULPLOOP_H

#include <poll.h>

#define UL_ETHERTYPE_NOTICE 0x88B7 /* constants.ETHERTYPE_OUI_EXTENDED */
static const uint8_t ul_notice_protocol[5] = {0x02, 0x47, 0x53, 0x00, 0x01}; /* constants.ULP_NOTICE_PROTOCOL */

static int dp_for_us(DataPlane *dp, const uint8_t *d_ula);

#include "_ulpraw.h"
static PyObject *ev_ulp_frame, *ev_ulp_closed; /* set by setup_ulp() */

/* One Message from its fields onto vc's queue (a PyMem block, the fused encode): the
 * micropackets queued, or -1 with an exception set. */
static Py_ssize_t ul_enqueue(Core *s, int vc, const uint8_t *d_ula, const uint8_t *s_ula, unsigned et,
                             const uint8_t *payload, Py_ssize_t plen)
{
    uint64_t m_len = RA_LLC + (uint64_t)plen;
    uint8_t head[RA_PREFIX];
    memcpy(head, d_ula, 6);
    memcpy(head + 6, s_ula, 6);
    put_be32(head + 12, (uint32_t)m_len);
    memcpy(head + RA_MAC, ra_llc_snap, 6);
    head[22] = (uint8_t)(et >> 8), head[23] = (uint8_t)et;
    Py_ssize_t n = (Py_ssize_t)((RA_MAC + m_len + MP_DATA - 1) / MP_DATA);
    VcQueue *q = &s->q[vc];
    uint8_t *mps = PyMem_Malloc(n * MP_BYTES);
    if (!mps) {
        PyErr_NoMemory();
        return -1;
    }
    if (q_room(q) < 0) {
        PyMem_Free(mps);
        return -1;
    }
    encode_mps(head, RA_PREFIX, payload, plen, mps, n, vc, T_HEADER);
    Chunk *ch = &q->c[q->end++];
    memset(ch, 0, sizeof *ch);
    ch->obj = NULL, ch->view.buf = mps, ch->view.len = n * MP_BYTES, ch->n = n;
    q->count += n;
    return n;
}

#define UL_NEED_DP(s)                                                                \
    READY(s, NULL);                                                                  \
    if (!(s)->dp)                                                                    \
        return PyErr_Format(PyExc_RuntimeError, "the data plane is not attached");

static UlClient *ul_find(UlpReg *u, long fd)
{
    for (int i = 0; i < u->n; i++)
        if (u->c[i].fd == fd)
            return &u->c[i];
    return NULL;
}

/* A reassembled Message (stream: MAC header, LLC/SNAP, payload): 0 when it was written to
 * its client here, 1 when Python delivers it. */
static int ul_deliver(DataPlane *dp, int vc, const uint8_t *data)
{
    UlpReg *u = &dp->ulp;
    unsigned et = ((unsigned)data[22] << 8) | data[23];
    uint64_t m_len = ((uint64_t)data[12] << 24) | ((uint64_t)data[13] << 16) | ((uint64_t)data[14] << 8) | data[15];
    size_t plen = (size_t)(m_len - RA_LLC); /* reassembly checked M_len against the stream */
    if (ip_bit(et) || (et == UL_ETHERTYPE_NOTICE && plen >= 5 && !memcmp(data + RA_PREFIX, ul_notice_protocol, 5)))
        return 1;
    if (!dp_for_us(dp, data))
        return 1; /* Python counts it (rx_drop_not_for_us) */
    UlClient *to = NULL;
    for (int i = 0; i < u->n; i++)
        for (int k = 0; k < u->c[i].nets; k++)
            if (u->c[i].ets[k] == et) {
                if (to)
                    return 1; /* two clients: the Delivery copies it to both */
                to = &u->c[i];
                break;
            }
    if (!to || !to->direct)
        return 1;
    uint8_t head[UL_HEADER] = {UL_OP_RECV, (uint8_t)vc, (uint8_t)(et >> 8), (uint8_t)et};
    memcpy(head + 4, data + 6, 6); /* RECV: the source ULA */
    struct iovec iov[2] = {{head, UL_HEADER}, {(void *)(data + RA_PREFIX), plen}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
    if (sendmsg(to->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
        to->direct = 0;
        u->counters[errno == EAGAIN || errno == EWOULDBLOCK ? UL_RX_FULL : UL_RX_ERROR]++;
        return 1;
    }
    u->counters[UL_RX_MESSAGES]++;
    u->counters[UL_RX_DIRECT]++;
    dp->counters[DP_EP_RX_MESSAGES]++;
    dp->counters[DP_EP_RX_BYTES] += plen;
    dp->rx_vc[0][vc]++;
    dp->rx_vc[1][vc] += plen;
    return 0;
}

/* --- SENDs ------------------------------------------------------------------------ */

/* A frame C queues itself: a well-formed SEND the client may make, while the link is up
 * and the port has a ULA (everything else: Python, which answers as io/ulp.py does). */
static int ul_sendable(Core *s, const UlClient *c, const uint8_t *f, Py_ssize_t n)
{
    DataPlane *dp = s->dp;
    if (n < UL_HEADER || n - UL_HEADER > dp->ra.max_payload || f[0] != UL_OP_SEND || f[1] > 3)
        return 0;
    unsigned et = ((unsigned)f[2] << 8) | f[3];
    Py_ssize_t plen = n - UL_HEADER;
    if (et == UL_ETHERTYPE_NOTICE && plen >= 5 && !memcmp(f + UL_HEADER, ul_notice_protocol, 5))
        return 0;
    if (ip_bit(et) && !c->privileged)
        return 0;
    return RA_LLC + (uint64_t)plen <= ra_max_m_len(f[1]) && s->state == ST_UP && dp->has_ula;
}

/* Does the client's next frame wait for room (Python's wait_room: a SEND while its VC
 * holds more than `high` micropackets)?  Peeks at the header, the first bytes of the
 * payload and the frame's size: only a SEND C would queue waits; one that is refused
 * (or that Python answers) is read and answered at once, as io/ulp.py checks a SEND
 * before it waits for room.  A client that has hung up (c->hup) waits for nothing: it
 * can send no more, so what its socket holds is read at once and its end is seen. */
static int ul_must_wait(Core *s, UlClient *c, Py_ssize_t high)
{
    if (s->state != ST_UP || c->hup)
        return 0;
    int full = 0;
    for (int v = 0; v < RA_VCS; v++)
        full |= s->q[v].count > high;
    if (!full)
        return 0;
    uint8_t h[UL_HEADER + sizeof ul_notice_protocol];
    ssize_t k = recv(c->fd, h, sizeof h, MSG_PEEK | MSG_DONTWAIT | MSG_TRUNC);
    if (k < UL_HEADER || !ul_sendable(s, c, h, k) || s->q[h[1]].count <= high)
        return 0;
    c->parked = h[1];
    s->dp->ulp.counters[UL_PARKED]++;
    return 1;
}

/* Frames from a readable client, up to UL_BURST: queued here or handed up; stops after a
 * frame handed up (it is answered before the client's next).  A client whose last burst
 * was one frame (a request/response client: its socket was empty after it) is read one
 * frame at a time, without the recvmsg that finds the socket empty (EAGAIN): dp_run's
 * next poll sees whether more came.  It is drained again once it is ready at two polls
 * in a row, or has hung up.  The frames read, or -1 with an exception set. */
static Py_ssize_t ul_read(Core *s, UlClient *c, Py_ssize_t high)
{
    DataPlane *dp = s->dp;
    UlpReg *u = &dp->ulp;
    Py_ssize_t got = 0;
    if (c->lone && (c->hup || c->read_at + 1 == u->polls))
        c->lone = 0;
    c->read_at = u->polls;
    Py_ssize_t limit = c->lone ? 1 : UL_BURST;
    while (got < limit && !ul_must_wait(s, c, high)) {
        union {
            char buf[CMSG_SPACE(sizeof(struct ucred))];
            struct cmsghdr align;
        } cbuf;
        struct msghdr mh = {.msg_control = cbuf.buf, .msg_controllen = sizeof cbuf.buf};
        const uint8_t *f;
        ssize_t n = ul_raw_recv(u, c, &mh, &f);
        if (n == -2)
            return -1;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            c->lone = got == 1;
            break;
        }
        if (n < 0 && errno == ECONNRESET) { /* it closed with RECVs unread: the kernel reports that */
            got++;                          /* once, then the frames it sent before (and its end) */
            continue;
        }
        if (n < 0 || (n == 0 && !mh.msg_controllen)) { /* its end: no record, so no credentials */
            c->closed = 1;
            return add_event(s, PyObject_CallFunction(ev_ulp_closed, "i", c->fd)) < 0 ? -1 : got;
        }
        got++;
        if (!ul_sendable(s, c, f, n)) {
            u->counters[UL_FRAMES_UP]++;
            Py_ssize_t kept = n < u->buf_len ? n : u->buf_len;
            return add_event(s, PyObject_CallFunction(ev_ulp_frame, "iy#n", c->fd, (const char *)f, kept, (Py_ssize_t)n))
                           < 0 ? -1 : got;
        }
        Py_ssize_t plen = n - UL_HEADER;
        int vc = f[1], raw = ul_queue_raw(s, u, f, n);
        if (raw < 0 || (!raw && ul_enqueue(s, vc, f + 4, dp->ula, ((unsigned)f[2] << 8) | f[3], f + UL_HEADER, plen) < 0))
            return -1;
        u->counters[UL_TX_MESSAGES]++;
        u->counters[UL_TX_DIRECT]++;
        dp->counters[DP_EP_TX_MESSAGES]++;
        dp->counters[DP_EP_TX_BYTES] += (uint64_t)plen;
        dp->tx_vc[0][vc]++;
        dp->tx_vc[1][vc] += (uint64_t)plen;
    }
    return got;
}

/* dp_run's poll slots for the clients (fds[i] for u->c[i]; -1: not polled now). */
static int ul_poll_fill(Core *s, struct pollfd *fds, Py_ssize_t high)
{
    UlpReg *u = &s->dp->ulp;
    for (int i = 0; i < u->n; i++) {
        UlClient *c = &u->c[i];
        if (c->parked >= 0 && (s->q[c->parked].count <= high || s->state != ST_UP))
            c->parked = -1;
        /* a parked client is polled for its end only (its next frame waits in the socket) */
        fds[i].fd = c->closed ? -1 : c->fd;
        fds[i].events = c->parked >= 0 ? POLLRDHUP : POLLIN | POLLRDHUP, fds[i].revents = 0;
    }
    return u->n;
}

/* The ready ones read; the frames read, or -1 with an exception set. */
static Py_ssize_t ul_poll_read(Core *s, struct pollfd *fds, int n, Py_ssize_t high)
{
    Py_ssize_t got = 0;
    s->dp->ulp.polls++;
    for (int i = 0; i < n; i++)
        if (fds[i].fd >= 0 && fds[i].revents) {
            UlClient *c = &s->dp->ulp.c[i];
            if (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR))
                c->hup = 1, c->parked = -1;
            Py_ssize_t k = ul_read(s, c, high);
            if (k < 0)
                return -1;
            got += k;
        }
    return got;
}

/* --- the registry -------------------------------------------------------------------- */

static PyObject *Core_ulp_client(Core *s, PyObject *args)
{
    int fd, priv, direct;
    Py_buffer ets;
    UL_NEED_DP(s);
    if (!PyArg_ParseTuple(args, "iy*pp:ulp_client", &fd, &ets, &priv, &direct))
        return NULL;
    UlpReg *u = &s->dp->ulp;
    UlClient *c = ul_find(u, fd);
    PyObject *ret = NULL;
    if (fd < 0 || ets.len % 2 || ets.len / 2 > UL_BINDINGS || (!c && u->n >= UL_CLIENTS) || s->dp->ra.max_payload < 0) {
        PyErr_Format(PyExc_ValueError, "ulp_client: fd >= 0, at most %d EtherTypes (2 bytes each), at most %d clients, "
                     "a payload limit given to dp_attach", UL_BINDINGS, UL_CLIENTS);
        goto done;
    }
    if (!ev_ulp_frame) {
        PyErr_SetString(PyExc_RuntimeError, "daemons._link.setup_ulp() was not called");
        goto done;
    }
    if (!u->buf) {
        u->buf_len = UL_HEADER + (Py_ssize_t)s->dp->ra.max_payload + 1;
        if (!(u->buf = PyMem_Malloc((size_t)u->buf_len))) {
            PyErr_NoMemory();
            goto done;
        }
    }
    if (!c) {
        c = &u->c[u->n++];
        c->closed = c->hup = c->lone = c->large = 0, c->parked = -1, c->read_at = 0;
    }
    c->fd = fd, c->privileged = priv, c->direct = direct, c->nets = (int)(ets.len / 2);
    for (int k = 0; k < c->nets; k++)
        c->ets[k] = (uint16_t)((((const uint8_t *)ets.buf)[2 * k] << 8) | ((const uint8_t *)ets.buf)[2 * k + 1]);
    ret = Py_None;
    Py_INCREF(ret);
done:
    PyBuffer_Release(&ets);
    return ret;
}

static PyObject *Core_ulp_forget(Core *s, PyObject *arg)
{
    UL_NEED_DP(s);
    long fd = PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    UlpReg *u = &s->dp->ulp;
    UlClient *c = ul_find(u, fd);
    if (c)
        *c = u->c[--u->n];
    return PyBool_FromLong(c != NULL);
}

/* The counters into out ({group: {name: count}}): "ulp", "ulp.delivery", and "per_vc"
 * ({rx,tx}_{messages,bytes}_vcN: everything the data plane delivered and queued, IP too). */
static int ul_counters(DataPlane *dp, PyObject *out)
{
    static const char *way[4] = {"rx_messages", "rx_bytes", "tx_messages", "tx_bytes"};
    for (int i = 0; i < UL_N + 16; i++) {
        char name[32];
        uint64_t v;
        const char *group = "per_vc";
        if (i < UL_N) {
            v = dp->ulp.counters[i], group = ul_groups[i];
            snprintf(name, sizeof name, "%s", ul_names[i]);
        } else {
            int k = (i - UL_N) / 4, vc = (i - UL_N) % 4;
            v = k < 2 ? dp->rx_vc[k][vc] : dp->tx_vc[k - 2][vc];
            snprintf(name, sizeof name, "%s_vc%d", way[k], vc);
        }
        PyObject *g = PyDict_GetItemString(out, group); /* borrowed */
        if (!g) {
            if (!(g = PyDict_New()) || PyDict_SetItemString(out, group, g) < 0) {
                Py_XDECREF(g);
                return -1;
            }
            Py_DECREF(g);
        }
        if (!v)
            continue;
        PyObject *c = PyLong_FromUnsignedLongLong(v);
        if (!c || PyDict_SetItemString(g, name, c) < 0) {
            Py_XDECREF(c);
            return -1;
        }
        Py_DECREF(c);
    }
    return 0;
}

static PyObject *mod_setup_ulp(PyObject *self, PyObject *args)
{
    PyObject *frame, *closed;
    if (!PyArg_ParseTuple(args, "OO:setup_ulp", &frame, &closed))
        return NULL;
    Py_INCREF(frame), Py_INCREF(closed);
    Py_XSETREF(ev_ulp_frame, frame);
    Py_XSETREF(ev_ulp_closed, closed);
    Py_RETURN_NONE;
}

#define ULPLOOP_METHODS                                                                                    \
    {"ulp_client", (PyCFunction)Core_ulp_client, METH_VARARGS,                                             \
     "ulp_client(fd, ethertypes, privileged, direct): add or update a ULP client the data plane serves"},  \
    {"ulp_forget", (PyCFunction)Core_ulp_forget, METH_O, "ulp_forget(fd) -> it was registered"},

#define ULPLOOP_MODULE_METHODS                                                                             \
    {"setup_ulp", mod_setup_ulp, METH_VARARGS,                                                             \
     "setup_ulp(frame(fd, data, size), closed(fd)): the events for client frames C hands up"},

#endif
