/* The IPoIB emulation's compiled data path (issue 15; README "IP over an
 * InfiniBand-style fabric").  The Python cores stay the oracle and own every decision
 * that changes state; this module only carries the steady state they describe:
 *
 *   Port (ipoibd):  TAP read -> a unicast IPv4 / non-ICMPv6 IPv6 frame whose destination
 *                   MAC the port core has RESOLVED (pushed here by set_neighbours) ->
 *                   LRH/BTH/DETH + ICRC -> sendmmsg to the switch;
 *                   recvmmsg -> a well-formed LRH-only UD packet for one of our QPs with
 *                   the ICRC, P_Key, Q_Key and length the core would accept -> MAC
 *                   rewrite -> write(TAP).
 *   Switch (ib-switch): recvmmsg -> unicast DLID in the LFT (set_lft) -> sendmmsg to the
 *                   out port, the datagrams never copied.
 *
 * Anything else (ARP, ND, multicast, unknown or unresolved destinations, hellos,
 * malformed or refused packets) is handed back to Python as bytes, one at a time and
 * in arrival order (a pump stops at it after flushing what it batched), so the core
 * sees exactly the sequence it would have seen and counts every drop itself.  The
 * fast path never drops a packet, except what a socket or TAP refuses (counted by
 * errno, as the Python drivers count them).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <time.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "_udpio.h" /* daemons/: GRO receives, GSO sends */

/* Framing (ib/constants.py, spec 2.1) */
#define LRH 8
#define BTH 12
#define DETH 8
#define ICRC 4
#define HDRS (LRH + BTH + DETH)
#define LNH_LOCAL 2
#define OPCODE_UD_SEND_ONLY 0x64
#define LID_PERMISSIVE 0xFFFF
#define LID_MCAST_MIN 0xC000
#define QPN_MCAST 0xFFFFFF
#define REMAC_QPN_LA 0x02000000u
#define PKEY_FULL 0x8000
#define PKEY_MASK 0x7FFF
#define MAX_PKT_BYTES (2047 * 4)
#define ETH_HDR 14
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ICMPV6 58

/* Sizes of this module; project choice */
#define BATCH 32            /* datagrams per recvmmsg / sendmmsg */
#define DGRAM_MAX 65535     /* ib/constants.py DATAGRAM_MAX */
#define FRAME_MAX 65600     /* daemons/io/tap.py READ_BYTES */
#define MAX_IFACES 16
#define MAX_PORTS 64        /* ib/constants.py MAX_SWITCH_PORTS */
#define ERRNOS 160
#define NEIGH_SLOTS_MAX 32768

/* ------------------------------------------------------------------ CRC-32 (zlib's) */
static uint32_t crc_tab[8][256];

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_tab[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_tab[t][i] = (crc_tab[t - 1][i] >> 8) ^ crc_tab[0][crc_tab[t - 1][i] & 0xFF];
}

/* The running (inverted) CRC over p[0..n) */
static uint32_t crc_run(uint32_t c, const uint8_t *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        c = crc_tab[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
        n--;
    }
    while (n >= 8) {
        uint32_t a, b;
        memcpy(&a, p, 4);
        memcpy(&b, p + 4, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        a = __builtin_bswap32(a);
        b = __builtin_bswap32(b);
#endif
        a ^= c;
        c = crc_tab[7][a & 0xFF] ^ crc_tab[6][(a >> 8) & 0xFF] ^ crc_tab[5][(a >> 16) & 0xFF] ^ crc_tab[4][a >> 24]
            ^ crc_tab[3][b & 0xFF] ^ crc_tab[2][(b >> 8) & 0xFF] ^ crc_tab[1][(b >> 16) & 0xFF] ^ crc_tab[0][b >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = crc_tab[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

/* ib/packet.py icrc() for an LRH-only packet: LRH VL and the BTH reserved byte read as ones. */
static uint32_t icrc_local(const uint8_t *pkt, size_t body)
{
    uint8_t h[LRH + BTH];
    memcpy(h, pkt, sizeof h);
    h[0] |= 0xF0;
    h[LRH + 4] = 0xFF;
    uint32_t c = crc_run(0xFFFFFFFFu, h, sizeof h);
    return ~crc_run(c, pkt + sizeof h, body - sizeof h);
}

static inline uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }
static inline void put16(uint8_t *p, unsigned v) { p[0] = v >> 8; p[1] = v; }
static inline void put32(uint8_t *p, uint32_t v) { p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v; }

/* ------------------------------------------------------------------ shared I/O helpers */
typedef struct {
    uint64_t n[ERRNOS];
} Errnos;

static inline void count_errno(Errnos *e, int err) { e->n[err > 0 && err < ERRNOS ? err : ERRNOS - 1]++; }

static int errnos_into(PyObject *d, const char *prefix, const Errnos *e)
{
    for (int i = 0; i < ERRNOS; i++) {
        if (!e->n[i])
            continue;
        PyObject *k = Py_BuildValue("(si)", prefix, i), *v = PyLong_FromUnsignedLongLong(e->n[i]);
        int r = k && v ? PyDict_SetItem(d, k, v) : -1;
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (r < 0)
            return -1;
    }
    return 0;
}

static int count_into(PyObject *d, const char *where, const char *name, uint64_t n)
{
    if (!n)
        return 0;
    PyObject *k = Py_BuildValue("(ss)", where, name), *v = PyLong_FromUnsignedLongLong(n);
    int r = k && v ? PyDict_SetItem(d, k, v) : -1;
    Py_XDECREF(k);
    Py_XDECREF(v);
    return r;
}

/* host, port -> sockaddr (numeric only; the daemons resolved it already) */
static int parse_addr(const char *host, int port, struct sockaddr_storage *ss, socklen_t *len)
{
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons(port);
        *len = sizeof *a4;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons(port);
        *len = sizeof *a6;
        return 0;
    }
    PyErr_Format(PyExc_ValueError, "%s is not a numeric IP address", host);
    return -1;
}

#define GSO_SEGMENTS 64     /* the kernel's UDP_MAX_SEGMENTS */
#define GSO_BYTES 65000     /* below the largest UDP payload over IPv4 or IPv6 */
#define SEGS (BATCH * GSO_SEGMENTS)

/* Ask the kernel to coalesce a run of datagrams from one source into one receive (UDP GRO). */
static void enable_gro(int fd)
{
    int one = 1;
    if (fd >= 0)
        (void)setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one);
}

/* A receive ring: one recvmmsg fills it, GRO-coalesced receives are cut back into their
 * datagrams, and the pump consumes those in order across calls. */
typedef struct {
    uint8_t *buf; /* BATCH * (DGRAM_MAX + 1) */
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    struct sockaddr_storage src[BATCH];
    UdpioCtl ctl[BATCH];
    const uint8_t *seg[SEGS];
    uint32_t seglen[SEGS];
    uint8_t segmsg[SEGS];
    int n, next;
} Ring;

#define RING_SLOT (DGRAM_MAX + 1)

static int ring_alloc(Ring *r)
{
    r->buf = PyMem_Malloc((size_t)BATCH * RING_SLOT);
    r->n = r->next = 0;
    if (!r->buf) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* Refill an empty ring: how many datagrams it now holds (0 when every receive was cut short,
 * counted as EMSGSIZE), -1 when nothing is waiting (or a receive error was counted). */
static int ring_fill(Ring *r, int fd, Errnos *err)
{
    for (int i = 0; i < BATCH; i++) {
        r->iov[i].iov_base = r->buf + (size_t)i * RING_SLOT;
        r->iov[i].iov_len = RING_SLOT;
        memset(&r->msgs[i].msg_hdr, 0, sizeof r->msgs[i].msg_hdr);
        r->msgs[i].msg_hdr.msg_iov = &r->iov[i];
        r->msgs[i].msg_hdr.msg_iovlen = 1;
        r->msgs[i].msg_hdr.msg_name = &r->src[i];
        r->msgs[i].msg_hdr.msg_namelen = sizeof r->src[i];
        r->msgs[i].msg_hdr.msg_control = r->ctl[i].buf;
        r->msgs[i].msg_hdr.msg_controllen = sizeof r->ctl[i].buf;
    }
    r->next = r->n = 0;
    int n = recvmmsg(fd, r->msgs, BATCH, MSG_DONTWAIT, NULL);
    if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            count_errno(err, errno);
        return -1;
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        size_t len = r->msgs[i].msg_len;
        const uint8_t *d = r->iov[i].iov_base;
        if (len > DGRAM_MAX || r->msgs[i].msg_hdr.msg_flags & MSG_TRUNC) { /* larger than any datagram */
            count_errno(err, EMSGSIZE);
            continue;
        }
        size_t step = (size_t)udpio_gro_size(&r->msgs[i].msg_hdr);
        if (!step || step >= len)
            step = len ? len : 1;
        for (size_t off = 0; (off < len || (!len && !off)) && k < SEGS; off += step) {
            r->seg[k] = d + off;
            r->seglen[k] = (uint32_t)(len - off < step ? len - off : step);
            r->segmsg[k++] = (uint8_t)i;
            if (!len)
                break;
        }
    }
    r->n = k;
    return k;
}

/* Take the ring's next datagram: 1 with *d / *n when it came from ``peer``, 0 when it came
 * from anyone else (counted in *foreign: io's Udp.drain check). */
static int ring_take(Ring *r, const struct sockaddr_storage *peer, uint64_t *foreign, const uint8_t **d, size_t *n)
{
    int i = r->next++, m = r->segmsg[i];
    if (!udpio_same_peer(&r->src[m], r->msgs[m].msg_hdr.msg_namelen, peer)) {
        (*foreign)++;
        return 0;
    }
    *d = r->seg[i];
    *n = r->seglen[i];
    return 1;
}

/* A send batch: iovecs (into our buffers or a ring) to one destination, sent as GSO runs
 * (consecutive datagrams of one size, the last may be shorter) by sendmmsg. */
typedef struct {
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    UdpioCtl ctl[BATCH];
    int segs[BATCH]; /* datagrams in each message */
    int n, no_gso;
} Batch;

/* The messages for iov[from..n): returns how many. */
static int batch_runs(Batch *b, int from, struct sockaddr_storage *peer, socklen_t plen)
{
    int m = 0;
    for (int i = from; i < b->n; m++) {
        int run = b->no_gso ? 1 : udpio_run(&b->iov[i], b->n - i, GSO_SEGMENTS, GSO_BYTES);
        struct msghdr *h = &b->msgs[m].msg_hdr;
        memset(h, 0, sizeof *h);
        h->msg_iov = &b->iov[i];
        h->msg_iovlen = (size_t)run;
        h->msg_name = peer;
        h->msg_namelen = plen;
        if (run > 1)
            udpio_set_segment(h, &b->ctl[m], (uint16_t)b->iov[i].iov_len);
        b->segs[m] = run;
        i += run;
    }
    return m;
}

/* Send everything batched; a datagram the socket refuses is counted and skipped (ib/udp.py
 * Udp.send: EAGAIN is drop_send_buffer_full, others by errno).  A socket that refuses GSO
 * (EMSGSIZE: segments above the route MTU, which plain datagrams may still cross as
 * fragments) gets one datagram per message from then on. */
static void batch_flush(Batch *b, int fd, struct sockaddr_storage *peer, socklen_t plen, Errnos *err)
{
    int done = 0;
    while (done < b->n) {
        int m = batch_runs(b, done, peer, plen), i = 0;
        while (i < m) {
            int k = sendmmsg(fd, b->msgs + i, (unsigned)(m - i), MSG_DONTWAIT);
            if (k > 0) {
                for (int q = i; q < i + k; q++)
                    done += b->segs[q];
                i += k;
                continue;
            }
            int e = k < 0 ? (errno == EWOULDBLOCK ? EAGAIN : errno) : EIO;
            if (b->segs[i] > 1 && !b->no_gso && (e == EIO || e == EINVAL || e == EMSGSIZE || e == EOPNOTSUPP || e == ENOPROTOOPT)) {
                b->no_gso = 1;
                break; /* the rest again, one datagram per message */
            }
            for (int q = 0; q < b->segs[i]; q++)
                count_errno(err, e);
            done += b->segs[i++];
        }
    }
    b->n = 0;
}

/* A frame or datagram the pump thread hands to Python; its source waits (paused) until
 * Python has run it through the core and resumes the source, so the order holds. */
typedef struct {
    uint8_t *data;
    size_t len;
    int full, paused;
} Slot;

typedef struct {
    pthread_mutex_t lock;
    pthread_t thread;
    int running, wake_fd, note_fd;
    double clock_offset; /* trio's clock minus CLOCK_MONOTONIC */
} Thread;

static double thread_now(Thread *t)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return t->clock_offset + (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Park a copy in the slot, pause the source and tell Python (lock held). */
static void slot_fill(Thread *t, Slot *sl, const uint8_t *d, size_t n)
{
    sl->data = malloc(n ? n : 1);
    if (sl->data)
        memcpy(sl->data, d, n);
    sl->len = sl->data ? n : 0;
    sl->full = sl->paused = 1;
    uint64_t one = 1;
    if (write(t->note_fd, &one, sizeof one) < 0) { /* an eventfd only refuses at 2^64 - 2 */
    }
}

static void drain_fd(int fd)
{
    uint64_t v;
    if (read(fd, &v, sizeof v) < 0) {
    }
}

static int thread_start(Thread *t, void *(*fn)(void *), void *arg, double offset)
{
    if (t->running) {
        PyErr_SetString(PyExc_RuntimeError, "already started");
        return -1;
    }
    t->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    t->note_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (t->wake_fd < 0 || t->note_fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    t->clock_offset = offset;
    t->running = 1;
    sigset_t all, old; /* the thread takes no signals: they stay the interpreter's */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int e = pthread_create(&t->thread, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e) {
        t->running = 0;
        errno = e;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

static void thread_wake(Thread *t)
{
    uint64_t one = 1;
    if (t->running && write(t->wake_fd, &one, sizeof one) < 0) {
    }
}

static void thread_stop(Thread *t)
{
    if (!t->running)
        return;
    uint64_t one = 1;
    pthread_mutex_lock(&t->lock);
    t->running = 0;
    pthread_mutex_unlock(&t->lock);
    if (write(t->wake_fd, &one, sizeof one) < 0) {
    }
    Py_BEGIN_ALLOW_THREADS
    pthread_join(t->thread, NULL);
    Py_END_ALLOW_THREADS
    close(t->wake_fd);
    close(t->note_fd);
    t->wake_fd = t->note_fd = -1;
}

/* take_slow -> [(source, bytes)] of the filled slots (lock held by the caller) */
static PyObject *slots_take(Slot *slots, int n, int (*source_of)(void *, int), void *ctx)
{
    PyObject *out = PyList_New(0);
    for (int i = 0; out && i < n; i++) {
        if (!slots[i].full)
            continue;
        /* a copy that found no memory comes up empty: the core counts it as a runt */
        PyObject *t = Py_BuildValue("(iy#)", source_of(ctx, i), slots[i].data ? (const char *)slots[i].data : "",
                                    (Py_ssize_t)slots[i].len);
        if (!t || PyList_Append(out, t) < 0) {
            Py_XDECREF(t);
            Py_CLEAR(out);
            break;
        }
        Py_DECREF(t);
        free(slots[i].data);
        slots[i].data = NULL;
        slots[i].full = 0;
    }
    return out;
}

/* What a pump thread polls and runs, per source s: its descriptor (-1: not polled), whether
 * its receive ring still holds datagrams (run it without waiting), and its pump (1 with
 * *slow / *slen: the first frame or datagram the Python core must see). */
typedef struct {
    int (*fd)(void *ctx, int s);
    int (*left)(void *ctx, int s);
    int (*pump)(void *ctx, int s, double now, const uint8_t **slow, size_t *slen);
} PumpOps;

#define MAX_SOURCES (MAX_PORTS > MAX_IFACES + 1 ? MAX_PORTS : MAX_IFACES + 1)

/* A pump thread's loop (Port's and Switch's): poll every source not waiting on Python, run
 * the pumps of the ready ones (GIL not held, the lock held while a pump runs); what the core
 * must see goes to the source's slot, which pauses it until Python resumes it. */
static void pump_loop(Thread *t, Slot *pend, int nsrc, const PumpOps *ops, void *ctx)
{
    struct pollfd fds[MAX_SOURCES + 1];
    int src[MAX_SOURCES + 1], left[MAX_SOURCES];
    pthread_mutex_lock(&t->lock);
    while (t->running) {
        int n = 0, any_left = 0;
        for (int s = 0; s < nsrc; s++) {
            left[s] = !pend[s].paused && ops->left(ctx, s);
            any_left |= left[s];
            int fd = pend[s].paused ? -1 : ops->fd(ctx, s);
            if (fd >= 0) {
                fds[n] = (struct pollfd){.fd = fd, .events = POLLIN};
                src[n++] = s;
            }
        }
        fds[n] = (struct pollfd){.fd = t->wake_fd, .events = POLLIN};
        src[n++] = -1;
        pthread_mutex_unlock(&t->lock);
        int r = poll(fds, (nfds_t)n, any_left ? 0 : -1);
        pthread_mutex_lock(&t->lock);
        if (r < 0 || !t->running)
            continue;
        double now = thread_now(t);
        for (int k = 0; k < n; k++) {
            int s = src[k];
            if (s < 0) {
                if (fds[k].revents)
                    drain_fd(t->wake_fd);
                continue;
            }
            if (!(fds[k].revents || left[s]) || pend[s].paused)
                continue;
            if (fds[k].revents & POLLNVAL) { /* closed under us: stop polling it until resumed */
                pend[s].paused = 1;
                continue;
            }
            const uint8_t *slow;
            size_t slen;
            if (ops->pump(ctx, s, now, &slow, &slen))
                slot_fill(t, &pend[s], slow, slen);
        }
    }
    pthread_mutex_unlock(&t->lock);
}

/* ================================================================== Port (ipoibd) */
typedef struct {
    int tap_fd, up;
    uint32_t qpn, qkey;
    uint16_t pkey;
    Py_ssize_t mtu;
    uint64_t tx_frames, rx_frames;
    Errnos tap_read, tap_write;
} Iface;

typedef struct {
    uint8_t live, used, sl, iface;
    uint8_t mac[6];
    uint16_t dlid;
    uint32_t dqpn;
    uint64_t seq; /* order of last use (the REMAC cache's LRU order) */
    double last;
} Neigh;

typedef struct {
    PyObject_HEAD
    int sock_fd;
    struct sockaddr_storage peer;
    socklen_t peer_len;
    int registered;
    uint16_t lid;
    uint8_t mac[6];
    int nifaces;
    Iface ifaces[MAX_IFACES];
    Neigh *neighs;
    size_t slots; /* power of two, 0 = no table */
    uint64_t useseq;
    Ring ring;
    Batch tx;
    uint8_t *txbuf; /* BATCH * MAX_PKT_BYTES */
    uint8_t *frame; /* FRAME_MAX: one TAP read */
    uint8_t *rxframe; /* FRAME_MAX: one frame to write */
    uint64_t foreign;
    Errnos send_err, recv_err;
    Thread th;
    Slot pend[MAX_IFACES + 1]; /* per TAP, then the cable */
    long budget;                /* frames / datagrams the thread takes from one source per turn */
} Port;

#define CABLE_SLOT MAX_IFACES

static size_t neigh_hash(int iface, const uint8_t *mac)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)iface;
    for (int i = 0; i < 6; i++)
        h = (h ^ mac[i]) * 1099511628211ull;
    return (size_t)(h ^ (h >> 29));
}

static Neigh *neigh_find(Port *p, int iface, const uint8_t *mac)
{
    if (!p->slots)
        return NULL;
    size_t m = p->slots - 1;
    for (size_t i = neigh_hash(iface, mac) & m;; i = (i + 1) & m) {
        Neigh *n = &p->neighs[i];
        if (!n->live)
            return NULL;
        if (n->iface == iface && !memcmp(n->mac, mac, 6))
            return n;
    }
}

static void Port_dealloc(Port *p)
{
    thread_stop(&p->th);
    pthread_mutex_destroy(&p->th.lock);
    for (int i = 0; i <= MAX_IFACES; i++)
        free(p->pend[i].data);
    PyMem_Free(p->neighs);
    PyMem_Free(p->ring.buf);
    PyMem_Free(p->txbuf);
    PyMem_Free(p->frame);
    PyMem_Free(p->rxframe);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static int Port_init(Port *p, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"sock_fd", "peer_host", "peer_port", NULL};
    const char *host;
    int port;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "isi", kwlist, &p->sock_fd, &host, &port))
        return -1;
    if (p->th.running) {
        PyErr_SetString(PyExc_RuntimeError, "the pump thread runs");
        return -1;
    }
    if (parse_addr(host, port, &p->peer, &p->peer_len) < 0)
        return -1;
    enable_gro(p->sock_fd);
    if (!p->txbuf) { /* first init */
        pthread_mutex_init(&p->th.lock, NULL);
        p->th.wake_fd = p->th.note_fd = -1;
    }
    if (!p->ring.buf && ring_alloc(&p->ring) < 0)
        return -1;
    if (!p->txbuf)
        p->txbuf = PyMem_Malloc((size_t)BATCH * MAX_PKT_BYTES);
    if (!p->frame)
        p->frame = PyMem_Malloc(FRAME_MAX);
    if (!p->rxframe)
        p->rxframe = PyMem_Malloc(FRAME_MAX);
    if (!p->txbuf || !p->frame || !p->rxframe) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* configure(lid, registered, mac, ifaces=[(tap_fd, up, qpn, pkey, qkey, mtu)]) */
static PyObject *Port_configure(Port *p, PyObject *args)
{
    int lid, registered;
    const char *mac;
    Py_ssize_t maclen;
    PyObject *ifaces;
    if (!PyArg_ParseTuple(args, "ipy#O!", &lid, &registered, &mac, &maclen, &PyList_Type, &ifaces))
        return NULL;
    if (maclen != 6 || PyList_GET_SIZE(ifaces) > MAX_IFACES) {
        PyErr_SetString(PyExc_ValueError, "a 6-byte MAC and at most 16 interfaces");
        return NULL;
    }
    Iface tmp[MAX_IFACES];
    Py_ssize_t n = PyList_GET_SIZE(ifaces);
    if (n < p->nifaces) {
        PyErr_SetString(PyExc_ValueError, "interfaces cannot be removed");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Iface *f = &tmp[i];
        int up;
        unsigned int qpn, pkey, qkey;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(ifaces, i), "ipIIIn", &f->tap_fd, &up, &qpn, &pkey, &qkey, &f->mtu))
            return NULL;
        f->up = up;
        f->qpn = qpn & 0xFFFFFF;
        f->pkey = pkey & 0xFFFF;
        f->qkey = qkey;
    }
    pthread_mutex_lock(&p->th.lock);
    for (Py_ssize_t i = 0; i < n; i++) { /* counters survive a reconfiguration */
        Iface *f = &p->ifaces[i];
        f->tap_fd = tmp[i].tap_fd;
        f->up = tmp[i].up;
        f->qpn = tmp[i].qpn;
        f->pkey = tmp[i].pkey;
        f->qkey = tmp[i].qkey;
        f->mtu = tmp[i].mtu;
    }
    p->nifaces = (int)n;
    p->lid = lid & 0xFFFF;
    p->registered = registered;
    memcpy(p->mac, mac, 6);
    pthread_mutex_unlock(&p->th.lock);
    thread_wake(&p->th); /* the descriptors to poll may have changed */
    Py_RETURN_NONE;
}

/* set_neighbours([(iface, mac, dlid, dqpn, sl)]): the RESOLVED entries, replacing all. */
static PyObject *Port_set_neighbours(Port *p, PyObject *arg)
{
    if (!PyList_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(arg);
    size_t slots = 0;
    if (n) {
        slots = 16;
        while (slots < (size_t)n * 2 && slots < NEIGH_SLOTS_MAX)
            slots <<= 1;
    }
    Neigh *t = slots ? PyMem_Calloc(slots, sizeof *t) : NULL;
    if (slots && !t)
        return PyErr_NoMemory();
    size_t used = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int iface, sl;
        const char *mac;
        Py_ssize_t maclen;
        unsigned int dlid, dqpn;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(arg, i), "iy#IIi", &iface, &mac, &maclen, &dlid, &dqpn, &sl)) {
            PyMem_Free(t);
            return NULL;
        }
        if (maclen != 6 || iface < 0 || iface >= MAX_IFACES) {
            PyMem_Free(t);
            PyErr_SetString(PyExc_ValueError, "(iface 0..15, 6-byte MAC, dlid, dqpn, sl)");
            return NULL;
        }
        if (used * 2 >= slots) /* beyond the table: those frames take the Python path */
            continue;
        size_t m = slots - 1, j = neigh_hash(iface, (const uint8_t *)mac) & m;
        while (t[j].live && !(t[j].iface == iface && !memcmp(t[j].mac, mac, 6)))
            j = (j + 1) & m;
        if (!t[j].live)
            used++;
        Neigh *e = &t[j];
        e->live = 1;
        e->iface = (uint8_t)iface;
        memcpy(e->mac, mac, 6);
        e->dlid = dlid & 0xFFFF;
        e->dqpn = dqpn & 0xFFFFFF;
        e->sl = sl & 0xF;
    }
    pthread_mutex_lock(&p->th.lock);
    for (size_t j = 0; j < slots; j++) { /* keep an unreported use */
        Neigh *e = &t[j], *old = e->live ? neigh_find(p, e->iface, e->mac) : NULL;
        if (old && old->used) {
            e->used = 1;
            e->seq = old->seq;
            e->last = old->last;
        }
    }
    Neigh *gone = p->neighs;
    p->neighs = t;
    p->slots = slots;
    pthread_mutex_unlock(&p->th.lock);
    PyMem_Free(gone);
    Py_RETURN_NONE;
}

/* take_used() -> [(iface, mac, last use time)] in the order of last use, flags cleared */
static int seq_cmp(const void *a, const void *b)
{
    const Neigh *x = *(Neigh *const *)a, *y = *(Neigh *const *)b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static PyObject *take_used_locked(Port *p);

static PyObject *Port_take_used(Port *p, PyObject *Py_UNUSED(ignored))
{
    pthread_mutex_lock(&p->th.lock);
    PyObject *r = take_used_locked(p);
    pthread_mutex_unlock(&p->th.lock);
    return r;
}

static PyObject *take_used_locked(Port *p)
{
    size_t k = 0;
    for (size_t i = 0; i < p->slots; i++)
        k += p->neighs[i].live && p->neighs[i].used;
    PyObject *out = PyList_New(0);
    if (!out || !k)
        return out;
    Neigh **v = PyMem_Malloc(k * sizeof *v);
    if (!v) {
        Py_DECREF(out);
        return PyErr_NoMemory();
    }
    k = 0;
    for (size_t i = 0; i < p->slots; i++)
        if (p->neighs[i].live && p->neighs[i].used)
            v[k++] = &p->neighs[i];
    qsort(v, k, sizeof *v, seq_cmp);
    for (size_t i = 0; i < k; i++) {
        PyObject *t = Py_BuildValue("(iy#d)", v[i]->iface, (const char *)v[i]->mac, (Py_ssize_t)6, v[i]->last);
        if (!t || PyList_Append(out, t) < 0) {
            Py_XDECREF(t);
            Py_DECREF(out);
            PyMem_Free(v);
            return NULL;
        }
        Py_DECREF(t);
        v[i]->used = 0;
    }
    PyMem_Free(v);
    return out;
}

/* IPv4, or IPv6 that is surely neither Neighbor Discovery (ib/nd.py rewrites it) nor a
 * kernel probe (ib/portcore.py _is_probe): ICMPv6 types 133-137 go to the core. */
static inline int plain_ip(unsigned etype, const uint8_t *body, size_t blen)
{
    if (etype == ETH_P_IP)
        return 1;
    if (etype != ETH_P_IPV6)
        return 0;
    return !(blen > 40 && body[6] == ICMPV6 && body[40] >= 133 && body[40] <= 137); /* nd.py ND_TYPES */
}

/* One TAP frame of interface ifi -> the UD packet in out (its length), or 0: the Python core decides. */
static size_t port_tx(Port *p, int ifi, const uint8_t *f, size_t len, uint8_t *out, double now)
{
    Iface *ifc = &p->ifaces[ifi];
    if (!ifc->up || len < ETH_HDR || f[0] & 1)
        return 0;
    unsigned etype = be16(f + 12);
    size_t blen = len - ETH_HDR, plen = 4 + blen;
    if (!plain_ip(etype, f + ETH_HDR, blen) || plen > (size_t)ifc->mtu + 4)
        return 0;
    size_t pad = -plen & 3, total = HDRS + plen + pad + ICRC;
    if (total > MAX_PKT_BYTES)
        return 0;
    Neigh *n = neigh_find(p, ifi, f);
    if (!n)
        return 0;
    out[0] = 0;                           /* VL 0, LVer 0 */
    out[1] = (uint8_t)(n->sl << 4 | LNH_LOCAL);
    put16(out + 2, n->dlid);
    put16(out + 4, (unsigned)(total / 4));
    put16(out + 6, p->lid);
    out[8] = OPCODE_UD_SEND_ONLY;
    out[9] = (uint8_t)(pad << 4);
    put16(out + 10, ifc->pkey);
    put32(out + 12, n->dqpn);
    put32(out + 16, 0);                   /* PSN */
    put32(out + 20, ifc->qkey);
    put32(out + 24, ifc->qpn);
    put16(out + HDRS, etype);
    put16(out + HDRS + 2, 0);
    memcpy(out + HDRS + 4, f + ETH_HDR, blen);
    memset(out + HDRS + plen, 0, pad);
    put32(out + total - ICRC, icrc_local(out, total - ICRC));
    n->used = 1;
    n->seq = ++p->useseq;
    n->last = now;
    ifc->tx_frames++;
    return total;
}

static inline int may_talk(unsigned a, unsigned b)
{
    return (a & PKEY_MASK) == (b & PKEY_MASK) && ((a | b) & PKEY_FULL);
}

/* One cable datagram -> the Ethernet frame in out for interface *ifi, or 0: the Python core decides. */
static size_t port_rx(Port *p, const uint8_t *d, size_t n, uint8_t *out, int *ifi)
{
    if (n < HDRS + ICRC || n > MAX_PKT_BYTES || (d[0] & 0x0F) || (d[1] & 3) != LNH_LOCAL)
        return 0;
    unsigned words = be16(d + 4);
    if ((words & 0x7FF) * 4u != n || words & 0xF800)
        return 0;
    if (d[8] != OPCODE_UD_SEND_ONLY || (d[9] & 0x0F))
        return 0;
    size_t pad = (d[9] >> 4) & 3, end = n - ICRC - pad;
    if (end < HDRS + 4)
        return 0;
    unsigned dlid = be16(d + 2), slid = be16(d + 6);
    uint32_t dqpn = be32(d + 12) & 0xFFFFFF, sqpn = be32(d + 24) & 0xFFFFFF;
    if (!p->registered || dlid == LID_PERMISSIVE || dqpn == QPN_MCAST || dlid != p->lid)
        return 0;
    int i = 0;
    while (i < p->nifaces && p->ifaces[i].qpn != dqpn)
        i++;
    if (i == p->nifaces)
        return 0;
    Iface *ifc = &p->ifaces[i];
    size_t plen = end - HDRS;
    if (!ifc->up || !may_talk(be16(d + 10), ifc->pkey) || be32(d + 20) != ifc->qkey || plen > (size_t)ifc->mtu + 4)
        return 0;
    const uint8_t *pl = d + HDRS;
    unsigned etype = be16(pl);
    if (!plain_ip(etype, pl + 4, plen - 4))
        return 0;
    if (be32(d + n - ICRC) != icrc_local(d, n - ICRC))
        return 0;
    memcpy(out, p->mac, 6);
    put32(out + 6, sqpn | REMAC_QPN_LA);
    put16(out + 10, slid);
    put16(out + 12, etype);
    memcpy(out + ETH_HDR, pl + 4, plen - 4);
    ifc->rx_frames++;
    *ifi = i;
    return ETH_HDR + plen - 4;
}

static int iface_arg(Port *p, PyObject *o)
{
    long i = PyLong_AsLong(o);
    if (i == -1 && PyErr_Occurred())
        return -1;
    if (i < 0 || i >= p->nifaces) {
        PyErr_SetString(PyExc_IndexError, "no such interface");
        return -1;
    }
    return (int)i;
}

/* tx(iface, frame, now) -> the UD packet, or None (the Python path's); no I/O */
static PyObject *Port_tx(Port *p, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer b;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "tx(iface, frame, now)");
        return NULL;
    }
    int ifi = iface_arg(p, args[0]);
    double now = PyFloat_AsDouble(args[2]);
    if (ifi < 0 || (now == -1.0 && PyErr_Occurred()) || PyObject_GetBuffer(args[1], &b, PyBUF_SIMPLE) < 0)
        return NULL;
    pthread_mutex_lock(&p->th.lock);
    size_t k = (size_t)b.len <= FRAME_MAX ? port_tx(p, ifi, b.buf, (size_t)b.len, p->txbuf, now) : 0;
    PyObject *r = k ? PyBytes_FromStringAndSize((const char *)p->txbuf, (Py_ssize_t)k) : (Py_INCREF(Py_None), Py_None);
    pthread_mutex_unlock(&p->th.lock);
    PyBuffer_Release(&b);
    return r;
}

/* rx(datagram) -> (iface, frame), or None (the Python path's); no I/O */
static PyObject *Port_rx(Port *p, PyObject *arg)
{
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0)
        return NULL;
    int ifi = -1;
    pthread_mutex_lock(&p->th.lock);
    size_t k = port_rx(p, b.buf, (size_t)b.len, p->rxframe, &ifi);
    PyObject *r = k ? Py_BuildValue("(iy#)", ifi, (const char *)p->rxframe, (Py_ssize_t)k) : (Py_INCREF(Py_None), Py_None);
    pthread_mutex_unlock(&p->th.lock);
    PyBuffer_Release(&b);
    return r;
}

/* The TAP of interface ifi read until drained or `budget` frames; returns 1 with *slow /
 * *slen set at the first frame the core must see (after the batch before it went out). */
static int tap_pump_c(Port *p, int ifi, double now, long budget, const uint8_t **slow, size_t *slen)
{
    Iface *ifc = &p->ifaces[ifi];
    int got = 0;
    for (long k = 0; k < budget; k++) {
        ssize_t r = read(ifc->tap_fd, p->frame, FRAME_MAX);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                count_errno(&ifc->tap_read, errno);
            break;
        }
        uint8_t *out = p->txbuf + (size_t)p->tx.n * MAX_PKT_BYTES;
        size_t len = port_tx(p, ifi, p->frame, (size_t)r, out, now);
        if (!len) {
            *slow = p->frame;
            *slen = (size_t)r;
            got = 1;
            break;
        }
        p->tx.iov[p->tx.n].iov_base = out;
        p->tx.iov[p->tx.n].iov_len = len;
        if (++p->tx.n == BATCH)
            batch_flush(&p->tx, p->sock_fd, &p->peer, p->peer_len, &p->send_err);
    }
    batch_flush(&p->tx, p->sock_fd, &p->peer, p->peer_len, &p->send_err);
    return got;
}

/* The cable read until drained or `budget` datagrams; 1 with *slow at the first datagram
 * from the peer the core must see (the rest stays in the ring for the next call). */
static int cable_pump_c(Port *p, long budget, const uint8_t **slow, size_t *slen)
{
    Ring *r = &p->ring;
    for (long k = 0; k < budget; k++) {
        if (r->next >= r->n) {
            if (ring_fill(r, p->sock_fd, &p->recv_err) < 0)
                break;
            if (!r->n)
                continue;
        }
        const uint8_t *d;
        size_t n;
        if (!ring_take(r, &p->peer, &p->foreign, &d, &n))
            continue;
        int ifi = -1;
        size_t len = port_rx(p, d, n, p->rxframe, &ifi);
        if (!len) {
            *slow = d;
            *slen = n;
            return 1;
        }
        Iface *ifc = &p->ifaces[ifi];
        if (write(ifc->tap_fd, p->rxframe, len) < 0)
            count_errno(&ifc->tap_write, errno == EWOULDBLOCK ? EAGAIN : errno);
    }
    return 0;
}

/* tap_pump(iface, now, budget) -> the first frame the Python core must see (after what was
 * batched before it went out), or None: the TAP is drained or the budget spent. */
static PyObject *Port_tap_pump(Port *p, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "tap_pump(iface, now, budget)");
        return NULL;
    }
    int ifi = iface_arg(p, args[0]);
    double now = PyFloat_AsDouble(args[1]);
    long budget = PyLong_AsLong(args[2]);
    if (ifi < 0 || PyErr_Occurred())
        return NULL;
    if (p->th.running) {
        PyErr_SetString(PyExc_RuntimeError, "the pump thread runs");
        return NULL;
    }
    const uint8_t *slow;
    size_t slen;
    if (tap_pump_c(p, ifi, now, budget, &slow, &slen))
        return PyBytes_FromStringAndSize((const char *)slow, (Py_ssize_t)slen);
    Py_RETURN_NONE;
}

/* cable_pump(budget) -> the first datagram from the peer the Python core must see, or None */
static PyObject *Port_cable_pump(Port *p, PyObject *arg)
{
    long budget = PyLong_AsLong(arg);
    if (budget == -1 && PyErr_Occurred())
        return NULL;
    if (!p->ring.buf) {
        PyErr_SetString(PyExc_RuntimeError, "not initialised");
        return NULL;
    }
    if (p->th.running) {
        PyErr_SetString(PyExc_RuntimeError, "the pump thread runs");
        return NULL;
    }
    const uint8_t *slow;
    size_t slen;
    if (cable_pump_c(p, budget, &slow, &slen))
        return PyBytes_FromStringAndSize((const char *)slow, (Py_ssize_t)slen);
    Py_RETURN_NONE;
}

/* The pump thread's sources: every TAP (0..nifaces) and the cable (CABLE_SLOT). */
static int port_fd(void *ctx, int s)
{
    Port *p = ctx;
    return s == CABLE_SLOT ? p->sock_fd : s < p->nifaces ? p->ifaces[s].tap_fd : -1;
}

static int port_left(void *ctx, int s)
{
    Port *p = ctx;
    return s == CABLE_SLOT && p->ring.next < p->ring.n;
}

static int port_pump(void *ctx, int s, double now, const uint8_t **slow, size_t *slen)
{
    Port *p = ctx;
    return s == CABLE_SLOT ? cable_pump_c(p, p->budget, slow, slen)
                           : (s < p->nifaces && tap_pump_c(p, s, now, p->budget, slow, slen));
}

static const PumpOps port_ops = {port_fd, port_left, port_pump};

static void *port_thread(void *arg)
{
    Port *p = arg;
    pump_loop(&p->th, p->pend, CABLE_SLOT + 1, &port_ops, p);
    return NULL;
}

/* start(clock_offset, budget) -> the descriptor that turns readable when take_slow() has something */
static PyObject *Port_start(Port *p, PyObject *args)
{
    double offset;
    long budget;
    if (!PyArg_ParseTuple(args, "dl", &offset, &budget))
        return NULL;
    if (budget < 1) {
        PyErr_SetString(PyExc_ValueError, "budget >= 1");
        return NULL;
    }
    p->budget = budget;
    if (!p->ring.buf) {
        PyErr_SetString(PyExc_RuntimeError, "not initialised");
        return NULL;
    }
    if (thread_start(&p->th, port_thread, p, offset) < 0)
        return NULL;
    return PyLong_FromLong(p->th.note_fd);
}

static PyObject *Port_stop(Port *p, PyObject *Py_UNUSED(ignored))
{
    thread_stop(&p->th);
    Py_RETURN_NONE;
}

static int port_source(void *ctx, int i) { return i == CABLE_SLOT ? -1 : i; }

/* take_slow() -> [(iface index, or -1 for the cable, bytes)]; each source stays paused until resume() */
static PyObject *Port_take_slow(Port *p, PyObject *Py_UNUSED(ignored))
{
    if (p->th.running)
        drain_fd(p->th.note_fd);
    pthread_mutex_lock(&p->th.lock);
    PyObject *r = slots_take(p->pend, MAX_IFACES + 1, port_source, p);
    pthread_mutex_unlock(&p->th.lock);
    return r;
}

static PyObject *Port_resume(Port *p, PyObject *arg)
{
    long s = PyLong_AsLong(arg);
    if (s == -1 && PyErr_Occurred())
        return NULL;
    s = s < 0 ? CABLE_SLOT : s;
    if (s > CABLE_SLOT) {
        PyErr_SetString(PyExc_IndexError, "no such source");
        return NULL;
    }
    pthread_mutex_lock(&p->th.lock);
    p->pend[s].paused = 0;
    pthread_mutex_unlock(&p->th.lock);
    thread_wake(&p->th);
    Py_RETURN_NONE;
}

/* counters() -> {(where, name): n}: where is "iface<i>" (name tx_frames/rx_frames), or, for
 * errno counts, {(where, errno): n} with where tap_read<i>, tap_write<i>, send, recv; and
 * ("cable", "drop_foreign_source"). */
static PyObject *Port_counters(Port *p, PyObject *Py_UNUSED(ignored))
{
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    char w[32];
    pthread_mutex_lock(&p->th.lock);
    for (int i = 0; i < p->nifaces; i++) {
        Iface *f = &p->ifaces[i];
        snprintf(w, sizeof w, "iface%d", i);
        if (count_into(d, w, "tx_frames", f->tx_frames) < 0 || count_into(d, w, "rx_frames", f->rx_frames) < 0)
            goto fail;
        snprintf(w, sizeof w, "tap_read%d", i);
        if (errnos_into(d, w, &f->tap_read) < 0)
            goto fail;
        snprintf(w, sizeof w, "tap_write%d", i);
        if (errnos_into(d, w, &f->tap_write) < 0)
            goto fail;
    }
    if (count_into(d, "cable", "drop_foreign_source", p->foreign) < 0 || errnos_into(d, "send", &p->send_err) < 0
        || errnos_into(d, "recv", &p->recv_err) < 0)
        goto fail;
    pthread_mutex_unlock(&p->th.lock);
    return d;
fail:
    pthread_mutex_unlock(&p->th.lock);
    Py_DECREF(d);
    return NULL;
}

static PyMethodDef Port_methods[] = {
    {"configure", (PyCFunction)Port_configure, METH_VARARGS,
     "configure(lid, registered, mac, [(tap_fd, up, qpn, pkey, qkey, mtu)] per interface)"},
    {"set_neighbours", (PyCFunction)Port_set_neighbours, METH_O,
     "set_neighbours([(iface, mac, dlid, dqpn, sl)]): the resolved destinations, replacing all"},
    {"take_used", (PyCFunction)Port_take_used, METH_NOARGS,
     "take_used() -> [(iface, mac, last use)] used since the last call, oldest use first"},
    {"tx", (PyCFunction)(void (*)(void))Port_tx, METH_FASTCALL, "tx(iface, frame, now) -> UD packet or None"},
    {"rx", (PyCFunction)Port_rx, METH_O, "rx(datagram) -> (iface, frame) or None"},
    {"tap_pump", (PyCFunction)(void (*)(void))Port_tap_pump, METH_FASTCALL,
     "tap_pump(iface, now, budget) -> a frame for the Python core, or None"},
    {"cable_pump", (PyCFunction)Port_cable_pump, METH_O, "cable_pump(budget) -> a datagram for the Python core, or None"},
    {"counters", (PyCFunction)Port_counters, METH_NOARGS, "counters() -> {(where, name or errno): n}"},
    {"start", (PyCFunction)Port_start, METH_VARARGS,
     "start(clock_offset, budget) -> fd: the pump thread runs; fd turns readable when take_slow() has something"},
    {"stop", (PyCFunction)Port_stop, METH_NOARGS, "stop(): the pump thread ends"},
    {"take_slow", (PyCFunction)Port_take_slow, METH_NOARGS,
     "take_slow() -> [(iface or -1 for the cable, bytes)] for the Python core; each source waits for resume()"},
    {"resume", (PyCFunction)Port_resume, METH_O, "resume(source): the thread reads that source again"},
    {NULL},
};

static PyTypeObject PortType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ib._ibfast.Port",
    .tp_basicsize = sizeof(Port),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Port(sock_fd, peer_host, peer_port): ipoibd's compiled steady state",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Port_init,
    .tp_dealloc = (destructor)Port_dealloc,
    .tp_methods = Port_methods,
};

/* ================================================================== Switch (ib-switch) */
typedef struct {
    int number, fd;
    struct sockaddr_storage peer;
    socklen_t peer_len;
    Batch out;
    Ring ring;
    uint64_t forwarded, foreign;
    Errnos send_err, recv_err;
} SwPort;

typedef struct {
    PyObject_HEAD
    int nports;
    SwPort ports[MAX_PORTS];
    int8_t by_number[MAX_PORTS]; /* port number -> index, -1 */
    int8_t lft[LID_MCAST_MIN];   /* unicast DLID -> port number, -1 */
    Thread th;
    Slot pend[MAX_PORTS];        /* by index */
} Switch;

static void Switch_dealloc(Switch *s)
{
    thread_stop(&s->th);
    pthread_mutex_destroy(&s->th.lock);
    for (int i = 0; i < MAX_PORTS; i++) {
        PyMem_Free(s->ports[i].ring.buf);
        free(s->pend[i].data);
    }
    Py_TYPE(s)->tp_free((PyObject *)s);
}

/* Switch([(number, fd, peer_host, peer_port)]) */
static int Switch_init(Switch *s, PyObject *args, PyObject *kw)
{
    PyObject *ports;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &ports))
        return -1;
    if (s->nports) {
        PyErr_SetString(PyExc_RuntimeError, "already initialised");
        return -1;
    }
    if (PyList_GET_SIZE(ports) > MAX_PORTS) {
        PyErr_SetString(PyExc_ValueError, "at most 64 ports");
        return -1;
    }
    memset(s->by_number, -1, sizeof s->by_number);
    memset(s->lft, -1, sizeof s->lft);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ports); i++) {
        SwPort *sp = &s->ports[i];
        const char *host;
        int hport;
        PyMem_Free(sp->ring.buf);
        memset(sp, 0, sizeof *sp);
        if (!PyArg_ParseTuple(PyList_GET_ITEM(ports, i), "iisi", &sp->number, &sp->fd, &host, &hport))
            return -1;
        if (sp->number < 0 || sp->number >= MAX_PORTS || s->by_number[sp->number] >= 0) {
            PyErr_SetString(PyExc_ValueError, "port numbers 0..63, each once");
            return -1;
        }
        if (parse_addr(host, hport, &sp->peer, &sp->peer_len) < 0)
            return -1;
        if (ring_alloc(&sp->ring) < 0)
            return -1;
        enable_gro(sp->fd);
        s->by_number[sp->number] = (int8_t)i;
    }
    s->nports = (int)PyList_GET_SIZE(ports);
    return 0;
}

/* set_lft({lid: port}): the unicast forwarding table, replacing all (the core's view) */
static PyObject *Switch_set_lft(Switch *s, PyObject *arg)
{
    if (!PyDict_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "a dict");
        return NULL;
    }
    int8_t t[LID_MCAST_MIN];
    memset(t, -1, sizeof t);
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(arg, &pos, &k, &v)) {
        long lid = PyLong_AsLong(k), port = PyLong_AsLong(v);
        if (PyErr_Occurred())
            return NULL;
        if (lid >= 0 && lid < LID_MCAST_MIN && port >= 0 && port < MAX_PORTS && s->by_number[port] >= 0)
            t[lid] = (int8_t)port;
    }
    pthread_mutex_lock(&s->th.lock);
    memcpy(s->lft, t, sizeof t);
    pthread_mutex_unlock(&s->th.lock);
    Py_RETURN_NONE;
}

static void sw_flush(Switch *s)
{
    for (int i = 0; i < s->nports; i++) {
        SwPort *o = &s->ports[i];
        if (o->out.n)
            batch_flush(&o->out, o->fd, &o->peer, o->peer_len, &o->send_err);
    }
}

/* The out port of a datagram from port number `in`, or -1: the Python core's. */
static int sw_route(Switch *s, int in, const uint8_t *d, size_t n)
{
    if (n < LRH)
        return -1;
    unsigned dlid = be16(d + 2);
    if (dlid >= LID_MCAST_MIN)
        return -1;
    int out = s->lft[dlid];
    return out < 0 || out == in ? -1 : out;
}

/* route(in_port, datagram) -> out port number, or None (the Python path's); no I/O */
static PyObject *Switch_route(Switch *s, PyObject *args)
{
    int in;
    Py_buffer b;
    if (!PyArg_ParseTuple(args, "iy*", &in, &b))
        return NULL;
    pthread_mutex_lock(&s->th.lock);
    int out = sw_route(s, in, b.buf, (size_t)b.len);
    if (out >= 0)
        s->ports[s->by_number[out]].forwarded++;
    pthread_mutex_unlock(&s->th.lock);
    PyBuffer_Release(&b);
    if (out < 0)
        Py_RETURN_NONE;
    return PyLong_FromLong(out);
}

/* Port index i's datagrams forwarded until drained or `budget` receive batches taken; 1 with
 * *slow / *slen at the first one the core must see (after the forwards before it went out;
 * the rest stays in the port's ring for the next call). */
static int sw_pump_c(Switch *s, int idx, long budget, const uint8_t **slow, size_t *slen)
{
    SwPort *in = &s->ports[idx];
    Ring *r = &in->ring;
    int got = 0;
    for (long k = 0;;) {
        if (r->next >= r->n) {
            sw_flush(s); /* the ring's buffers are about to be reused */
            if (k++ >= budget || ring_fill(r, in->fd, &in->recv_err) < 0)
                break;
            if (!r->n)
                continue;
        }
        const uint8_t *d;
        size_t n;
        if (!ring_take(r, &in->peer, &in->foreign, &d, &n))
            continue;
        int out = sw_route(s, in->number, d, n);
        if (out < 0) {
            *slow = d;
            *slen = n;
            got = 1;
            break;
        }
        SwPort *o = &s->ports[s->by_number[out]];
        o->forwarded++;
        o->out.iov[o->out.n].iov_base = (void *)d;
        o->out.iov[o->out.n].iov_len = n;
        if (++o->out.n == BATCH)
            batch_flush(&o->out, o->fd, &o->peer, o->peer_len, &o->send_err);
    }
    sw_flush(s);
    return got;
}

static int sw_port_arg(Switch *s, long number)
{
    if (number < 0 || number >= MAX_PORTS || s->by_number[number] < 0) {
        PyErr_SetString(PyExc_IndexError, "no such port");
        return -1;
    }
    return s->by_number[number];
}

/* pump(port, budget) -> the first datagram from port's peer the Python core must see, or None */
static PyObject *Switch_pump(Switch *s, PyObject *args)
{
    int number;
    long budget;
    if (!PyArg_ParseTuple(args, "il", &number, &budget))
        return NULL;
    int idx = sw_port_arg(s, number);
    if (idx < 0)
        return NULL;
    if (s->th.running) {
        PyErr_SetString(PyExc_RuntimeError, "the pump thread runs");
        return NULL;
    }
    const uint8_t *slow;
    size_t slen;
    if (sw_pump_c(s, idx, budget, &slow, &slen))
        return PyBytes_FromStringAndSize((const char *)slow, (Py_ssize_t)slen);
    Py_RETURN_NONE;
}

static int switch_fd(void *ctx, int s) { return ((Switch *)ctx)->ports[s].fd; }

static int switch_left(void *ctx, int s)
{
    SwPort *sp = &((Switch *)ctx)->ports[s];
    return sp->ring.next < sp->ring.n;
}

static int switch_pump(void *ctx, int s, double now, const uint8_t **slow, size_t *slen)
{
    return sw_pump_c(ctx, s, 1, slow, slen); /* one receive batch per port per turn */
}

static const PumpOps switch_ops = {switch_fd, switch_left, switch_pump};

static void *switch_thread(void *arg)
{
    Switch *s = arg;
    pump_loop(&s->th, s->pend, s->nports, &switch_ops, s);
    return NULL;
}

static PyObject *Switch_start(Switch *s, PyObject *Py_UNUSED(ignored))
{
    if (thread_start(&s->th, switch_thread, s, 0.0) < 0)
        return NULL;
    return PyLong_FromLong(s->th.note_fd);
}

static PyObject *Switch_stop(Switch *s, PyObject *Py_UNUSED(ignored))
{
    thread_stop(&s->th);
    Py_RETURN_NONE;
}

static int sw_source(void *ctx, int i) { return ((Switch *)ctx)->ports[i].number; }

/* take_slow() -> [(port number, bytes)]; each port stays paused until resume(port) */
static PyObject *Switch_take_slow(Switch *s, PyObject *Py_UNUSED(ignored))
{
    if (s->th.running)
        drain_fd(s->th.note_fd);
    pthread_mutex_lock(&s->th.lock);
    PyObject *r = slots_take(s->pend, s->nports, sw_source, s);
    pthread_mutex_unlock(&s->th.lock);
    return r;
}

static PyObject *Switch_resume(Switch *s, PyObject *arg)
{
    long number = PyLong_AsLong(arg);
    if (number == -1 && PyErr_Occurred())
        return NULL;
    int idx = sw_port_arg(s, number);
    if (idx < 0)
        return NULL;
    pthread_mutex_lock(&s->th.lock);
    s->pend[idx].paused = 0;
    pthread_mutex_unlock(&s->th.lock);
    thread_wake(&s->th);
    Py_RETURN_NONE;
}

/* counters() -> {("switch", "ucast_forwarded"): n, ("port<N>", "drop_foreign_source"): n,
 * ("send<N>" | "recv<N>", errno): n} */
static PyObject *Switch_counters(Switch *s, PyObject *Py_UNUSED(ignored))
{
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    uint64_t fwd = 0;
    char w[32];
    pthread_mutex_lock(&s->th.lock);
    for (int i = 0; i < s->nports; i++) {
        SwPort *sp = &s->ports[i];
        fwd += sp->forwarded;
        snprintf(w, sizeof w, "port%d", sp->number);
        if (count_into(d, w, "drop_foreign_source", sp->foreign) < 0)
            goto fail;
        snprintf(w, sizeof w, "send%d", sp->number);
        if (errnos_into(d, w, &sp->send_err) < 0)
            goto fail;
        snprintf(w, sizeof w, "recv%d", sp->number);
        if (errnos_into(d, w, &sp->recv_err) < 0)
            goto fail;
    }
    if (count_into(d, "switch", "ucast_forwarded", fwd) < 0)
        goto fail;
    pthread_mutex_unlock(&s->th.lock);
    return d;
fail:
    pthread_mutex_unlock(&s->th.lock);
    Py_DECREF(d);
    return NULL;
}

static PyMethodDef Switch_methods[] = {
    {"set_lft", (PyCFunction)Switch_set_lft, METH_O, "set_lft({lid: port}): the unicast table, replacing all"},
    {"route", (PyCFunction)Switch_route, METH_VARARGS, "route(in_port, datagram) -> out port or None"},
    {"pump", (PyCFunction)Switch_pump, METH_VARARGS, "pump(port, budget) -> a datagram for the Python core, or None"},
    {"counters", (PyCFunction)Switch_counters, METH_NOARGS, "counters() -> {(where, name or errno): n}"},
    {"start", (PyCFunction)Switch_start, METH_NOARGS,
     "start() -> fd: the pump thread runs; fd turns readable when take_slow() has something"},
    {"stop", (PyCFunction)Switch_stop, METH_NOARGS, "stop(): the pump thread ends"},
    {"take_slow", (PyCFunction)Switch_take_slow, METH_NOARGS,
     "take_slow() -> [(port, bytes)] for the Python core; each port waits for resume(port)"},
    {"resume", (PyCFunction)Switch_resume, METH_O, "resume(port): the thread reads that port again"},
    {NULL},
};

static PyTypeObject SwitchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ib._ibfast.Switch",
    .tp_basicsize = sizeof(Switch),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Switch([(number, fd, peer_host, peer_port)]): ib-switch's compiled unicast forwarding",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Switch_init,
    .tp_dealloc = (destructor)Switch_dealloc,
    .tp_methods = Switch_methods,
};

/* icrc(body) -> ib/packet.py icrc(body, False), for the tests */
static PyObject *mod_icrc(PyObject *m, PyObject *arg)
{
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0)
        return NULL;
    if (b.len < LRH + BTH) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "shorter than LRH + BTH");
        return NULL;
    }
    uint32_t c = icrc_local(b.buf, (size_t)b.len);
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(c);
}

static PyMethodDef mod_methods[] = {
    {"icrc", (PyCFunction)mod_icrc, METH_O, "icrc(body) -> the ICRC of an LRH-only packet body"},
    {NULL},
};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "ib._ibfast", "IPoIB's compiled data path", -1, mod_methods};

PyMODINIT_FUNC PyInit__ibfast(void)
{
    crc_init();
    if (PyType_Ready(&PortType) < 0 || PyType_Ready(&SwitchType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (!m)
        return NULL;
    Py_INCREF(&PortType);
    Py_INCREF(&SwitchType);
    if (PyModule_AddObject(m, "Port", (PyObject *)&PortType) < 0 || PyModule_AddObject(m, "Switch", (PyObject *)&SwitchType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
