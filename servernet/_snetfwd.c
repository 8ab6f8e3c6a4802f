/* snet-router's per-packet path, compiled (issue 14): servernet.router.RouterCore is
 * the Python oracle with the same decisions and counters; tests/unit/
 * test_snetfwd_differential.py holds the two to the same outputs.
 *
 * Router(fd, fabric, ports, table, enables):
 *   ports    dict port -> (host, port) UDP address (IPv4 or IPv6 literal)
 *   table    1 << 20 bytes: the output port of every DID, 0xFF for none (longest
 *            prefix already resolved by servernet.router.route_table)
 *   enables  dict in-port -> iterable of the out-ports it may use (absent: all)
 * receive(src, datagram) -> ((host, port), datagram) | None   one datagram, as RouterCore
 * forward(timeout_ms) -> int   wait up to timeout_ms for the socket, then recvmmsg /
 *            decide / sendmmsg until it is drained (at most RX_ROUNDS batches), all
 *            without the GIL; the number of datagrams received
 * serve(poll_ms), stop()   the same in a loop that stays in C until stop() (snet-router's
 *            thread): a blocking recvmmsg waits, no poll and no Python per wake-up
 * counters() -> dict   the non-zero counters, named as RouterCore names them
 *
 * FabricSocket(fd, router): an end node's socket on one fabric (servernet.driver):
 * send(datagrams) to the router by sendmmsg (servernet._snetnode receives).
 *
 * Each datagram: the sender's address picks the input port; runt, envelope, fabric and
 * size checks; the DID from the first 3 packet bytes picks the output port; the
 * deadlock mask; the CRC-32 checked and a bad packet forwarded tagged TPB.
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h> /* struct timeval: SO_RCVTIMEO */

#include "_snetcommon.h" /* the packet CRC, a (host, port) address (shared with _snetnode.c) */

/* servernet/constants.py (tests/unit/test_snetfwd_differential.py checks the exported ones) */
#define ENVELOPE_BYTES 4
#define MIN_PACKET 12 /* header + CRC */
#define CRC_BYTES 4
#define MAGIC_HI 0x53
#define MAGIC_LO 0x4E
#define VERSION 1
#define FLAG_FABRIC 0x01
#define FLAG_TPB 0x02
#define FLAG_II 0x04
#define FLAGS_KNOWN 0x07
#define MAX_DATAGRAM 84
#define MAX_DATAGRAM_II 532
#define ID_BITS 20
#define MAX_PORTS 12
#define NO_PORT 0xFF
#define BATCH 64    /* datagrams per recvmmsg/sendmmsg (project choice) */
#define RX_ROUNDS 4 /* batches per forward() call: 256 datagrams, the Python RX_BURST */
#define BUF_BYTES (MAX_DATAGRAM_II + 1)

#define COUNTERS(X)                                                                                      \
    X(UNKNOWN_SENDER, "drop_unknown_sender") X(RUNT, "drop_runt") X(BAD_ENVELOPE, "drop_bad_envelope") \
    X(WRONG_FABRIC, "drop_wrong_fabric") X(OVERSIZE, "drop_oversize") X(NO_ROUTE, "drop_no_route")     \
    X(PORT_DISABLED, "drop_port_disabled") X(TAGGED, "tagged_bad_crc") X(RX_ERROR, "rx_error")         \
    X(TX_FULL, "drop_tx_full") X(TX_ERROR, "tx_error")

#define AS_ENUM(id, name) C_##id,
#define AS_NAME(id, name) name,
enum { COUNTERS(AS_ENUM) N_NAMED };
static const char *counter_names[N_NAMED] = {COUNTERS(AS_NAME)};
#define C_RX(p) (N_NAMED + 2 * (p))
#define C_TX(p) (N_NAMED + 2 * (p) + 1)
#define N_COUNTERS (N_NAMED + 2 * MAX_PORTS)

typedef struct {
    PyObject_HEAD
    int fd;
    int fabric;
    int busy; /* forward() or serve() is running (its buffers are in use) */
    int stop; /* serve() returns */
    int nports;
    int number[MAX_PORTS];       /* port number of each slot */
    Addr addr[MAX_PORTS];        /* its UDP address */
    PyObject *pyaddr[MAX_PORTS]; /* the (host, port) tuple receive() returns */
    uint16_t enable[MAX_PORTS];  /* out-port numbers allowed, as a bit mask (all ones: no mask) */
    int slot_of[MAX_PORTS];      /* port number -> slot, -1 when not cabled */
    unsigned char *table;        /* 1 << 20 entries */
    uint64_t counters[N_COUNTERS];
    struct mmsghdr rx[BATCH], tx[BATCH];
    struct iovec rx_iov[BATCH], tx_iov[BATCH];
    struct sockaddr_storage from[BATCH];
    unsigned char buf[BATCH][BUF_BYTES];
} Router;

/* the slot whose address sent this, or -1 */
static int slot_from(const Router *r, const struct sockaddr_storage *sa)
{
    for (int i = 0; i < r->nports; i++)
        if (addr_is(&r->addr[i], sa))
            return i;
    return -1;
}

/* One datagram from input slot `in` (-1: unknown sender): the output slot, or -1 (counted).
 * May set the TPB flag in buf[3]. */
static int route_one(const Router *r, int in, unsigned char *buf, size_t n, uint64_t *c)
{
    if (in < 0) {
        c[C_UNKNOWN_SENDER]++;
        return -1;
    }
    if (n < ENVELOPE_BYTES + MIN_PACKET) {
        c[C_RUNT]++;
        return -1;
    }
    unsigned flags = buf[3];
    if (buf[0] != MAGIC_HI || buf[1] != MAGIC_LO || buf[2] != VERSION || (flags & ~FLAGS_KNOWN)) {
        c[C_BAD_ENVELOPE]++;
        return -1;
    }
    if ((int)(flags & FLAG_FABRIC) != r->fabric) {
        c[C_WRONG_FABRIC]++;
        return -1;
    }
    if (n > ((flags & FLAG_II) ? MAX_DATAGRAM_II : MAX_DATAGRAM)) {
        c[C_OVERSIZE]++;
        return -1;
    }
    /* the first 3 packet bytes choose the port */
    uint32_t did = ((uint32_t)buf[4] << 12) | ((uint32_t)buf[5] << 4) | (buf[6] >> 4);
    unsigned port = r->table[did];
    if (port == NO_PORT || port >= MAX_PORTS || r->slot_of[port] < 0) {
        c[C_NO_ROUTE]++;
        return -1;
    }
    if (!(r->enable[in] >> port & 1)) {
        c[C_PORT_DISABLED]++;
        return -1;
    }
    if (!(flags & FLAG_TPB)) {
        const unsigned char *t = buf + n - CRC_BYTES;
        uint32_t want = (uint32_t)t[0] << 24 | (uint32_t)t[1] << 16 | (uint32_t)t[2] << 8 | t[3];
        if (crc32_ieee(buf + ENVELOPE_BYTES, n - ENVELOPE_BYTES - CRC_BYTES) != want) {
            c[C_TAGGED]++;
            buf[3] = (unsigned char)(flags | FLAG_TPB);
        }
    }
    int out = r->slot_of[port];
    c[C_RX(r->number[in])]++;
    c[C_TX(port)]++;
    return out;
}

static void Router_release(Router *self)
{
    for (int i = 0; i < MAX_PORTS; i++)
        Py_CLEAR(self->pyaddr[i]);
    PyMem_Free(self->table);
    self->table = NULL;
    self->nports = 0;
}

static int Router_init(Router *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"fd", "fabric", "ports", "table", "enables", NULL};
    int fd, fabric;
    PyObject *ports, *enables;
    Py_buffer table;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iiO!y*O!", kwlist, &fd, &fabric, &PyDict_Type, &ports, &table,
                                     &PyDict_Type, &enables))
        return -1;
    if (self->busy) {
        PyBuffer_Release(&table);
        PyErr_SetString(PyExc_RuntimeError, "forward() is running");
        return -1;
    }
    Router_release(self);
    int ok = -1;
    if (table.len != (Py_ssize_t)1 << ID_BITS) {
        PyErr_SetString(PyExc_ValueError, "the routing table holds one byte per 20-bit DID");
        goto out;
    }
    if (fabric != 0 && fabric != 1) {
        PyErr_SetString(PyExc_ValueError, "fabric is 0 (X) or 1 (Y)");
        goto out;
    }
    if (PyDict_Size(ports) > MAX_PORTS) {
        PyErr_SetString(PyExc_ValueError, "a router has at most 12 ports");
        goto out;
    }
    self->table = PyMem_Malloc(table.len);
    if (self->table == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    memcpy(self->table, table.buf, table.len);
    self->fd = fd;
    self->fabric = fabric;
    for (int i = 0; i < MAX_PORTS; i++)
        self->slot_of[i] = -1;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(ports, &pos, &key, &value)) {
        long p = PyLong_AsLong(key);
        if (p == -1 && PyErr_Occurred())
            goto out;
        if (p < 0 || p >= MAX_PORTS) {
            PyErr_SetString(PyExc_ValueError, "ports are numbered 0..11");
            goto out;
        }
        int i = self->nports;
        if (parse_addr(value, &self->addr[i]) < 0)
            goto out;
        self->number[i] = (int)p;
        self->slot_of[p] = i;
        self->enable[i] = 0xFFFF;
        Py_INCREF(value);
        self->pyaddr[i] = value;
        self->nports++;
    }
    pos = 0;
    while (PyDict_Next(enables, &pos, &key, &value)) {
        long p = PyLong_AsLong(key);
        if (p == -1 && PyErr_Occurred())
            goto out;
        if (p < 0 || p >= MAX_PORTS || self->slot_of[p] < 0) {
            PyErr_SetString(PyExc_ValueError, "an enable mask names a port that is not cabled");
            goto out;
        }
        PyObject *it = PyObject_GetIter(value), *item;
        if (it == NULL)
            goto out;
        uint16_t mask = 0;
        while ((item = PyIter_Next(it)) != NULL) {
            long o = PyLong_AsLong(item);
            Py_DECREF(item);
            if (o < 0 || o >= MAX_PORTS) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_ValueError, "ports are numbered 0..11");
                Py_DECREF(it);
                goto out;
            }
            mask |= (uint16_t)(1u << o);
        }
        Py_DECREF(it);
        if (PyErr_Occurred())
            goto out;
        self->enable[self->slot_of[p]] = mask;
    }
    memset(self->counters, 0, sizeof self->counters);
    ok = 0;
out:
    PyBuffer_Release(&table);
    if (ok < 0)
        Router_release(self);
    return ok;
}

static void Router_dealloc(Router *self)
{
    Router_release(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Router_receive(Router *self, PyObject *args)
{
    PyObject *src;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "Oy*", &src, &data))
        return NULL;
    if (self->table == NULL || self->busy) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_RuntimeError, "the router is not set up, or forward() is running");
        return NULL;
    }
    Addr from;
    if (parse_addr(src, &from) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    PyObject *copy = PyBytes_FromStringAndSize(data.buf, data.len);
    PyBuffer_Release(&data);
    if (copy == NULL)
        return NULL;
    int out = route_one(self, slot_from(self, &from.sa), (unsigned char *)PyBytes_AS_STRING(copy),
                        (size_t)PyBytes_GET_SIZE(copy), self->counters);
    if (out < 0) {
        Py_DECREF(copy);
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(ON)", self->pyaddr[out], copy);
}

/* recvmmsg / decide / sendmmsg until the socket is drained (at most RX_ROUNDS batches),
 * without the GIL; the first recvmmsg with `first` (MSG_DONTWAIT after a poll, or
 * MSG_WAITFORONE on a blocking socket: it waits for one datagram, up to SO_RCVTIMEO);
 * counts into c; the number of datagrams received */
static long forward_rounds(Router *self, int first, uint64_t *c)
{
    long total = 0;
    for (int round = 0; round < RX_ROUNDS; round++) {
        rx_batch_setup(self->rx, self->rx_iov, self->from, (unsigned char *)self->buf, BUF_BYTES, BATCH);
        int got = recvmmsg(self->fd, self->rx, BATCH, round ? MSG_DONTWAIT : first, NULL);
        if (got < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            if (errno != EINTR)
                c[C_RX_ERROR]++; /* e.g. an ICMP error of an earlier send */
            if (errno == EINTR && !round)
                break; /* a signal while waiting: back to the caller's stop flag */
            continue;
        }
        total += got;
        int nout = 0;
        for (int i = 0; i < got; i++) {
            size_t n = self->rx[i].msg_len;
            int out = route_one(self, slot_from(self, &self->from[i]), self->buf[i], n, c);
            if (out < 0)
                continue;
            tx_hdr_setup(&self->tx[nout], &self->tx_iov[nout], self->buf[i], n, &self->addr[out]);
            nout++;
        }
        tx_batch_send(self->fd, self->tx, nout, &c[C_TX_FULL], &c[C_TX_ERROR]);
        if (got < BATCH)
            break;
    }
    return total;
}

/* c added to the counters counters() reads (serve() does it without the GIL) */
static void merge(Router *self, const uint64_t *c)
{
    for (int i = 0; i < N_COUNTERS; i++)
        if (c[i])
            __atomic_fetch_add(&self->counters[i], c[i], __ATOMIC_RELAXED);
}

static int claim(Router *self)
{
    if (self->table == NULL || self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the router is not set up, or forward() or serve() is running");
        return 0;
    }
    self->busy = 1;
    return 1;
}

static PyObject *Router_forward(Router *self, PyObject *args)
{
    int timeout_ms;
    if (!PyArg_ParseTuple(args, "i", &timeout_ms) || !claim(self))
        return NULL;
    uint64_t c[N_COUNTERS] = {0};
    long total = 0;
    Py_BEGIN_ALLOW_THREADS
    struct pollfd pfd = {.fd = self->fd, .events = POLLIN};
    if (poll(&pfd, 1, timeout_ms) > 0)
        total = forward_rounds(self, MSG_DONTWAIT, c);
    Py_END_ALLOW_THREADS
    merge(self, c);
    self->busy = 0;
    return PyLong_FromLong(total);
}

/* serve(poll_ms): forward until stop(), never taking the GIL back in between: the socket
 * is made blocking with SO_RCVTIMEO = poll_ms, so one recvmmsg waits and receives (no poll
 * call, no return to Python per wake-up) and stop() is seen within poll_ms */
static PyObject *Router_serve(Router *self, PyObject *args)
{
    int poll_ms;
    if (!PyArg_ParseTuple(args, "i", &poll_ms))
        return NULL;
    if (poll_ms < 1) {
        PyErr_SetString(PyExc_ValueError, "poll_ms is at least 1");
        return NULL;
    }
    struct timeval tv = {.tv_sec = poll_ms / 1000, .tv_usec = (poll_ms % 1000) * 1000};
    int fl = fcntl(self->fd, F_GETFL);
    if (fl < 0 || fcntl(self->fd, F_SETFL, fl & ~O_NONBLOCK) < 0 ||
        setsockopt(self->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    if (!claim(self))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    while (!__atomic_load_n(&self->stop, __ATOMIC_ACQUIRE)) {
        uint64_t c[N_COUNTERS] = {0};
        forward_rounds(self, MSG_WAITFORONE, c);
        merge(self, c);
    }
    Py_END_ALLOW_THREADS
    self->busy = 0;
    Py_RETURN_NONE;
}

/* stop(): serve() returns within its poll_ms */
static PyObject *Router_stop(Router *self, PyObject *Py_UNUSED(ignored))
{
    __atomic_store_n(&self->stop, 1, __ATOMIC_RELEASE);
    Py_RETURN_NONE;
}

static PyObject *Router_counters(Router *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    for (int i = 0; i < N_COUNTERS; i++) {
        uint64_t n = __atomic_load_n(&self->counters[i], __ATOMIC_RELAXED);
        if (!n)
            continue;
        PyObject *name = i < N_NAMED ? PyUnicode_FromString(counter_names[i])
                                     : PyUnicode_FromFormat("port%d_%s", (i - N_NAMED) / 2,
                                                            (i - N_NAMED) % 2 ? "tx" : "rx");
        PyObject *v = PyLong_FromUnsignedLongLong(n);
        if (name == NULL || v == NULL || PyDict_SetItem(d, name, v) < 0) {
            Py_XDECREF(name);
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(name);
        Py_DECREF(v);
    }
    return d;
}

static PyMethodDef Router_methods[] = {
    {"receive", (PyCFunction)Router_receive, METH_VARARGS,
     "receive(src, datagram) -> ((host, port), datagram) or None: one datagram, as RouterCore.receive."},
    {"forward", (PyCFunction)Router_forward, METH_VARARGS,
     "forward(timeout_ms) -> int: wait for the socket, forward what it holds (GIL released)."},
    {"serve", (PyCFunction)Router_serve, METH_VARARGS,
     "serve(poll_ms): forward until stop() (GIL released throughout; the socket made blocking)."},
    {"stop", (PyCFunction)Router_stop, METH_NOARGS, "stop(): serve() returns within its poll_ms."},
    {"counters", (PyCFunction)Router_counters, METH_NOARGS, "The non-zero counters by name."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RouterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "servernet._snetfwd.Router",
    .tp_basicsize = sizeof(Router),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A ServerNet router's forwarding loop over one UDP socket (RouterCore is its oracle).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Router_init,
    .tp_dealloc = (destructor)Router_dealloc,
    .tp_methods = Router_methods,
};

/* --- an end node's fabric socket: batched receive and send (servernet.driver) ----------------- */

#define NODE_BATCH 64 /* datagrams per recvmmsg/sendmmsg of a node (project choice) */

typedef struct {
    PyObject_HEAD
    int fd;
    Addr peer; /* the fabric's router: the only sender accepted, where everything goes */
    struct mmsghdr msg[NODE_BATCH];
    struct iovec iov[NODE_BATCH];
} FabricSocket;

static int FabricSocket_init(FabricSocket *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"fd", "router", NULL};
    PyObject *router;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iO", kwlist, &self->fd, &router))
        return -1;
    return parse_addr(router, &self->peer);
}

static void FabricSocket_dealloc(FabricSocket *self)
{
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* send(datagrams) -> (dropped because the socket buffer was full, other send errors) */
static PyObject *FabricSocket_send(FabricSocket *self, PyObject *arg)
{
    PyObject *seq = PySequence_Fast(arg, "send takes a list of datagrams");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    uint64_t full = 0, errors = 0;
    for (Py_ssize_t base = 0; base < n; base += NODE_BATCH) {
        int k = (int)(n - base < NODE_BATCH ? n - base : NODE_BATCH);
        for (int i = 0; i < k; i++) {
            PyObject *item = PySequence_Fast_GET_ITEM(seq, base + i);
            if (!PyBytes_Check(item)) {
                Py_DECREF(seq);
                PyErr_SetString(PyExc_TypeError, "a datagram is bytes");
                return NULL;
            }
            tx_hdr_setup(&self->msg[i], &self->iov[i], PyBytes_AS_STRING(item), (size_t)PyBytes_GET_SIZE(item),
                         &self->peer);
        }
        tx_batch_send(self->fd, self->msg, k, &full, &errors);
    }
    Py_DECREF(seq);
    return Py_BuildValue("(KK)", (unsigned long long)full, (unsigned long long)errors);
}

static PyMethodDef FabricSocket_methods[] = {
    {"send", (PyCFunction)FabricSocket_send, METH_O,
     "send(datagrams) -> (dropped: socket buffer full, other errors): all to the router, by sendmmsg."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FabricSocketType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "servernet._snetfwd.FabricSocket",
    .tp_basicsize = sizeof(FabricSocket),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An end node's socket on one fabric: batched receive from and send to its router.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)FabricSocket_init,
    .tp_dealloc = (destructor)FabricSocket_dealloc,
    .tp_methods = FabricSocket_methods,
};

static PyObject *mod_crc32(PyObject *m, PyObject *args)
{
    Py_buffer b;
    if (!PyArg_ParseTuple(args, "y*", &b))
        return NULL;
    uint32_t c = crc32_ieee(b.buf, (size_t)b.len);
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(c);
}

static PyMethodDef module_methods[] = {
    {"crc32", mod_crc32, METH_VARARGS, "crc32(data) -> int: the router's CRC-32 (zlib.crc32's)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "servernet._snetfwd",
    "snet-router's forwarding loop compiled (servernet.router.RouterCore is its oracle).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__snetfwd(void)
{
    crc_init();
    if (PyType_Ready(&RouterType) < 0 || PyType_Ready(&FabricSocketType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
    Py_INCREF(&RouterType);
    Py_INCREF(&FabricSocketType);
    if (PyModule_AddObject(m, "Router", (PyObject *)&RouterType) < 0 ||
        PyModule_AddObject(m, "FabricSocket", (PyObject *)&FabricSocketType) < 0 ||
        PyModule_AddIntConstant(m, "BATCH", BATCH) < 0 || PyModule_AddIntConstant(m, "MAX_PORTS", MAX_PORTS) < 0 ||
        PyModule_AddIntConstant(m, "NODE_BATCH", NODE_BATCH) < 0 ||
        PyModule_AddIntConstant(m, "MAX_DATAGRAM_II", MAX_DATAGRAM_II) < 0 ||
        PyModule_AddIntConstant(m, "FLAGS_KNOWN", FLAGS_KNOWN) < 0) {
        Py_DECREF(&RouterType);
        Py_DECREF(&FabricSocketType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
