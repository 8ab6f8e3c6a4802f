/* pktwayd._pwfast: the common shape of IP across a PacketWay router, compiled.

   Router: a half-router pair in one pktwayd (twins in one process, both halves on gsnd ULP
   sockets, PacketWay dialect).  A RECV frame off one half's socket whose payload is a plain
   L3 EEP packet (V 0, no L2RH or symbol prefix, no optional header, no trailer, zero pad
   bytes, TAIL 0) addressed to a node the table says lives on the other half's SAN, from a
   source that is not a router of my SAN, and no longer than the table's MTU for it, goes out
   unchanged as a SEND frame on the other half's socket to that node's ULA (what
   engine.Engine + daemon.Half do with it).  Anything else is handed back whole to Python.

   Ip: pw0's node.  An IP packet read from the TUN device to a configured unicast peer (within
   the peer's route MTU) becomes an L3 EEP packet in a SEND frame to the router's ULA; a RECV
   frame holding an L3 EEP packet for me of PT IPv4/IPv6 whose IP packet is well formed,
   comes from a configured peer and is not to a group is written to the TUN device (what
   ipnode.IpNode + ipdriver.PwIp do).  Anything else is handed back to Python.

   The tables are filled by Python (pktwayd/fastpath.py), which keeps the pure-Python path
   as the oracle.  Receives run without the GIL; frames are received back to back into one
   buffer (a ULP frame may be up to the ULP maximum, so recvmmsg's fixed slots would not
   do), sends go out with sendmmsg. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define ULP_HDR 10
#define OP_SEND 3
#define OP_RECV 4
#define W 8
#define BURST_MAX 256
#define PT_IPV4 0x0800
#define PT_IPV6 0x86DD

static uint64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return v;
}

static void put64(uint8_t *p, uint64_t v) {
    for (int i = 7; i >= 0; i--) { p[i] = (uint8_t)v; v >>= 8; }
}

/* A plain L3 EEP packet (see the top): its DT, SA, PT and data extent; 0 if not that shape.
   strict: also no trailer, zero pad bytes and TAIL 0 (what a router passes on unchanged). */
typedef struct { uint32_t dt, sa; uint16_t pt; size_t data_len; } eep_t;

static int eep_plain(const uint8_t *p, size_t n, int strict, eep_t *e) {
    if (n < 3 * W || n % W) return 0;
    uint64_t w0 = be64(p), w1 = be64(p + W);
    unsigned b1 = (unsigned)(w0 >> 48) & 0xFF;
    if (w0 >> 62) return 0;
    if (!(b1 < 0x80 || (b1 & 0xF0) == 0xE0)) return 0;
    if ((w1 >> 31) & 1) return 0;
    uint64_t dl = (w1 >> 32) & 0x1FFFFFF, pl = (w1 >> 57) & 7;
    if (pl && dl == 0) return 0;
    if (dl > (n - 3 * W) / W) return 0;
    size_t end = 2 * W + W * (size_t)dl;
    if (strict) {
        if (end != n - W || be64(p + n - W) != 0) return 0;
        for (size_t i = end - pl; i < end; i++) if (p[i]) return 0;
    }
    e->dt = (uint32_t)(w0 >> 32) & 0xFFFFFF;
    e->sa = (uint32_t)w1 & 0xFFFFFF;
    e->pt = (uint16_t)w0;
    e->data_len = end - 2 * W - pl;
    return 1;
}

/* ippacket.addresses: (PT, src, dst) of an IP packet; 0 if not a whole v4/v6 header. */
static int ip_addresses(const uint8_t *p, size_t n, uint16_t *pt, const uint8_t **src, const uint8_t **dst, int *alen) {
    if (n < 1) return 0;
    unsigned version = p[0] >> 4;
    if (version == 4 && n >= 20) {
        size_t ihl = (size_t)(p[0] & 0xF) * 4, total = ((size_t)p[2] << 8) | p[3];
        if (ihl < 20 || total < ihl || total > n) return 0;
        *pt = PT_IPV4; *src = p + 12; *dst = p + 16; *alen = 4;
        return 1;
    }
    if (version == 6 && n >= 40) {
        if (40 + (((size_t)p[4] << 8) | p[5]) > n) return 0;
        *pt = PT_IPV6; *src = p + 8; *dst = p + 24; *alen = 16;
        return 1;
    }
    return 0;
}

static int ip_is_group(const uint8_t *a, int alen) {
    if (alen == 16) return a[0] == 0xFF;
    return (a[0] & 0xF0) == 0xE0 || (a[0] == 0xFF && a[1] == 0xFF && a[2] == 0xFF && a[3] == 0xFF);
}

static int append_new(PyObject *list, PyObject *item) {
    if (item == NULL) return -1;
    int r = PyList_Append(list, item);
    Py_DECREF(item);
    return r;
}

/* Frames received back to back into buf: offsets and lengths.  Stops after max frames
   (dropped ones included), when fewer than frame_max bytes are left, after burst_bytes, at
   EAGAIN (0), at EOF (*eof) or at another error (*err).  A frame longer than frame_max
   (its real length: MSG_TRUNC) is dropped and counted in *oversized, never kept cut short. */
static int rx_frames(int fd, uint8_t *buf, size_t cap, size_t frame_max, size_t burst_bytes, int max,
                     size_t *off, size_t *len, int *eof, int *err, int *oversized) {
    size_t used = 0;
    int k = 0;
    for (int taken = 0; taken < max && used < burst_bytes && cap - used >= frame_max;) {
        ssize_t r = recv(fd, buf + used, frame_max, MSG_DONTWAIT | MSG_TRUNC);
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) *err = errno;
            break;
        }
        if (r == 0) { *eof = 1; break; }
        taken++;
        if ((size_t)r > frame_max) { (*oversized)++; continue; }
        off[k] = used; len[k] = (size_t)r; k++;
        used += ((size_t)r + 7) & ~(size_t)7;
    }
    return k;
}

static int64_t now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

/* Room on fd within the deadline (poll, called without the GIL); 0 once it has passed. */
static int wait_room(int fd, int64_t deadline) {
    for (;;) {
        int64_t left = deadline - now_us();
        if (left <= 0) return 0;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        struct timespec t = {.tv_sec = left / 1000000, .tv_nsec = (left % 1000000) * 1000};
        int r = ppoll(&p, 1, &t, NULL);
        if (r > 0) return 1;
        if (r < 0 && errno != EINTR) return 0;
    }
}

/* sendmmsg (MSG_NOSIGNAL: a peer gone is an error, never SIGPIPE) until every message is
   dealt with, or the socket has had no room for wait_us.  A message refused with another
   error is dropped: failed[i] = its errno (0 for the others), and the rest go on.  Returns
   how many messages were dealt with (sent or dropped); those after it had no room. */
static int tx_frames(int fd, struct mmsghdr *m, int count, long wait_us, int *failed) {
    int done = 0;
    int64_t deadline = -1;
    memset(failed, 0, sizeof *failed * (size_t)count);
    while (done < count) {
        int r = sendmmsg(fd, m + done, (unsigned)(count - done), MSG_DONTWAIT | MSG_NOSIGNAL);
        if (r > 0) { done += r; continue; }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (deadline < 0) deadline = now_us() + wait_us;
            if (!wait_room(fd, deadline)) break;
            continue;
        }
        failed[done++] = r < 0 ? errno : EIO;
    }
    return done;
}

static PyObject *errno_list(const int *failed, int count) {
    PyObject *l = PyList_New(0);
    for (int i = 0; l != NULL && i < count; i++)
        if (failed[i] && append_new(l, PyLong_FromLong(failed[i])) < 0) Py_CLEAR(l);
    return l;
}

static PyObject *iov_bytes(const struct msghdr *h) {
    size_t n = 0;
    for (size_t i = 0; i < h->msg_iovlen; i++) n += h->msg_iov[i].iov_len;
    PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
    if (b == NULL) return NULL;
    char *q = PyBytes_AS_STRING(b);
    for (size_t i = 0; i < h->msg_iovlen; i++) {
        memcpy(q, h->msg_iov[i].iov_base, h->msg_iov[i].iov_len);
        q += h->msg_iov[i].iov_len;
    }
    return b;
}

static int get_fd(PyObject *o) {
    int fd = PyObject_AsFileDescriptor(o);
    return fd;
}

static uint8_t *alloc_buf(size_t n) {
    uint8_t *b = malloc(n);
    if (b == NULL) PyErr_NoMemory();
    return b;
}

/* ============================================================ Router ======== */

typedef struct { uint32_t dt; uint32_t limit; uint8_t ula[6]; } route_t;

typedef struct {
    PyObject_HEAD
    PyObject *in_sock, *out_sock;  /* kept alive while their descriptors are in use */
    int in_fd, out_fd, busy;
    uint16_t et;
    size_t frame_max, burst_bytes, cap;
    uint8_t *buf;
    route_t *routes;
    Py_ssize_t nroutes;
    uint32_t *slow_sa;
    Py_ssize_t nslow;
    uint8_t hdr[BURST_MAX][ULP_HDR];
    size_t off[BURST_MAX], len[BURST_MAX];
    struct iovec iov[BURST_MAX][2];
    struct mmsghdr msg[BURST_MAX];
    int fast_of[BURST_MAX], failed[BURST_MAX];
    int pend_lo, pend_hi;  /* msg[pend_lo, pend_hi): held, no room for them yet */
} Router;

static int cmp_route(const void *a, const void *b) {
    uint32_t x = ((const route_t *)a)->dt, y = ((const route_t *)b)->dt;
    return x < y ? -1 : x > y;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static const route_t *router_find(const Router *r, uint32_t dt) {
    route_t key = {.dt = dt};
    return r->nroutes ? bsearch(&key, r->routes, (size_t)r->nroutes, sizeof key, cmp_route) : NULL;
}

static int router_slow_src(const Router *r, uint32_t sa) {
    return r->nslow && bsearch(&sa, r->slow_sa, (size_t)r->nslow, sizeof sa, cmp_u32) != NULL;
}

/* The route a frame goes out on, or NULL: hand it to Python. */
static const route_t *router_classify(const Router *r, const uint8_t *f, size_t n) {
    if (n < ULP_HDR || f[0] != OP_RECV || f[1] > 3 || ((f[2] << 8) | f[3]) != r->et) return NULL;
    eep_t e;
    if (!eep_plain(f + ULP_HDR, n - ULP_HDR, 1, &e)) return NULL;
    const route_t *rt = router_find(r, e.dt);
    if (rt == NULL || router_slow_src(r, e.sa)) return NULL;
    if (rt->limit && (n - ULP_HDR) / W > rt->limit) return NULL;
    return rt;
}

static void send_header(uint8_t *h, uint16_t et, const uint8_t *ula) {
    h[0] = OP_SEND; h[1] = 1; h[2] = (uint8_t)(et >> 8); h[3] = (uint8_t)et;
    memcpy(h + 4, ula, 6);
}

static int Router_init(Router *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"in_sock", "out_sock", "ethertype", "frame_max", "burst_bytes", NULL};
    PyObject *in, *out;
    unsigned int et;
    Py_ssize_t frame_max, burst;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOInn", kwlist, &in, &out, &et, &frame_max, &burst)) return -1;
    if (et > 0xFFFF || frame_max < ULP_HDR + 1 || burst < 1 || frame_max > (1 << 28) || burst > (1 << 28)) {
        PyErr_SetString(PyExc_ValueError, "Router: ethertype, frame_max or burst_bytes out of range");
        return -1;
    }
    if (self->buf != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Router: already initialised");
        return -1;
    }
    if ((self->in_fd = get_fd(in)) < 0 || (self->out_fd = get_fd(out)) < 0) return -1;
    self->in_sock = Py_NewRef(in);
    self->out_sock = Py_NewRef(out);
    self->et = (uint16_t)et;
    self->frame_max = (size_t)frame_max;
    self->burst_bytes = (size_t)burst;
    self->cap = (size_t)burst + (size_t)frame_max + 8;
    return (self->buf = alloc_buf(self->cap)) == NULL ? -1 : 0;
}

static void Router_dealloc(Router *self) {
    Py_XDECREF(self->in_sock);
    Py_XDECREF(self->out_sock);
    free(self->buf);
    free(self->routes);
    free(self->slow_sa);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* set_table([(dt, ula 6 bytes, limit words 0 = none), ...], [router source addresses]) */
static PyObject *Router_set_table(Router *self, PyObject *args) {
    PyObject *entries, *slow;
    if (!PyArg_ParseTuple(args, "OO", &entries, &slow)) return NULL;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Router: table changed during a burst");
        return NULL;
    }
    PyObject *es = PySequence_Fast(entries, "entries: a sequence"), *ss = NULL;
    if (es == NULL) return NULL;
    ss = PySequence_Fast(slow, "slow sources: a sequence");
    if (ss == NULL) { Py_DECREF(es); return NULL; }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(es), m = PySequence_Fast_GET_SIZE(ss);
    route_t *rt = calloc((size_t)n + 1, sizeof *rt);
    uint32_t *sl = calloc((size_t)m + 1, sizeof *sl);
    if (rt == NULL || sl == NULL) { PyErr_NoMemory(); goto fail; }
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned int dt, limit;
        const char *ula;
        Py_ssize_t ulen;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(es, i), "Iy#I", &dt, &ula, &ulen, &limit)) goto fail;
        if (dt > 0xFFFFFF || ulen != 6) {
            PyErr_SetString(PyExc_ValueError, "route: a 24-bit address and a 6-byte ULA");
            goto fail;
        }
        rt[i].dt = dt; rt[i].limit = limit;
        memcpy(rt[i].ula, ula, 6);
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        unsigned long v = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(ss, i));
        if (PyErr_Occurred()) goto fail;
        sl[i] = (uint32_t)v;
    }
    qsort(rt, (size_t)n, sizeof *rt, cmp_route);
    qsort(sl, (size_t)m, sizeof *sl, cmp_u32);
    free(self->routes); free(self->slow_sa);
    self->routes = rt; self->nroutes = n; self->slow_sa = sl; self->nslow = m;
    Py_DECREF(es); Py_DECREF(ss);
    Py_RETURN_NONE;
fail:
    free(rt); free(sl);
    Py_DECREF(es); Py_DECREF(ss);
    return NULL;
}

/* classify(frame) -> the SEND frame it becomes, or None (Python's). */
static PyObject *Router_classify(Router *self, PyObject *arg) {
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0) return NULL;
    const route_t *rt = router_classify(self, b.buf, (size_t)b.len);
    PyObject *out = NULL;
    if (rt == NULL) {
        out = Py_NewRef(Py_None);
    } else if ((out = PyBytes_FromStringAndSize(NULL, b.len)) != NULL) {
        char *q = PyBytes_AS_STRING(out);
        send_header((uint8_t *)q, self->et, rt->ula);
        memcpy(q + ULP_HDR, (const char *)b.buf + ULP_HDR, (size_t)b.len - ULP_HDR);
    }
    PyBuffer_Release(&b);
    return out;
}

/* The frame count of a burst and the wait for room, checked. */
static int burst_args(PyObject *args, long *max, long *wait_us) {
    if (!PyArg_ParseTuple(args, "ll", max, wait_us)) return -1;
    if (*max < 1 || *max > BURST_MAX || *wait_us < 0 || *wait_us > 1000000) {
        PyErr_SetString(PyExc_ValueError, "burst: 1..256 frames, 0..1000000 us of waiting for room");
        return -1;
    }
    return 0;
}

/* The held SEND frames (msg[pend_lo, pend_hi), their frames still in buf) onto the out
   socket, waiting up to wait_us for room (without the GIL: the caller released it).  *sent
   and *nfailed (errnos in failed[0..*ndealt)) add what went and what was refused. */
static void router_send_held(Router *self, long wait_us, int *sent, int *nfailed, int *ndealt) {
    int n = self->pend_hi - self->pend_lo;
    int done = tx_frames(self->out_fd, self->msg + self->pend_lo, n, wait_us, self->failed);
    int bad = 0;
    for (int i = 0; i < done; i++) bad += self->failed[i] != 0;
    *sent += done - bad; *nfailed += bad; *ndealt = done;
    self->pend_lo += done;
    if (self->pend_lo == self->pend_hi) self->pend_lo = self->pend_hi = 0;
}

/* One burst: frames read into buf, the plain ones forwarded (held if no room within wait_us).
   *k frames read (fast_of says which were forwarded); returns how many were not. */
static int router_round(Router *self, long max, long wait_us, int *k, int *sent, int *nfailed, int *ndealt,
                        int *eof, int *rerr, int *oversized) {
    int nfast = 0;
    *k = rx_frames(self->in_fd, self->buf, self->cap, self->frame_max, self->burst_bytes, (int)max,
                   self->off, self->len, eof, rerr, oversized);
    for (int i = 0; i < *k; i++) {
        const uint8_t *f = self->buf + self->off[i];
        const route_t *rt = router_classify(self, f, self->len[i]);
        self->fast_of[i] = rt != NULL;
        if (rt == NULL) continue;
        send_header(self->hdr[nfast], self->et, rt->ula);
        self->iov[nfast][0] = (struct iovec){self->hdr[nfast], ULP_HDR};
        self->iov[nfast][1] = (struct iovec){(void *)(f + ULP_HDR), self->len[i] - ULP_HDR};
        memset(&self->msg[nfast], 0, sizeof self->msg[nfast]);
        self->msg[nfast].msg_hdr.msg_iov = self->iov[nfast];
        self->msg[nfast].msg_hdr.msg_iovlen = 2;
        nfast++;
    }
    self->pend_lo = 0;
    self->pend_hi = nfast;
    if (nfast) router_send_held(self, wait_us, sent, nfailed, ndealt);
    return *k - nfast;
}

/* More input on in_fd within linger_us (and before until)?  0 also when the other
   direction (out_fd, the other half's socket) has input: Python serves that. */
static int router_linger(Router *self, long linger_us, int64_t until) {
    int64_t left = until - now_us();
    if (left <= 0) return 0;
    if (left > linger_us) left = linger_us;
    struct pollfd p[2] = {{.fd = self->in_fd, .events = POLLIN}, {.fd = self->out_fd, .events = POLLIN}};
    struct timespec t = {.tv_sec = left / 1000000, .tv_nsec = (left % 1000000) * 1000};
    int r = ppoll(p, 2, &t, NULL);
    return r > 0 && p[0].revents && !p[1].revents;
}

/* burst(max_frames, wait_us, linger_us=0, slice_us=0) -> (sent, [frames for Python], [errnos
   of SEND frames the socket refused], eof, recv errno, oversized frames dropped, frames held).
   SEND frames the out socket has no room for within wait_us are held, in buf, and go first
   next time: until they have, nothing more is read (gsnd holds it: back-pressure, no copy).
   With linger_us, a burst whose frames all went waits that long for more and goes on, for
   up to slice_us in all, so Python wakes once a slice rather than once a frame; it returns
   at once for a frame Python must see, a held one, an error, or input on the other half's
   socket. */
static PyObject *Router_burst(Router *self, PyObject *args) {
    long max, wait_us, linger_us = 0, slice_us = 0;
    if (!PyArg_ParseTuple(args, "ll|ll", &max, &wait_us, &linger_us, &slice_us)) return NULL;
    if (max < 1 || max > BURST_MAX || wait_us < 0 || wait_us > 1000000 || linger_us < 0 || linger_us > 1000000
        || slice_us < 0 || slice_us > 1000000) {
        PyErr_SetString(PyExc_ValueError, "burst: 1..256 frames, 0..1000000 us of waiting, lingering and in all");
        return NULL;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Router: burst already running");
        return NULL;
    }
    self->busy = 1;
    int eof = 0, rerr = 0, oversized = 0, k = 0, sent = 0, nfailed = 0, ndealt = 0;
    Py_BEGIN_ALLOW_THREADS
    if (self->pend_hi > self->pend_lo)
        router_send_held(self, wait_us, &sent, &nfailed, &ndealt);
    if (self->pend_hi == self->pend_lo && nfailed == 0) {
        int64_t until = linger_us ? now_us() + slice_us : 0;
        while (router_round(self, max, wait_us, &k, &sent, &nfailed, &ndealt, &eof, &rerr, &oversized) == 0
               && k && linger_us && self->pend_hi == self->pend_lo && !nfailed && !eof && !rerr
               && router_linger(self, linger_us, until))
            ;
    }
    Py_END_ALLOW_THREADS
    self->busy = 0;
    PyObject *slow = PyList_New(0), *errs = errno_list(self->failed, ndealt);
    if (slow == NULL || errs == NULL) goto fail;
    for (int i = 0; i < k; i++)
        if (!self->fast_of[i] &&
            append_new(slow, PyBytes_FromStringAndSize((const char *)self->buf + self->off[i], (Py_ssize_t)self->len[i])) < 0)
            goto fail;
    return Py_BuildValue("(iNNiiii)", sent, slow, errs, eof, rerr, oversized, self->pend_hi - self->pend_lo);
fail:
    Py_XDECREF(slow); Py_XDECREF(errs);
    return NULL;
}

/* send_held() -> (sent, [errnos of frames refused], frames still held): what burst held,
   without waiting and without reading (pktwayd calls it while no frame comes in). */
static PyObject *Router_send_held(Router *self, PyObject *unused) {
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Router: burst already running");
        return NULL;
    }
    int sent = 0, nfailed = 0, ndealt = 0;
    if (self->pend_hi > self->pend_lo) router_send_held(self, 0, &sent, &nfailed, &ndealt);
    PyObject *errs = errno_list(self->failed, ndealt);
    return errs == NULL ? NULL : Py_BuildValue("(iNi)", sent, errs, self->pend_hi - self->pend_lo);
}

static PyObject *Router_held(Router *self, PyObject *unused) {
    return PyLong_FromLong(self->pend_hi - self->pend_lo);
}

static PyMethodDef Router_methods[] = {
    {"set_table", (PyCFunction)Router_set_table, METH_VARARGS,
     "set_table([(dt, ula, limit_words)], [router sources]): where plain L3 packets go"},
    {"classify", (PyCFunction)Router_classify, METH_O, "classify(frame) -> SEND frame or None"},
    {"burst", (PyCFunction)Router_burst, METH_VARARGS,
     "burst(max, wait_us, linger_us=0, slice_us=0) -> (sent, slow frames, send errnos, eof, recv errno, oversized, held)"},
    {"send_held", (PyCFunction)Router_send_held, METH_NOARGS, "send_held() -> (sent, send errnos, still held)"},
    {"held", (PyCFunction)Router_held, METH_NOARGS, "held() -> SEND frames held for want of room"},
    {NULL},
};

static PyTypeObject RouterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pktwayd._pwfast.Router",
    .tp_basicsize = sizeof(Router),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One direction of a half-router pair's plain L3 forwarding (ULP socket to ULP socket).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Router_init,
    .tp_dealloc = (destructor)Router_dealloc,
    .tp_methods = Router_methods,
};

/* ============================================================ Ip ============ */

typedef struct { uint8_t ip[16]; int alen; uint32_t addr, limit; } peer_t;

typedef struct {
    PyObject_HEAD
    PyObject *ulp_sock;  /* kept alive while its descriptor is in use */
    int tun_fd, ulp_fd, busy;
    uint16_t et;
    uint32_t addr;
    uint8_t router_ula[6];
    size_t frame_max, burst_bytes, cap, tun_read;
    uint8_t *buf;   /* ULP receive */
    uint8_t *tbuf;  /* TUN reads, BURST_MAX * tun_read */
    peer_t *peers;
    Py_ssize_t npeers;
    uint8_t hdr[BURST_MAX][ULP_HDR + 2 * W];
    size_t off[BURST_MAX], len[BURST_MAX];
    struct iovec iov[BURST_MAX][3];
    struct mmsghdr msg[BURST_MAX];
    int fast_of[BURST_MAX], failed[BURST_MAX];
    uint16_t pt_of[BURST_MAX];
} Ip;

static const uint8_t ZEROS[2 * W];

static const peer_t *ip_peer(const Ip *s, const uint8_t *a, int alen) {
    for (Py_ssize_t i = 0; i < s->npeers; i++)
        if (s->peers[i].alen == alen && memcmp(s->peers[i].ip, a, (size_t)alen) == 0) return &s->peers[i];
    return NULL;
}

/* pw0 -> SAN: the peer an IP packet goes to, and its PT; NULL: Python's. */
static const peer_t *ip_tx_classify(const Ip *s, const uint8_t *p, size_t n, uint16_t *pt) {
    const uint8_t *src, *dst;
    int alen;
    if (!ip_addresses(p, n, pt, &src, &dst, &alen)) return NULL;
    const peer_t *pe = ip_peer(s, dst, alen);
    if (pe == NULL || (pe->limit && n > pe->limit)) return NULL;
    return pe;
}

/* The ULP SEND header and EEP header of a packet to pe (h: ULP_HDR + 16 bytes). */
static void ip_tx_header(const Ip *s, uint8_t *h, const peer_t *pe, uint16_t pt, size_t n) {
    send_header(h, s->et, s->router_ula);
    size_t dl = (n + 7) / W, pad = (W - n % W) % W;
    put64(h + ULP_HDR, ((uint64_t)pe->addr << 32) | pt);
    put64(h + ULP_HDR + W, ((uint64_t)pad << 57) | ((uint64_t)dl << 32) | s->addr);
}

/* SAN -> pw0: the IP packet in a RECV frame (offset, length) and its PT; 0: Python's. */
static int ip_rx_classify(const Ip *s, const uint8_t *f, size_t n, size_t *ip_off, size_t *ip_len, uint16_t *pt) {
    if (n < ULP_HDR || f[0] != OP_RECV || f[1] > 3 || ((f[2] << 8) | f[3]) != s->et) return 0;
    eep_t e;
    if (!eep_plain(f + ULP_HDR, n - ULP_HDR, 0, &e)) return 0;
    if (e.dt != s->addr || (e.pt != PT_IPV4 && e.pt != PT_IPV6)) return 0;
    const uint8_t *p = f + ULP_HDR + 2 * W, *src, *dst;
    uint16_t ipt;
    int alen;
    if (!ip_addresses(p, e.data_len, &ipt, &src, &dst, &alen) || ipt != e.pt) return 0;
    if (ip_is_group(dst, alen) || ip_peer(s, src, alen) == NULL) return 0;
    *ip_off = ULP_HDR + 2 * W; *ip_len = e.data_len; *pt = e.pt;
    return 1;
}

static int Ip_init(Ip *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"tun_fd", "ulp_sock", "addr", "router_ula", "ethertype", "frame_max", "burst_bytes",
                             "tun_read", NULL};
    int tun;
    PyObject *ulp;
    unsigned int addr, et;
    const char *ula;
    Py_ssize_t ulen, frame_max, burst, tun_read;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iOIy#Innn", kwlist, &tun, &ulp, &addr, &ula, &ulen, &et, &frame_max,
                                     &burst, &tun_read))
        return -1;
    if (addr > 0xFFFFFF || ulen != 6 || et > 0xFFFF || frame_max < ULP_HDR + 1 || burst < 1 || tun_read < 1
        || frame_max > (1 << 28) || burst > (1 << 28) || tun_read > (1 << 20)) {
        PyErr_SetString(PyExc_ValueError, "Ip: address, ULA, ethertype or sizes out of range");
        return -1;
    }
    if (self->buf != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Ip: already initialised");
        return -1;
    }
    if ((self->ulp_fd = get_fd(ulp)) < 0) return -1;
    self->ulp_sock = Py_NewRef(ulp);
    self->tun_fd = tun;
    self->addr = addr;
    memcpy(self->router_ula, ula, 6);
    self->et = (uint16_t)et;
    self->frame_max = (size_t)frame_max;
    self->burst_bytes = (size_t)burst;
    self->cap = (size_t)burst + (size_t)frame_max + 8;
    self->tun_read = (size_t)tun_read;
    if ((self->buf = alloc_buf(self->cap)) == NULL) return -1;
    return (self->tbuf = alloc_buf(BURST_MAX * self->tun_read)) == NULL ? -1 : 0;
}

static void Ip_dealloc(Ip *self) {
    Py_XDECREF(self->ulp_sock);
    free(self->buf);
    free(self->tbuf);
    free(self->peers);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* set_peers([(packed unicast IP, PacketWay address, route MTU in bytes, 0 = none)]) */
static PyObject *Ip_set_peers(Ip *self, PyObject *arg) {
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Ip: peers changed during a burst");
        return NULL;
    }
    PyObject *es = PySequence_Fast(arg, "peers: a sequence");
    if (es == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(es);
    peer_t *pe = calloc((size_t)n + 1, sizeof *pe);
    if (pe == NULL) { Py_DECREF(es); return PyErr_NoMemory(); }
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *ip;
        Py_ssize_t ilen;
        unsigned int a, limit;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(es, i), "y#II", &ip, &ilen, &a, &limit)) goto fail;
        if ((ilen != 4 && ilen != 16) || a > 0xFFFFFF) {
            PyErr_SetString(PyExc_ValueError, "peer: a 4- or 16-byte address and a 24-bit PacketWay address");
            goto fail;
        }
        memcpy(pe[i].ip, ip, (size_t)ilen);
        pe[i].alen = (int)ilen; pe[i].addr = a; pe[i].limit = limit;
    }
    free(self->peers);
    self->peers = pe; self->npeers = n;
    Py_DECREF(es);
    Py_RETURN_NONE;
fail:
    free(pe);
    Py_DECREF(es);
    return NULL;
}

/* tx_one(ip packet) -> the SEND frame it becomes, or None (Python's). */
static PyObject *Ip_tx_one(Ip *self, PyObject *arg) {
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0) return NULL;
    uint16_t pt;
    const peer_t *pe = ip_tx_classify(self, b.buf, (size_t)b.len, &pt);
    PyObject *out;
    if (pe == NULL) {
        out = Py_NewRef(Py_None);
    } else {
        size_t n = (size_t)b.len, pad = (W - n % W) % W;
        out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(ULP_HDR + 2 * W + n + pad + W));
        if (out != NULL) {
            uint8_t *q = (uint8_t *)PyBytes_AS_STRING(out);
            ip_tx_header(self, q, pe, pt, n);
            memcpy(q + ULP_HDR + 2 * W, b.buf, n);
            memset(q + ULP_HDR + 2 * W + n, 0, pad + W);
        }
    }
    PyBuffer_Release(&b);
    return out;
}

/* rx_one(frame) -> the IP packet to write to pw0, or None (Python's). */
static PyObject *Ip_rx_one(Ip *self, PyObject *arg) {
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0) return NULL;
    size_t off, len;
    uint16_t pt;
    PyObject *out = ip_rx_classify(self, b.buf, (size_t)b.len, &off, &len, &pt)
        ? PyBytes_FromStringAndSize((const char *)b.buf + off, (Py_ssize_t)len) : Py_NewRef(Py_None);
    PyBuffer_Release(&b);
    return out;
}

static int begin(int *busy) {
    if (*busy) {
        PyErr_SetString(PyExc_RuntimeError, "Ip: burst already running");
        return -1;
    }
    *busy = 1;
    return 0;
}

/* tx_burst(max, wait_us) -> (sent v4, sent v6, [IP packets for Python], [SEND frames the
   socket had no room for within wait_us], [errnos of SEND frames it refused], TUN read errno)
   v4 and v6 count what went, or waits among the blocked frames; not what the socket refused. */
static PyObject *Ip_tx_burst(Ip *self, PyObject *args) {
    long max, wait_us;
    if (burst_args(args, &max, &wait_us) < 0 || begin(&self->busy) < 0) return NULL;
    int k = 0, nfast = 0, done, rerr = 0, n4 = 0, n6 = 0;
    Py_BEGIN_ALLOW_THREADS
    while (k < max) {
        ssize_t r = read(self->tun_fd, self->tbuf + (size_t)k * self->tun_read, self->tun_read);
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) rerr = errno;
            break;
        }
        self->len[k] = (size_t)r;
        uint16_t pt;
        const uint8_t *p = self->tbuf + (size_t)k * self->tun_read;
        const peer_t *pe = ip_tx_classify(self, p, (size_t)r, &pt);
        self->fast_of[k] = pe != NULL;
        if (pe != NULL) {
            size_t n = (size_t)r, pad = (W - n % W) % W;
            ip_tx_header(self, self->hdr[nfast], pe, pt, n);
            self->iov[nfast][0] = (struct iovec){self->hdr[nfast], ULP_HDR + 2 * W};
            self->iov[nfast][1] = (struct iovec){(void *)p, n};
            self->iov[nfast][2] = (struct iovec){(void *)ZEROS, pad + W};
            memset(&self->msg[nfast], 0, sizeof self->msg[nfast]);
            self->msg[nfast].msg_hdr.msg_iov = self->iov[nfast];
            self->msg[nfast].msg_hdr.msg_iovlen = 3;
            self->pt_of[nfast++] = pt;
        }
        k++;
    }
    done = tx_frames(self->ulp_fd, self->msg, nfast, wait_us, self->failed);
    for (int i = 0; i < nfast; i++)
        if (i >= done || !self->failed[i]) {
            if (self->pt_of[i] == PT_IPV4) n4++; else n6++;
        }
    Py_END_ALLOW_THREADS
    self->busy = 0;
    PyObject *slow = PyList_New(0), *blocked = PyList_New(0), *errs = errno_list(self->failed, done);
    if (slow == NULL || blocked == NULL || errs == NULL) goto fail;
    for (int i = 0; i < k; i++)
        if (!self->fast_of[i] && append_new(slow, PyBytes_FromStringAndSize(
                (const char *)self->tbuf + (size_t)i * self->tun_read, (Py_ssize_t)self->len[i])) < 0)
            goto fail;
    for (int i = done; i < nfast; i++)
        if (append_new(blocked, iov_bytes(&self->msg[i].msg_hdr)) < 0) goto fail;
    return Py_BuildValue("(iiNNNi)", n4, n6, slow, blocked, errs, rerr);
fail:
    Py_XDECREF(slow); Py_XDECREF(blocked); Py_XDECREF(errs);
    return NULL;
}

/* rx_burst(max) -> (written v4, written v6, [frames for Python], eof, recv errno,
   TUN writes refused as full, [other TUN write errnos], oversized frames dropped) */
static PyObject *Ip_rx_burst(Ip *self, PyObject *arg) {
    long max = PyLong_AsLong(arg);
    if (max == -1 && PyErr_Occurred()) return NULL;
    if (max < 1 || max > BURST_MAX) {
        PyErr_SetString(PyExc_ValueError, "rx_burst: 1..256 frames");
        return NULL;
    }
    if (begin(&self->busy) < 0) return NULL;
    int k, eof = 0, rerr = 0, n4 = 0, n6 = 0, full = 0, nwerr = 0, oversized = 0;
    int werr[BURST_MAX];
    Py_BEGIN_ALLOW_THREADS
    k = rx_frames(self->ulp_fd, self->buf, self->cap, self->frame_max, self->burst_bytes, (int)max, self->off,
                  self->len, &eof, &rerr, &oversized);
    for (int i = 0; i < k; i++) {
        size_t off, len;
        uint16_t pt;
        const uint8_t *f = self->buf + self->off[i];
        self->fast_of[i] = ip_rx_classify(self, f, self->len[i], &off, &len, &pt);
        if (!self->fast_of[i]) continue;
        if (pt == PT_IPV4) n4++; else n6++;
        ssize_t w;
        do w = write(self->tun_fd, f + off, len); while (w < 0 && errno == EINTR);
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) full++;
        else if (w < 0) werr[nwerr++] = errno;
    }
    Py_END_ALLOW_THREADS
    self->busy = 0;
    PyObject *slow = PyList_New(0), *errs = PyList_New(0);
    if (slow == NULL || errs == NULL) goto fail;
    for (int i = 0; i < k; i++)
        if (!self->fast_of[i] && append_new(slow, PyBytes_FromStringAndSize(
                (const char *)self->buf + self->off[i], (Py_ssize_t)self->len[i])) < 0)
            goto fail;
    for (int i = 0; i < nwerr; i++)
        if (append_new(errs, PyLong_FromLong(werr[i])) < 0) goto fail;
    return Py_BuildValue("(iiNiiiNi)", n4, n6, slow, eof, rerr, full, errs, oversized);
fail:
    Py_XDECREF(slow); Py_XDECREF(errs);
    return NULL;
}

static PyMethodDef Ip_methods[] = {
    {"set_peers", (PyCFunction)Ip_set_peers, METH_O, "set_peers([(packed IP, address, route MTU bytes)])"},
    {"tx_one", (PyCFunction)Ip_tx_one, METH_O, "tx_one(IP packet) -> SEND frame or None"},
    {"rx_one", (PyCFunction)Ip_rx_one, METH_O, "rx_one(RECV frame) -> IP packet or None"},
    {"tx_burst", (PyCFunction)Ip_tx_burst, METH_VARARGS,
     "tx_burst(max, wait_us) -> (v4, v6, slow IP packets, blocked frames, send errnos, read errno)"},
    {"rx_burst", (PyCFunction)Ip_rx_burst, METH_O,
     "rx_burst(max) -> (v4, v6, slow frames, eof, recv errno, TUN full, TUN write errnos, oversized)"},
    {NULL},
};

static PyTypeObject IpType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pktwayd._pwfast.Ip",
    .tp_basicsize = sizeof(Ip),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "pw0's plain IP packets between the TUN device and gsnd's ULP socket.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Ip_init,
    .tp_dealloc = (destructor)Ip_dealloc,
    .tp_methods = Ip_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "pktwayd._pwfast", "IP across PacketWay, the common shape compiled.", -1, NULL,
};

PyMODINIT_FUNC PyInit__pwfast(void) {
    if (PyType_Ready(&RouterType) < 0 || PyType_Ready(&IpType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Router", (PyObject *)&RouterType) < 0
        || PyModule_AddObjectRef(m, "Ip", (PyObject *)&IpType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
