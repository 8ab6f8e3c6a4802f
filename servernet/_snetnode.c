/* snetd's per-packet path, compiled (issue 14).  servernet.endpoint.Endpoint (AVT
 * responder) and servernet.bte.Bte (block data WRITEs) are the Python oracles;
 * servernet.fastnode.FastNode joins this engine to them and tests/unit/
 * test_snetnode_differential.py holds the pair to the Python node's outputs.
 *
 * Engine(my_id, peers, ii, timeout_s) is a sans-IO core with a lock:
 *   receive(fabric, datagram, now)  one datagram: answered here (a WRITE/READ/BARRIER to
 *       a plain window, an answer to a block WRITE, single WRITE or READ this engine sent) or kept for Python
 *       (everything else: bad or odd packets, interrupt and per-source windows, DIAG,
 *       requests on a HARD_DOWN path, responses to Python's own TIDs)
 *   tick(now)            a block WRITE past its deadline hands its block back to Python
 *   set_windows([...]), set_path(peer, fabric, state), lend(tids), want() (a TID back soon),
 *   start_block(key, peer, address, data, prefer, toggle, now) (a single WRITE too: one packet),
 *   start_read(key, peer, address, length, prefer, toggle, now) (a single READ)
 *   take() -> events for Python, in order; take_out() -> [(fabric, datagram)] (sans-IO use)
 *   attach(fd_x, router_x, fd_y, router_y, notify_fd) and serve(poll_ms) (until stop()): the
 *       I/O loop (recvmmsg on both fabrics, the core, sendmmsg to the routers) run without
 *       the GIL in a thread of its own; notify_fd (an eventfd) is written when take()
 *       has something.
 * A block runs here only on UP paths and only while everything is ACKed: a NAK, a
 * timeout, or no UP path hands it back (state, and its WRITEs still in flight) to the
 * Python BTE, which retries and fails over as before.
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <arpa/inet.h>
#include <errno.h>
#include <math.h> /* INFINITY */
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h> /* offsetof */
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "_snetcommon.h" /* the packet CRC, a (host, port) address (shared with _snetfwd.c) */

#define ENVELOPE_BYTES 4
#define MIN_PACKET 12
#define MAGIC_HI 0x53
#define MAGIC_LO 0x4E
#define VERSION 1
#define FLAG_II 0x04
#define MAX_DATA 64
#define MAX_DATA_II 512
#define MAX_DATAGRAM 84
#define MAX_DATAGRAM_II 532
#define BUF_BYTES (MAX_DATAGRAM_II + 1)
#define PAGE_SHIFT 12
#define PAGE_BYTES (1u << PAGE_SHIFT)
#define ID_COUNT (1 << 20)
#define TIDS 16
#define TT_READ 0x0
#define TT_WRITE 0x1
#define TT_BARRIER 0x2
#define TT_DIAG 0xE
#define ST_UP 0
#define ST_HARD_DOWN 2
/* project choices (servernet/constants.py holds the same values; a test compares) */
#define MAX_PEERS 255  /* peer index fits a byte */
#define PEER_HASH 512  /* > 2 * MAX_PEERS */
#define MAX_WINDOWS 64
#define MAX_BLOCKS 64  /* blocks the engine runs at once */
#define SLOW_QUEUE 1024 /* datagrams waiting for Python (beyond: dropped, counted) */
#define OUT_QUEUE 256  /* datagrams waiting to be sent */
#define BATCH 64       /* recvmmsg / sendmmsg */
#define RX_ROUNDS 4

#define COUNTERS(X)                                                                                        \
    X(N_RX_X, "node", "rx_X") X(N_RX_Y, "node", "rx_Y") X(N_ACK, "node", "ack") X(N_NAK, "node", "nak")   \
    X(N_FOREIGN, "node", "drop_foreign_sender") X(N_RXERR_X, "node", "rx_error_X")                       \
    X(N_RXERR_Y, "node", "rx_error_Y") X(N_TXFULL_X, "node", "drop_tx_full_X")                           \
    X(N_TXFULL_Y, "node", "drop_tx_full_Y") X(N_TXERR_X, "node", "tx_error_X")                           \
    X(N_TXERR_Y, "node", "tx_error_Y") X(N_SLOWFULL, "node", "drop_slow_path_full")                      \
    X(N_OUTFULL, "node", "drop_out_full") X(A_READS, "avt", "reads") X(A_WRITES, "avt", "writes")        \
    X(A_NAK_SOURCE, "avt", "nak_source") X(A_NAK_ADDR, "avt", "nak_bad_address")                         \
    X(A_NAK_PATH, "avt", "nak_path") X(A_NAK_PERM, "avt", "nak_permission")                              \
    X(A_NAK_BOUNDS, "avt", "nak_bounds") X(B_TX_X, "bte", "tx_X") X(B_TX_Y, "bte", "tx_Y")               \
    X(B_UNEXPECTED, "bte", "drop_unexpected_response") X(B_NAK, "bte", "nak")
#define AS_ENUM(id, g, n) id,
#define AS_GROUP(id, g, n) g,
#define AS_NAME(id, g, n) n,
enum { COUNTERS(AS_ENUM) N_COUNTERS };
static const char *counter_group[N_COUNTERS] = {COUNTERS(AS_GROUP)};
static const char *counter_name[N_COUNTERS] = {COUNTERS(AS_NAME)};

static uint32_t get32(const unsigned char *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }
static void put32(unsigned char *p, uint32_t v) { p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v; }

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}


typedef struct {
    uint32_t page, pages;
    int access; /* 1 read, 2 write */
    int paths;  /* bit per fabric */
    int slow;   /* interrupt window: Python answers */
    unsigned char *sources; /* NULL: every peer; else a flag per peer index */
    Py_buffer mem;
    int has_mem;
    Py_buffer *pmem; /* a per-source window: each peer's own memory, by peer index (NULL: mem) */
    int npmem;
} Window;

enum { B_FREE, B_ACTIVE, B_DONE, B_BACK };

typedef struct {
    int state;
    long long key;
    int peer;   /* index */
    uint32_t peer_id, address;
    PyObject *data; /* a bytes object (a reference held) */
    const unsigned char *ptr;
    size_t len, next_off;
    int inflight, acked, prefer, error_nak;
    long long packets[2];
    double done_at; /* when its last ACK came (a single WRITE or READ ends there: no trio pass in its time) */
    int read;       /* a single READ of len bytes (Python's Op "read"): its answer lands in result */
    int bell, rang; /* a doorbell WRITE goes once every data WRITE is ACKed; it was sent */
    uint32_t bell_address;
    size_t bell_len;
    unsigned char bell_data[MAX_DATA_II];
    unsigned char result[MAX_DATA_II];
} Block;

typedef struct {
    int owned, busy, block, fabric, is_bell;
    uint32_t address;
    size_t off, len;
    double deadline;
} Tid;

typedef struct {
    int fabric;
    size_t len;
    unsigned char buf[BUF_BYTES];
} Dgram;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t mu;
    uint32_t me;
    int ii, max_data;
    size_t max_datagram;
    double timeout;
    int set_up;
    uint32_t hkey[PEER_HASH]; /* peer id -> index: open addressing */
    unsigned char hval[PEER_HASH]; /* index + 1 (0: empty) */
    uint32_t peer_id[MAX_PEERS];
    int npeers;
    unsigned char state[MAX_PEERS][2];
    unsigned char toggle[MAX_PEERS];
    unsigned char acked_on[MAX_PEERS][2]; /* an ACK arrived on a path not UP: Path.on_ack */
    Window win[MAX_WINDOWS];
    int nwin;
    Tid tid[TIDS];
    int high_water;
    unsigned returned; /* TIDs given back to Python since the last take() */
    int wanted;        /* Python has requests waiting for a TID: give back the next one freed */
    Block blk[MAX_BLOCKS];
    int rr;            /* round robin over blocks */
    Dgram *slow;       /* ring */
    int slow_head, slow_n;
    Dgram *out;
    int out_n;
    uint64_t counters[N_COUNTERS];
    /* I/O */
    int attached, serving, stop, notify_fd, notified;
    int fd[2];
    Addr router[2];
    struct mmsghdr msg[BATCH];
    struct iovec iov[BATCH];
    struct sockaddr_storage from[BATCH];
    unsigned char rxbuf[BATCH][BUF_BYTES];
} Engine;

/* ---- the core (called with mu held) ---------------------------------------------------- */

static unsigned peer_hash(uint32_t id) { return (id * 2654435761u) >> 23 & (PEER_HASH - 1); }

/* the peer's index, or -1 */
static int peer_find(const Engine *e, uint32_t id)
{
    for (unsigned h = peer_hash(id); e->hval[h]; h = (h + 1) % PEER_HASH)
        if (e->hkey[h] == id)
            return e->hval[h] - 1;
    return -1;
}

static unsigned char *out_slot(Engine *e, int fabric, size_t n)
{
    if (e->out_n >= OUT_QUEUE) {
        e->counters[N_OUTFULL]++;
        return NULL;
    }
    Dgram *d = &e->out[e->out_n++];
    d->fabric = fabric;
    d->len = n;
    return d->buf;
}

/* envelope + header (+ address) + data + CRC, as codec.encode_datagram */
static void emit(Engine *e, uint32_t did, int ttype, int rsp, int tid, int fabric, int ack, int has_addr,
                 uint32_t address, const unsigned char *data, size_t dlen, size_t field)
{
    size_t n = ENVELOPE_BYTES + 8 + (has_addr ? 4 : 0) + dlen + 4;
    unsigned char *p = out_slot(e, fabric, n);
    if (p == NULL)
        return;
    p[0] = MAGIC_HI, p[1] = MAGIC_LO, p[2] = VERSION, p[3] = (unsigned char)(fabric | (e->ii ? FLAG_II : 0));
    uint64_t flen = e->ii ? field / 8 : field;
    uint64_t w = (uint64_t)did << 44 | (uint64_t)e->me << 24 | flen << 16 | (uint64_t)ttype << 12 |
                 (uint64_t)rsp << 11 | (uint64_t)tid << 7 | (uint64_t)fabric << 6 | (uint64_t)ack << 5;
    unsigned char *h = p + ENVELOPE_BYTES;
    put32(h, (uint32_t)(w >> 32));
    put32(h + 4, (uint32_t)w);
    size_t off = 8;
    if (has_addr) {
        put32(h + off, address);
        off += 4;
    }
    if (dlen)
        memcpy(h + off, data, dlen);
    off += dlen;
    put32(h + off, crc32_ieee(h, off));
}

static void notify(Engine *e)
{
    if (e->attached && !e->notified && e->notify_fd >= 0) {
        uint64_t one = 1;
        if (write(e->notify_fd, &one, sizeof one) == sizeof one)
            e->notified = 1;
    }
}

static void keep_for_python(Engine *e, int fabric, const unsigned char *buf, size_t n)
{
    if (e->slow_n >= SLOW_QUEUE || n > BUF_BYTES) {
        e->counters[N_SLOWFULL]++;
        return;
    }
    Dgram *d = &e->slow[(e->slow_head + e->slow_n++) % SLOW_QUEUE];
    d->fabric = fabric;
    d->len = n;
    memcpy(d->buf, buf, n);
    notify(e);
}

/* the block has a packet to send now: a data WRITE, or its doorbell once every data WRITE is ACKed */
static int sendable(const Block *b)
{
    return b->state == B_ACTIVE && (b->next_off < b->len || (b->bell && !b->rang && !b->inflight));
}

/* a block still has something to send (its TIDs stay here until then) */
static int work_left(Engine *e)
{
    for (int i = 0; i < MAX_BLOCKS; i++)
        if (e->blk[i].state == B_ACTIVE && (e->blk[i].next_off < e->blk[i].len || (e->blk[i].bell && !e->blk[i].rang)))
            return 1;
    return 0;
}

static void hand_back(Engine *e, Block *b, int nak)
{
    b->state = B_BACK;
    b->error_nak |= nak;
    notify(e);
}

static void finish_if_done(Engine *e, Block *b, double now)
{
    if (b->state == B_ACTIVE && b->next_off >= b->len && b->inflight == 0 && (!b->bell || b->rang)) {
        b->state = B_DONE;
        b->done_at = now;
        notify(e);
    }
}

/* issue block WRITEs on free lent TIDs (Bte.pump's order: lowest TID, blocks in turn),
 * then give back every lent TID no block needs */
static void pump(Engine *e, double now)
{
    for (;;) {
        int t = -1;
        for (int i = 0; i < TIDS; i++)
            if (e->tid[i].owned && !e->tid[i].busy) {
                t = i;
                break;
            }
        if (t < 0)
            break;
        if (e->wanted) {
            e->wanted = 0;
            e->tid[t].owned = 0;
            e->returned |= 1u << t;
            notify(e);
            continue;
        }
        Block *b = NULL;
        int bi = -1;
        for (int k = 0; k < MAX_BLOCKS; k++) {
            int i = (e->rr + k) % MAX_BLOCKS;
            if (sendable(&e->blk[i])) {
                b = &e->blk[i], bi = i;
                break;
            }
        }
        if (b == NULL)
            break;
        e->rr = (bi + 1) % MAX_BLOCKS;
        int p = b->peer, fabric;
        if (b->prefer >= 0 && e->state[p][b->prefer] == ST_UP)
            fabric = b->prefer;
        else if (e->state[p][0] == ST_UP && e->state[p][1] == ST_UP) {
            fabric = e->toggle[p];
            e->toggle[p] = (unsigned char)(1 - fabric);
        } else if (e->state[p][0] == ST_UP)
            fabric = 0;
        else if (e->state[p][1] == ST_UP)
            fabric = 1;
        else {
            hand_back(e, b, 0); /* no UP path: the Python BTE chooses among SUSPECT ones */
            continue;
        }
        Tid *x = &e->tid[t];
        if (b->next_off >= b->len) { /* every data WRITE ACKed: the doorbell (Bte._next) */
            x->busy = 1, x->block = bi, x->fabric = fabric, x->is_bell = 1;
            x->address = b->bell_address, x->off = 0, x->len = b->bell_len;
            x->deadline = now + e->timeout;
            b->rang = 1;
            b->inflight++;
            b->packets[fabric]++;
            e->counters[fabric ? B_TX_Y : B_TX_X]++;
            emit(e, b->peer_id, TT_WRITE, 0, t, fabric, 0, 1, b->bell_address, b->bell_data, b->bell_len, b->bell_len);
            continue;
        }
        uint32_t addr = b->address + (uint32_t)b->next_off;
        size_t n = b->len - b->next_off;
        if (n > (size_t)e->max_data)
            n = (size_t)e->max_data;
        if (!b->read && n > PAGE_BYTES - (addr % PAGE_BYTES))
            n = PAGE_BYTES - (addr % PAGE_BYTES); /* a READ is one packet as asked (Bte._next) */
        x->busy = 1, x->block = bi, x->fabric = fabric, x->is_bell = 0, x->address = addr, x->off = b->next_off;
        x->len = n;
        x->deadline = now + e->timeout;
        b->next_off += n;
        b->inflight++;
        b->packets[fabric]++;
        e->counters[fabric ? B_TX_Y : B_TX_X]++;
        if (b->read)
            emit(e, b->peer_id, TT_READ, 0, t, fabric, 0, 1, addr, NULL, 0, n);
        else
            emit(e, b->peer_id, TT_WRITE, 0, t, fabric, 0, 1, addr, b->ptr + x->off, n, n);
        int busy = 0;
        for (int i = 0; i < TIDS; i++)
            busy += e->tid[i].busy;
        if (busy > e->high_water)
            e->high_water = busy;
    }
    if (!work_left(e)) {
        e->wanted = 0; /* all of them go back */
        unsigned before = e->returned;
        for (int i = 0; i < TIDS; i++)
            if (e->tid[i].owned && !e->tid[i].busy) {
                e->tid[i].owned = 0;
                e->returned |= 1u << i;
            }
        if (e->returned != before)
            notify(e); /* only for TIDs newly returned: take() pumps too, and must not wake Python again */
    }
}

static Window *window_of(Engine *e, uint32_t address)
{
    uint32_t page = address >> PAGE_SHIFT;
    for (int i = 0; i < e->nwin; i++)
        if (page >= e->win[i].page && page - e->win[i].page < e->win[i].pages)
            return &e->win[i];
    return NULL;
}

static void respond(Engine *e, uint32_t sid, int ttype, int tid, int fabric, int ack, const unsigned char *data,
                    size_t n)
{
    emit(e, sid, ttype, 1, tid, fabric, ack, 0, 0, data, n, n);
    e->counters[ack ? N_ACK : N_NAK]++;
}

/* a response to one of the engine's TIDs (Bte.on_response for a block's data WRITE, a
 * single WRITE or a single READ: data, length its answer's) */
static void on_response(Engine *e, int p, int fabric, int ttype, int tid, int ack, const unsigned char *data,
                        size_t length, double now)
{
    Tid *x = &e->tid[tid];
    Block *b = &e->blk[x->block];
    if (!x->busy || b->peer != p || ttype != (b->read ? TT_READ : TT_WRITE) || (b->read && ack && length != x->len)) {
        e->counters[B_UNEXPECTED]++;
        return;
    }
    x->busy = 0;
    b->inflight--;
    if (e->state[p][fabric] != ST_UP) {
        e->acked_on[p][fabric] = 1;
        notify(e);
    }
    if (!ack) {
        e->counters[B_NAK]++;
        if (b->state == B_ACTIVE)
            hand_back(e, b, 1);
        else
            b->error_nak = 1;
    } else {
        if (b->read)
            memcpy(b->result, data, length);
        b->acked++;
        finish_if_done(e, b, now);
    }
    pump(e, now);
}

/* one datagram from fabric's router (Endpoint.receive with the AVT's answers) */
static void receive(Engine *e, int fabric, const unsigned char *buf, size_t n, double now)
{
    const unsigned char *pk = buf + ENVELOPE_BYTES;
    size_t pn = n - ENVELOPE_BYTES;
    if (n > e->max_datagram || n < ENVELOPE_BYTES + MIN_PACKET || buf[0] != MAGIC_HI || buf[1] != MAGIC_LO ||
        buf[2] != VERSION || buf[3] != (fabric | (e->ii ? FLAG_II : 0)) ||
        crc32_ieee(pk, pn - 4) != get32(pk + pn - 4))
        goto slow;
    uint64_t w = (uint64_t)get32(pk) << 32 | get32(pk + 4);
    uint32_t did = (uint32_t)(w >> 44), sid = (uint32_t)(w >> 24) & 0xFFFFF;
    int flen = (int)(w >> 16) & 0xFF, ttype = (int)(w >> 12) & 0xF, rsp = (int)(w >> 11) & 1;
    int tid = (int)(w >> 7) & 0xF, path = (int)(w >> 6) & 1, ack = (int)(w >> 5) & 1;
    size_t length = e->ii ? (size_t)flen * 8 : (size_t)flen;
    if (!(ttype == TT_READ || ttype == TT_WRITE || ttype == TT_BARRIER) || (ack && !rsp) ||
        length > (size_t)e->max_data || (ttype == TT_BARRIER && length) || (ttype == TT_WRITE && rsp && length))
        goto slow;
    int carries = (rsp && ttype == TT_READ) || (!rsp && ttype == TT_WRITE);
    if (pn != MIN_PACKET + (rsp ? 0 : 4) + (carries ? length : 0))
        goto slow;
    int p = peer_find(e, sid);
    if (did != e->me || p < 0 || path != fabric)
        goto slow;
    if (rsp) {
        if (!e->tid[tid].owned)
            goto slow; /* one of Python's TIDs */
        e->counters[fabric ? N_RX_Y : N_RX_X]++;
        on_response(e, p, fabric, ttype, tid, ack, pk + 8, length, now);
        return;
    }
    if (e->state[p][fabric] == ST_HARD_DOWN)
        goto slow; /* Path.heard: the Python path machine probes early */
    uint32_t address = get32(pk + 8);
    if (ttype == TT_BARRIER) {
        e->counters[fabric ? N_RX_Y : N_RX_X]++;
        respond(e, sid, ttype, tid, fabric, 1, NULL, 0);
        return;
    }
    Window *wd = window_of(e, address);
    if (wd != NULL && wd->slow)
        goto slow;
    e->counters[fabric ? N_RX_Y : N_RX_X]++;
    int write = ttype == TT_WRITE, why = -1;
    uint64_t off = 0;
    if (wd == NULL)
        why = A_NAK_ADDR;
    else if (wd->sources != NULL && !wd->sources[p])
        why = A_NAK_SOURCE;
    else if (!(wd->paths >> fabric & 1))
        why = A_NAK_PATH;
    else if (!(wd->access & (write ? 2 : 1)))
        why = A_NAK_PERM;
    else {
        off = (uint64_t)address - ((uint64_t)wd->page << PAGE_SHIFT);
        if (off + length > (uint64_t)wd->pages << PAGE_SHIFT)
            why = A_NAK_BOUNDS;
    }
    if (why >= 0) {
        e->counters[why]++;
        respond(e, sid, ttype, tid, fabric, 0, NULL, 0);
        return;
    }
    unsigned char *mem = (unsigned char *)(wd->pmem != NULL ? wd->pmem[p].buf : wd->mem.buf) + off;
    if (write) {
        memcpy(mem, pk + 12, length);
        e->counters[A_WRITES]++;
        respond(e, sid, ttype, tid, fabric, 1, NULL, 0);
    } else {
        e->counters[A_READS]++;
        respond(e, sid, ttype, tid, fabric, 1, mem, length);
    }
    return;
slow:
    keep_for_python(e, fabric, buf, n);
}

static double next_deadline(Engine *e)
{
    double t = INFINITY;
    for (int i = 0; i < TIDS; i++)
        if (e->tid[i].owned && e->tid[i].busy && e->blk[e->tid[i].block].state == B_ACTIVE && e->tid[i].deadline < t)
            t = e->tid[i].deadline;
    return t;
}

static void tick(Engine *e, double now)
{
    for (int i = 0; i < TIDS; i++) {
        Tid *x = &e->tid[i];
        if (x->owned && x->busy && x->deadline <= now && e->blk[x->block].state == B_ACTIVE)
            hand_back(e, &e->blk[x->block], 0);
    }
}

/* ---- I/O ------------------------------------------------------------------------------ */

static void flush(Engine *e)
{
    if (!e->attached)
        return;
    for (int f = 0; f < 2; f++) {
        if (e->fd[f] < 0)
            continue;
        struct mmsghdr m[BATCH];
        struct iovec v[BATCH];
        int k = 0;
        for (int i = 0; i <= e->out_n; i++) {
            if (i < e->out_n && e->out[i].fabric == f) {
                tx_hdr_setup(&m[k], &v[k], e->out[i].buf, e->out[i].len, &e->router[f]);
                k++;
            }
            if (k == BATCH || (i == e->out_n && k)) {
                tx_batch_send(e->fd[f], m, k, &e->counters[f ? N_TXFULL_Y : N_TXFULL_X],
                              &e->counters[f ? N_TXERR_Y : N_TXERR_X]);
                k = 0;
            }
        }
    }
    for (int i = 0; i < e->out_n; i++)
        if (e->out[i].fabric < 0 || e->out[i].fabric > 1 || e->fd[e->out[i].fabric] < 0)
            e->counters[e->out[i].fabric ? N_TXERR_Y : N_TXERR_X]++; /* no socket on that fabric */
    e->out_n = 0;
}

static void drain(Engine *e, int f, double now)
{
    for (int round = 0; round < RX_ROUNDS; round++) {
        rx_batch_setup(e->msg, e->iov, e->from, (unsigned char *)e->rxbuf, BUF_BYTES, BATCH);
        int got = recvmmsg(e->fd[f], e->msg, BATCH, MSG_DONTWAIT, NULL);
        if (got < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            if (errno != EINTR)
                e->counters[f ? N_RXERR_Y : N_RXERR_X]++; /* an ICMP error of an earlier send */
            continue;
        }
        for (int i = 0; i < got; i++) {
            if (!addr_is(&e->router[f], &e->from[i])) {
                e->counters[N_FOREIGN]++;
                continue;
            }
            receive(e, f, e->rxbuf[i], e->msg[i].msg_len, now);
            if (e->out_n > OUT_QUEUE - 2 * TIDS)
                flush(e);
        }
        flush(e);
        if (got < BATCH)
            return;
    }
}

/* ---- Python API -------------------------------------------------------------------------- */

#define LOCK(e) pthread_mutex_lock(&(e)->mu)
#define UNLOCK(e) pthread_mutex_unlock(&(e)->mu)

static void release_windows(Engine *e)
{
    for (int i = 0; i < e->nwin; i++) {
        if (e->win[i].has_mem)
            PyBuffer_Release(&e->win[i].mem);
        for (int j = 0; j < e->win[i].npmem; j++)
            PyBuffer_Release(&e->win[i].pmem[j]);
        PyMem_Free(e->win[i].pmem);
        PyMem_Free(e->win[i].sources);
    }
    e->nwin = 0;
}

static int Engine_init(Engine *e, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"my_id", "peers", "ii", "timeout", NULL};
    unsigned long me;
    PyObject *peers;
    int ii;
    double timeout;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "kOpd", kwlist, &me, &peers, &ii, &timeout))
        return -1;
    if (me >= ID_COUNT || !(timeout > 0)) {
        PyErr_SetString(PyExc_ValueError, "the node id is 20-bit and the timeout positive");
        return -1;
    }
    if (e->set_up) {
        PyErr_SetString(PyExc_RuntimeError, "an Engine is set up once");
        return -1;
    }
    e->me = (uint32_t)me, e->ii = ii, e->timeout = timeout;
    e->max_data = ii ? MAX_DATA_II : MAX_DATA;
    e->max_datagram = ii ? MAX_DATAGRAM_II : MAX_DATAGRAM;
    e->npeers = 0; /* an __init__ that failed may have begun */
    memset(e->hval, 0, sizeof e->hval);
    if (e->slow == NULL)
        e->slow = PyMem_Malloc(SLOW_QUEUE * sizeof(Dgram));
    if (e->out == NULL)
        e->out = PyMem_Malloc(OUT_QUEUE * sizeof(Dgram));
    if (e->slow == NULL || e->out == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    PyObject *it = PyObject_GetIter(peers);
    if (it == NULL)
        return -1;
    PyObject *item;
    while ((item = PyIter_Next(it)) != NULL) {
        unsigned long id = PyLong_AsUnsignedLong(item);
        Py_DECREF(item);
        if (PyErr_Occurred() || id >= ID_COUNT || e->npeers >= MAX_PEERS) {
            Py_DECREF(it);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "peers are at most 255 20-bit ids");
            return -1;
        }
        if (peer_find(e, (uint32_t)id) < 0) {
            unsigned h = peer_hash((uint32_t)id);
            while (e->hval[h])
                h = (h + 1) % PEER_HASH;
            e->hkey[h] = (uint32_t)id;
            e->peer_id[e->npeers] = (uint32_t)id;
            e->hval[h] = (unsigned char)++e->npeers;
        }
    }
    Py_DECREF(it);
    if (PyErr_Occurred())
        return -1;
    e->fd[0] = e->fd[1] = -1;
    e->notify_fd = -1;
    pthread_mutex_init(&e->mu, NULL);
    e->set_up = 1;
    return 0;
}

static void Engine_dealloc(Engine *e)
{
    release_windows(e);
    for (int i = 0; i < MAX_BLOCKS; i++)
        Py_CLEAR(e->blk[i].data);
    PyMem_Free(e->slow);
    PyMem_Free(e->out);
    if (e->set_up)
        pthread_mutex_destroy(&e->mu);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

static int ready(Engine *e)
{
    if (!e->set_up) {
        PyErr_SetString(PyExc_RuntimeError, "Engine.__init__ was not called");
        return 0;
    }
    return 1;
}

static int fabric_arg(int f)
{
    if (f != 0 && f != 1) {
        PyErr_SetString(PyExc_ValueError, "a fabric is 0 (X) or 1 (Y)");
        return 0;
    }
    return 1;
}

/* set_windows([(page, pages, access, paths, slow, sources | None, memory | None)]): memory is a
 * list of one buffer per peer (in the engine's peer order) for a per-source window */
static PyObject *Engine_set_windows(Engine *e, PyObject *arg)
{
    if (!ready(e))
        return NULL;
    if (e->serving || e->nwin) {
        PyErr_SetString(PyExc_RuntimeError, "windows are set once, before serving");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(arg, "windows: a list of tuples");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > MAX_WINDOWS) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "at most 64 windows");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Window *w = &e->win[e->nwin];
        memset(w, 0, sizeof *w);
        unsigned long page, pages;
        PyObject *sources, *memory;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "kkiipOO", &page, &pages, &w->access, &w->paths,
                              &w->slow, &sources, &memory))
            goto fail;
        if (pages < 1 || page + pages > (1ul << 20)) {
            PyErr_SetString(PyExc_ValueError, "a window's pages are outside the AVT");
            goto fail;
        }
        w->page = (uint32_t)page, w->pages = (uint32_t)pages;
        if (sources != Py_None) {
            w->sources = PyMem_Calloc(MAX_PEERS, 1);
            if (w->sources == NULL) {
                PyErr_NoMemory();
                goto fail;
            }
            e->nwin++; /* owns sources from here */
            PyObject *it = PyObject_GetIter(sources);
            if (it == NULL)
                goto fail;
            PyObject *s;
            while ((s = PyIter_Next(it)) != NULL) {
                unsigned long id = PyLong_AsUnsignedLong(s);
                Py_DECREF(s);
                if (PyErr_Occurred())
                    break;
                if (id < ID_COUNT && peer_find(e, (uint32_t)id) >= 0)
                    w->sources[peer_find(e, (uint32_t)id)] = 1;
            }
            Py_DECREF(it);
            if (PyErr_Occurred())
                goto fail;
        } else
            e->nwin++;
        if (!w->slow && PyList_Check(memory)) {
            if (PyList_GET_SIZE(memory) != e->npeers) {
                PyErr_SetString(PyExc_ValueError, "a per-source window's memory: one buffer per peer");
                goto fail;
            }
            w->pmem = PyMem_Calloc((size_t)e->npeers + 1, sizeof(Py_buffer));
            if (w->pmem == NULL) {
                PyErr_NoMemory();
                goto fail;
            }
            for (int j = 0; j < e->npeers; j++) {
                if (PyObject_GetBuffer(PyList_GET_ITEM(memory, j), &w->pmem[j], PyBUF_WRITABLE) < 0)
                    goto fail;
                w->npmem++;
                if ((size_t)w->pmem[j].len < (size_t)pages << PAGE_SHIFT) {
                    PyErr_SetString(PyExc_ValueError, "a window's memory is smaller than its pages");
                    goto fail;
                }
            }
        } else if (!w->slow) {
            if (PyObject_GetBuffer(memory, &w->mem, PyBUF_WRITABLE) < 0)
                goto fail;
            w->has_mem = 1;
            if ((size_t)w->mem.len < (size_t)pages << PAGE_SHIFT) {
                PyErr_SetString(PyExc_ValueError, "a window's memory is smaller than its pages");
                goto fail;
            }
        }
    }
    Py_DECREF(seq);
    Py_RETURN_NONE;
fail:
    Py_DECREF(seq);
    release_windows(e);
    return NULL;
}

static int peer_index(Engine *e, unsigned long id)
{
    if (id >= ID_COUNT || peer_find(e, (uint32_t)id) < 0) {
        PyErr_SetString(PyExc_ValueError, "not a peer of this node");
        return -1;
    }
    return peer_find(e, (uint32_t)id);
}

static PyObject *Engine_set_path(Engine *e, PyObject *args)
{
    unsigned long peer;
    int fabric, state;
    if (!ready(e) || !PyArg_ParseTuple(args, "kii", &peer, &fabric, &state) || !fabric_arg(fabric))
        return NULL;
    int p = peer_index(e, peer);
    if (p < 0)
        return NULL;
    if (state < 0 || state > 3) {
        PyErr_SetString(PyExc_ValueError, "a path state is 0..3");
        return NULL;
    }
    LOCK(e);
    e->state[p][fabric] = (unsigned char)state;
    UNLOCK(e);
    Py_RETURN_NONE;
}

/* lend(tids, now): Python's free TIDs, for the blocks here */
static PyObject *Engine_lend(Engine *e, PyObject *args)
{
    PyObject *tids;
    double now;
    if (!ready(e) || !PyArg_ParseTuple(args, "Od", &tids, &now))
        return NULL;
    PyObject *seq = PySequence_Fast(tids, "tids: a list");
    if (seq == NULL)
        return NULL;
    unsigned mask = 0;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        long t = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (t < 0 || t >= TIDS) {
            Py_DECREF(seq);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "a TID is 0..15");
            return NULL;
        }
        mask |= 1u << t;
    }
    Py_DECREF(seq);
    LOCK(e);
    e->wanted = 0;
    for (int t = 0; t < TIDS; t++)
        if (mask >> t & 1 && !e->tid[t].owned) {
            e->tid[t].owned = 1;
            e->tid[t].busy = 0;
            e->returned &= ~(1u << t);
        }
    pump(e, now);
    flush(e);
    UNLOCK(e);
    Py_RETURN_NONE;
}

/* a block, or a single READ (data NULL, n its length), starts: False when no slot is free */
static PyObject *start(Engine *e, long long key, unsigned long peer, unsigned long address, PyObject *data,
                       Py_ssize_t n, int prefer, int toggle, double now, PyObject *bell_address, PyObject *bell)
{
    int p = peer_index(e, peer);
    if (p < 0)
        return NULL;
    unsigned long bell_at = 0;
    if (bell_address != Py_None) {
        bell_at = PyLong_AsUnsignedLong(bell_address);
        if (PyErr_Occurred())
            return NULL;
        if (!PyBytes_Check(bell) || bell_at > 0xFFFFFFFFul || PyBytes_GET_SIZE(bell) > e->max_data ||
            (unsigned long long)bell_at + (unsigned long long)PyBytes_GET_SIZE(bell) > (1ull << 32) ||
            (e->ii && (bell_at % 8 || PyBytes_GET_SIZE(bell) % 8))) {
            PyErr_SetString(PyExc_ValueError, "a doorbell is one WRITE's bytes at a 32-bit address");
            return NULL;
        }
    }
    if (prefer < -1 || prefer > 1 || (toggle != 0 && toggle != 1) || n < 1 || address > 0xFFFFFFFFul ||
        (unsigned long long)address + (unsigned long long)n > (1ull << 32) || (e->ii && (address % 8 || n % 8)) ||
        (data == NULL && n > e->max_data)) {
        PyErr_SetString(PyExc_ValueError, "a block is 1.. bytes inside the 32-bit space (8-byte units in II mode), "
                                          "a READ at most one packet's data");
        return NULL;
    }
    LOCK(e);
    int slot = -1;
    for (int i = 0; i < MAX_BLOCKS; i++)
        if (e->blk[i].state == B_FREE && e->blk[i].data == NULL) {
            slot = i;
            break;
        }
    if (slot < 0) {
        UNLOCK(e);
        Py_RETURN_FALSE;
    }
    Block *b = &e->blk[slot];
    memset(b, 0, offsetof(Block, bell_data));
    b->read = data == NULL;
    Py_XINCREF(data);
    b->data = data, b->ptr = data ? (const unsigned char *)PyBytes_AS_STRING(data) : NULL, b->len = (size_t)n;
    b->key = key, b->peer = p, b->peer_id = (uint32_t)peer, b->address = (uint32_t)address, b->prefer = prefer;
    if (bell_address != Py_None) {
        b->bell = 1, b->bell_address = (uint32_t)bell_at, b->bell_len = (size_t)PyBytes_GET_SIZE(bell);
        memcpy(b->bell_data, PyBytes_AS_STRING(bell), b->bell_len);
    }
    e->toggle[p] = (unsigned char)toggle;
    b->state = B_ACTIVE;
    pump(e, now);
    flush(e);
    UNLOCK(e);
    Py_RETURN_TRUE;
}

/* start_block(key, peer, address, data, prefer, toggle, now[, bell_address, bell]) -> bool
 * (False: no room); with a doorbell, it is sent here once every data WRITE is ACKed and
 * the block is done at its ACK; a single WRITE is a block of one packet without one */
static PyObject *Engine_start_block(Engine *e, PyObject *args)
{
    long long key;
    unsigned long peer, address;
    PyObject *data, *bell_address = Py_None, *bell = Py_None;
    int prefer, toggle;
    double now;
    if (!ready(e) || !PyArg_ParseTuple(args, "LkkSiid|OO", &key, &peer, &address, &data, &prefer, &toggle, &now,
                                       &bell_address, &bell))
        return NULL;
    return start(e, key, peer, address, data, PyBytes_GET_SIZE(data), prefer, toggle, now, bell_address, bell);
}

/* start_read(key, peer, address, length, prefer, toggle, now) -> bool (False: no room) */
static PyObject *Engine_start_read(Engine *e, PyObject *args)
{
    long long key;
    unsigned long peer, address;
    Py_ssize_t n;
    int prefer, toggle;
    double now;
    if (!ready(e) || !PyArg_ParseTuple(args, "Lkkniid", &key, &peer, &address, &n, &prefer, &toggle, &now))
        return NULL;
    return start(e, key, peer, address, NULL, n, prefer, toggle, now, Py_None, Py_None);
}

/* want(): the Python BTE has requests waiting: the next TID freed goes back to it */
static PyObject *Engine_want(Engine *e, PyObject *Py_UNUSED(x))
{
    if (!ready(e))
        return NULL;
    LOCK(e);
    e->wanted = 1;
    UNLOCK(e);
    Py_RETURN_NONE;
}

static PyObject *Engine_receive(Engine *e, PyObject *args)
{
    int fabric;
    Py_buffer buf;
    double now;
    if (!ready(e) || !PyArg_ParseTuple(args, "iy*d", &fabric, &buf, &now))
        return NULL;
    if (!fabric_arg(fabric)) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    LOCK(e);
    receive(e, fabric, buf.buf, (size_t)buf.len, now);
    UNLOCK(e);
    PyBuffer_Release(&buf);
    Py_RETURN_NONE;
}

static PyObject *Engine_tick(Engine *e, PyObject *args)
{
    double now;
    if (!ready(e) || !PyArg_ParseTuple(args, "d", &now))
        return NULL;
    LOCK(e);
    tick(e, now);
    UNLOCK(e);
    Py_RETURN_NONE;
}

static PyObject *Engine_next_deadline(Engine *e, PyObject *Py_UNUSED(x))
{
    if (!ready(e))
        return NULL;
    LOCK(e);
    double t = next_deadline(e);
    UNLOCK(e);
    return PyFloat_FromDouble(t);
}

/* take(now) -> [event]: ("back", key, nak, next_off, acked, px, py, toggle, [(tid, fabric, address, off, len,
 * deadline, is_bell)]), ("done", key, px, py, toggle, when the last ACK came, a READ's bytes | None), ("ack", peer, fabric), ("tids", [tid]), ("rx", fabric, datagram) */
static PyObject *Engine_take(Engine *e, PyObject *args)
{
    double now;
    if (!ready(e) || !PyArg_ParseTuple(args, "d", &now))
        return NULL;
    PyObject *ev = PyList_New(0);
    if (ev == NULL)
        return NULL;
    LOCK(e);
    e->notified = 0;
    PyObject *o = NULL;
    for (int i = 0; i < MAX_BLOCKS; i++) {
        Block *b = &e->blk[i];
        if (b->state == B_DONE) {
            o = Py_BuildValue("(sLLLidN)", "done", b->key, b->packets[0], b->packets[1], (int)e->toggle[b->peer],
                              b->done_at,
                              b->read ? PyBytes_FromStringAndSize((const char *)b->result, (Py_ssize_t)b->len)
                                      : Py_NewRef(Py_None));
        } else if (b->state == B_BACK) {
            PyObject *txns = PyList_New(0);
            for (int t = 0; txns != NULL && t < TIDS; t++) {
                Tid *x = &e->tid[t];
                if (x->owned && x->busy && x->block == i) {
                    PyObject *one = Py_BuildValue("(iiknndi)", t, x->fabric, (unsigned long)x->address,
                                                  (Py_ssize_t)x->off, (Py_ssize_t)x->len, x->deadline, x->is_bell);
                    if (one == NULL || PyList_Append(txns, one) < 0)
                        Py_CLEAR(txns);
                    Py_XDECREF(one);
                    x->owned = x->busy = 0; /* Python's now */
                }
            }
            o = txns == NULL ? NULL
                             : Py_BuildValue("(sLinnLLiN)", "back", b->key, b->error_nak, (Py_ssize_t)b->next_off,
                                             (Py_ssize_t)b->acked, b->packets[0], b->packets[1],
                                             (int)e->toggle[b->peer], txns);
        } else
            continue;
        b->state = B_FREE;
        Py_CLEAR(b->data);
        if (o == NULL || PyList_Append(ev, o) < 0)
            goto fail;
        Py_DECREF(o);
    }
    for (int p = 0; p < e->npeers; p++)
        for (int f = 0; f < 2; f++)
            if (e->acked_on[p][f]) {
                e->acked_on[p][f] = 0;
                o = Py_BuildValue("(ski)", "ack", (unsigned long)e->peer_id[p], f);
                if (o == NULL || PyList_Append(ev, o) < 0)
                    goto fail;
                Py_DECREF(o);
            }
    pump(e, now); /* TIDs freed by handed-back blocks go to the blocks left, or back */
    flush(e);
    if (e->returned) {
        PyObject *tids = PyList_New(0);
        for (int t = 0; tids != NULL && t < TIDS; t++)
            if (e->returned >> t & 1) {
                PyObject *v = PyLong_FromLong(t);
                if (v == NULL || PyList_Append(tids, v) < 0)
                    Py_CLEAR(tids);
                Py_XDECREF(v);
            }
        e->returned = 0;
        o = tids == NULL ? NULL : Py_BuildValue("(sN)", "tids", tids);
        if (o == NULL || PyList_Append(ev, o) < 0)
            goto fail;
        Py_DECREF(o);
    }
    while (e->slow_n) {
        Dgram *d = &e->slow[e->slow_head];
        e->slow_head = (e->slow_head + 1) % SLOW_QUEUE;
        e->slow_n--;
        o = Py_BuildValue("(siy#)", "rx", d->fabric, (const char *)d->buf, (Py_ssize_t)d->len);
        if (o == NULL || PyList_Append(ev, o) < 0)
            goto fail;
        Py_DECREF(o);
    }
    UNLOCK(e);
    return ev;
fail:
    Py_XDECREF(o);
    UNLOCK(e);
    Py_DECREF(ev);
    return NULL;
}

static PyObject *Engine_take_out(Engine *e, PyObject *Py_UNUSED(x))
{
    if (!ready(e))
        return NULL;
    LOCK(e);
    PyObject *list = PyList_New(e->out_n);
    for (int i = 0; list != NULL && i < e->out_n; i++) {
        PyObject *o = Py_BuildValue("(iy#)", e->out[i].fabric, (const char *)e->out[i].buf, (Py_ssize_t)e->out[i].len);
        if (o == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, o);
    }
    if (list != NULL)
        e->out_n = 0;
    UNLOCK(e);
    return list;
}

static PyObject *Engine_counters(Engine *e, PyObject *Py_UNUSED(x))
{
    if (!ready(e))
        return NULL;
    PyObject *d = Py_BuildValue("{s{}s{}s{}}", "node", "avt", "bte");
    if (d == NULL)
        return NULL;
    LOCK(e);
    uint64_t c[N_COUNTERS];
    memcpy(c, e->counters, sizeof c);
    UNLOCK(e);
    for (int i = 0; i < N_COUNTERS; i++) {
        if (!c[i])
            continue;
        PyObject *v = PyLong_FromUnsignedLongLong(c[i]);
        if (v == NULL || PyDict_SetItemString(PyDict_GetItemString(d, counter_group[i]), counter_name[i], v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(v);
    }
    return d;
}

static PyObject *Engine_status(Engine *e, PyObject *Py_UNUSED(x))
{
    if (!ready(e))
        return NULL;
    LOCK(e);
    int owned = 0, busy = 0, blocks = 0;
    for (int i = 0; i < TIDS; i++)
        owned += e->tid[i].owned, busy += e->tid[i].busy;
    for (int i = 0; i < MAX_BLOCKS; i++)
        blocks += e->blk[i].state != B_FREE;
    PyObject *r = Py_BuildValue("{sisisisi}", "tids_lent", owned, "tids_in_use", busy, "tids_high_water",
                                e->high_water, "blocks", blocks);
    UNLOCK(e);
    return r;
}

/* attach(fd_x, router_x, fd_y, router_y, notify_fd): fd -1 for a fabric not configured */
static PyObject *Engine_attach(Engine *e, PyObject *args)
{
    int fx, fy, nfd;
    PyObject *rx, *ry;
    if (!ready(e) || !PyArg_ParseTuple(args, "iOiOi", &fx, &rx, &fy, &ry, &nfd))
        return NULL;
    Addr ax = {0}, ay = {0};
    if ((fx >= 0 && parse_addr(rx, &ax) < 0) || (fy >= 0 && parse_addr(ry, &ay) < 0))
        return NULL;
    LOCK(e);
    e->fd[0] = fx, e->fd[1] = fy, e->router[0] = ax, e->router[1] = ay, e->notify_fd = nfd;
    e->attached = 1;
    UNLOCK(e);
    Py_RETURN_NONE;
}

/* serve(poll_ms) -> None: until stop(), wait for either fabric (at most poll_ms, or until
 * the next block deadline), then receive, answer, send; all without the GIL */
static PyObject *Engine_serve(Engine *e, PyObject *args)
{
    int poll_ms;
    if (!ready(e) || !PyArg_ParseTuple(args, "i", &poll_ms))
        return NULL;
    if (!e->attached || e->serving) {
        PyErr_SetString(PyExc_RuntimeError, "serve() needs attach() and runs in one thread");
        return NULL;
    }
    e->serving = 1;
    Py_BEGIN_ALLOW_THREADS
    while (!__atomic_load_n(&e->stop, __ATOMIC_ACQUIRE)) {
        LOCK(e);
        double due = next_deadline(e), now = mono();
        UNLOCK(e);
        int wait = poll_ms;
        if (due < INFINITY) {
            double ms = (due - now) * 1000.0 + 1.0; /* rounded up: never wake before the deadline */
            wait = ms < 0 ? 0 : ms < wait ? (int)ms : wait;
        }
        struct pollfd pfd[2];
        int np = 0, fab[2];
        for (int f = 0; f < 2; f++)
            if (e->fd[f] >= 0)
                fab[np] = f, pfd[np].fd = e->fd[f], pfd[np].events = POLLIN, pfd[np].revents = 0, np++;
        poll(pfd, (nfds_t)np, wait);
        LOCK(e);
        now = mono();
        for (int i = 0; i < np; i++)
            if (pfd[i].revents) /* only the fabric that woke us: no recvmmsg just to hear EAGAIN */
                drain(e, fab[i], now);
        tick(e, now);
        flush(e);
        UNLOCK(e);
    }
    Py_END_ALLOW_THREADS
    e->serving = 0;
    Py_RETURN_NONE;
}

/* stop(): serve() returns within its poll_ms */
static PyObject *Engine_stop(Engine *e, PyObject *Py_UNUSED(x))
{
    __atomic_store_n(&e->stop, 1, __ATOMIC_RELEASE);
    Py_RETURN_NONE;
}

static PyMethodDef Engine_methods[] = {
    {"set_windows", (PyCFunction)Engine_set_windows, METH_O,
     "set_windows([(page, pages, access 1|2|3, paths mask, slow, sources|None, memory|None)])"},
    {"set_path", (PyCFunction)Engine_set_path, METH_VARARGS, "set_path(peer, fabric, state 0..3): UP..PROBING"},
    {"lend", (PyCFunction)Engine_lend, METH_VARARGS, "lend(tids, now): TIDs for the blocks here"},
    {"start_block", (PyCFunction)Engine_start_block, METH_VARARGS,
     "start_block(key, peer, address, data, prefer, toggle, now[, bell_address, bell]) -> False when full"},
    {"start_read", (PyCFunction)Engine_start_read, METH_VARARGS,
     "start_read(key, peer, address, length, prefer, toggle, now) -> False when full"},
    {"want", (PyCFunction)Engine_want, METH_NOARGS, "want(): give the next TID freed back"},
    {"receive", (PyCFunction)Engine_receive, METH_VARARGS, "receive(fabric, datagram, now)"},
    {"tick", (PyCFunction)Engine_tick, METH_VARARGS, "tick(now): deadlines"},
    {"next_deadline", (PyCFunction)Engine_next_deadline, METH_NOARGS, "the earliest block WRITE deadline"},
    {"take", (PyCFunction)Engine_take, METH_VARARGS, "take(now) -> events for Python, in order"},
    {"take_out", (PyCFunction)Engine_take_out, METH_NOARGS, "[(fabric, datagram)] to send (sans-IO use)"},
    {"counters", (PyCFunction)Engine_counters, METH_NOARGS, "{'node': .., 'avt': .., 'bte': ..} non-zero counters"},
    {"status", (PyCFunction)Engine_status, METH_NOARGS, "TIDs lent and in use, blocks"},
    {"attach", (PyCFunction)Engine_attach, METH_VARARGS, "attach(fd_x, router_x, fd_y, router_y, notify_fd)"},
    {"serve", (PyCFunction)Engine_serve, METH_VARARGS, "serve(poll_ms): the I/O loop, until stop()"},
    {"stop", (PyCFunction)Engine_stop, METH_NOARGS, "stop(): end serve()"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "servernet._snetnode.Engine",
    .tp_basicsize = sizeof(Engine),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Engine_init,
    .tp_dealloc = (destructor)Engine_dealloc,
    .tp_methods = Engine_methods,
    .tp_doc = "An end node's compiled responder and block engine (see the module source's head).",
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "servernet._snetnode",
                                       "snetd's compiled per-packet path.", -1, NULL};

PyMODINIT_FUNC PyInit__snetnode(void)
{
    crc_init();
    if (PyType_Ready(&EngineType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
    Py_INCREF(&EngineType);
    if (PyModule_AddObject(m, "Engine", (PyObject *)&EngineType) < 0 ||
        PyModule_AddIntConstant(m, "MAX_BLOCKS", MAX_BLOCKS) < 0 ||
        PyModule_AddIntConstant(m, "SLOW_QUEUE", SLOW_QUEUE) < 0 || PyModule_AddIntConstant(m, "BATCH", BATCH) < 0)
        return NULL;
    return m;
}
