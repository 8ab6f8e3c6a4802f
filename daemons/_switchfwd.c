/* gsn-switch's per-micropacket forwarding walk, compiled (issue 11): one call per
 * received batch of one input VC.  daemons/switch/forward.py (PyForwarder) is the
 * Python oracle with the same interface; tests/unit/test_switchfwd_differential.py
 * holds the two to the same outputs.
 *
 * The walk reads each micropacket's control word, opens a Message at a HEADER
 * (route by D_ULA, source check by S_ULA, broadcast along the tree), cuts the batch
 * into segments at TAIL, HEADER and ADMIN, and stops at an ADMIN micropacket so that
 * Python handles it (Admin may change the table the next HEADER is routed by).
 * Segments are (start, end, targets, tail); start == end is "close the open Message
 * with TAIL + ERROR" (a HEADER arrived inside one).  Everything is read from the
 * Switch's own objects (the ports dict of Port, the ULA table dict) each time, so
 * nothing is mirrored.  The output side (wormhole owner per output VC, credits,
 * enqueue on the output link, whose datagram build restamps) stays in Switch.pump.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_switchfwdapi.h"

#define MP_BYTES 40
#define MP_DATA_BYTES 32
#define NUM_VCS 4
#define T_HEADER 2
#define T_ADMIN 3

/* Ingress-port counters, in the order of the tuple ingress() returns (COUNTERS). */
#define COUNTERS(X)                                                                                      \
    X(RX_MESSAGES, "rx_messages") X(HEADER_INSIDE, "header_inside_message")                              \
    X(STRAY_DATA, "drop_stray_data") X(SPOOFED, "drop_spoofed_source")                                   \
    X(BCAST_DISABLED, "drop_broadcast_disabled") X(BCAST_OFF_TREE, "drop_broadcast_off_tree")            \
    X(BCAST_STRAY, "drop_broadcast_from_unconfigured_switch") X(UNKNOWN_ULA, "drop_unknown_ula")         \
    X(ROUTE_BACK, "drop_route_back") X(OUTPUT_DOWN, "drop_output_down")

#define AS_ENUM(id, name) C_##id,
#define AS_NAME(id, name) name,
enum { COUNTERS(AS_ENUM) N_COUNTERS };
static const char *counter_names[N_COUNTERS] = {COUNTERS(AS_NAME)};

static const unsigned char ULA_BROADCAST[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

typedef struct {
    PyObject_HEAD
    PyObject *ports; /* dict: number -> Port (daemons.switch.core) */
    PyObject *table; /* dict: 6-byte ULA -> port number */
} Forwarder;

static int Forwarder_init(Forwarder *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"ports", "table", NULL};
    PyObject *ports, *table;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O!", kwlist, &PyDict_Type, &ports, &PyDict_Type, &table))
        return -1;
    Py_INCREF(ports);
    Py_INCREF(table);
    Py_XSETREF(self->ports, ports);
    Py_XSETREF(self->table, table);
    return 0;
}

static int Forwarder_traverse(Forwarder *self, visitproc visit, void *arg)
{
    Py_VISIT(self->ports);
    Py_VISIT(self->table);
    return 0;
}

static int Forwarder_clear(Forwarder *self)
{
    Py_CLEAR(self->ports);
    Py_CLEAR(self->table);
    return 0;
}

static void Forwarder_dealloc(Forwarder *self)
{
    PyObject_GC_UnTrack(self);
    Forwarder_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* getattr(obj, name) as a truth value; -1 on error. */
static int attr_true(PyObject *obj, const char *name)
{
    PyObject *v = PyObject_GetAttrString(obj, name);
    if (!v)
        return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

/* port.link.up; -1 on error. */
static int port_up(PyObject *port)
{
    PyObject *link = PyObject_GetAttrString(port, "link");
    if (!link)
        return -1;
    int r = attr_true(link, "up");
    Py_DECREF(link);
    return r;
}

/* ports[number] (borrowed); NULL with KeyError when there is none. */
static PyObject *port_of(Forwarder *self, PyObject *number)
{
    PyObject *p = PyDict_GetItemWithError(self->ports, number);
    if (!p && !PyErr_Occurred())
        PyErr_SetObject(PyExc_KeyError, number);
    return p;
}

static int on_tree(unsigned long long tree, long p)
{
    return p >= 1 && p <= 64 && (tree >> (p - 1) & 1);
}

/* The output ports of a Message arriving on `port` (number `in_no`): a new tuple,
 * empty to drop it whole; NULL on error.  Counts its drop reason. */
static PyObject *route(Forwarder *self, PyObject *port, long in_no, const unsigned char *hdr, int broadcast,
                       unsigned long long tree, Py_ssize_t *counts)
{
    int fabric = attr_true(port, "fabric"), trusted = attr_true(port, "trust_source");
    if (fabric < 0 || trusted < 0)
        return NULL;
    PyObject *src = PyBytes_FromStringAndSize((const char *)hdr + 6, 6);
    if (!src)
        return NULL;
    PyObject *bound = PyDict_GetItemWithError(self->table, src); /* borrowed */
    Py_DECREF(src);
    if (!bound && PyErr_Occurred())
        return NULL;
    if (fabric) {
        /* from another switch: any source but one this switch binds to a host port */
        if (bound && !trusted) {
            PyObject *bp = port_of(self, bound);
            if (!bp)
                return NULL;
            int bf = attr_true(bp, "fabric");
            if (bf < 0)
                return NULL;
            if (!bf) {
                counts[C_SPOOFED]++;
                return PyTuple_New(0);
            }
        }
    } else if (!trusted) {
        long b = bound ? PyLong_AsLong(bound) : -1;
        if (b == -1 && PyErr_Occurred())
            return NULL;
        if (!bound || b != in_no) {
            counts[C_SPOOFED]++;
            return PyTuple_New(0);
        }
    }
    if (memcmp(hdr, ULA_BROADCAST, 6) == 0) {
        if (!broadcast) {
            counts[C_BCAST_DISABLED]++;
            return PyTuple_New(0);
        }
        if (fabric && !on_tree(tree, in_no)) {
            counts[C_BCAST_OFF_TREE]++;
            return PyTuple_New(0);
        }
        int stray = attr_true(port, "stray_switch");
        if (stray < 0)
            return NULL;
        if (stray) {
            counts[C_BCAST_STRAY]++;
            return PyTuple_New(0);
        }
        /* every host port (the sender's too) and the tree's other links */
        PyObject *out = PyList_New(0), *key, *val;
        if (!out)
            return NULL;
        Py_ssize_t it = 0;
        while (PyDict_Next(self->ports, &it, &key, &val)) {
            long p = PyLong_AsLong(key);
            if (p == -1 && PyErr_Occurred())
                goto fail;
            int up = port_up(val), st = up > 0 ? attr_true(val, "stray_switch") : 0;
            int pf = up > 0 && !st ? attr_true(val, "fabric") : 0;
            if (up < 0 || st < 0 || pf < 0)
                goto fail;
            if (up && !st && (!pf || (on_tree(tree, p) && p != in_no)) && PyList_Append(out, key) < 0)
                goto fail;
        }
        PyObject *t = PyList_AsTuple(out);
        Py_DECREF(out);
        return t;
    fail:
        Py_DECREF(out);
        return NULL;
    }
    PyObject *dst = PyBytes_FromStringAndSize((const char *)hdr, 6);
    if (!dst)
        return NULL;
    PyObject *outp = PyDict_GetItemWithError(self->table, dst); /* borrowed */
    Py_DECREF(dst);
    if (!outp) {
        if (PyErr_Occurred())
            return NULL;
        counts[C_UNKNOWN_ULA]++;
        return PyTuple_New(0);
    }
    long o = PyLong_AsLong(outp);
    if (o == -1 && PyErr_Occurred())
        return NULL;
    if (fabric && o == in_no) {
        counts[C_ROUTE_BACK]++; /* two switches disagree for a moment */
        return PyTuple_New(0);
    }
    PyObject *op = port_of(self, outp);
    if (!op)
        return NULL;
    int up = port_up(op);
    if (up < 0)
        return NULL;
    if (!up) {
        counts[C_OUTPUT_DOWN]++;
        return PyTuple_New(0);
    }
    return PyTuple_Pack(1, outp);
}

static inline uint64_t ctrl_at(const unsigned char *rec)
{
    uint64_t c;
    memcpy(&c, rec + MP_DATA_BYTES, 8); /* big-endian on the wire */
    return __builtin_bswap64(c);
}

#define TYPE_OF(c) ((int)((c) >> 58 & 0xF))
#define TAIL_OF(c) ((int)((c) >> 57 & 1))

static PyObject *seg_tuple(Py_ssize_t start, Py_ssize_t end, PyObject *targets, int tail)
{
    return Py_BuildValue("nnON", start, end, targets, PyBool_FromLong(tail));
}

/* The walk (SwitchFwdApi.walk, _switchfwdapi.h): buf's n micropackets from *pos until the
 * end or an ADMIN micropacket (*pos points at it), segments to sink. */
static int fwd_walk(PyObject *fwd, PyObject *in_obj, const unsigned char *buf, Py_ssize_t n, Py_ssize_t *pos_io,
                    PyObject **current_io, int broadcast, unsigned long long tree, Py_ssize_t *counts,
                    Py_ssize_t *strays, fwd_sink sink, void *ctx)
{
    Forwarder *self = (Forwarder *)fwd;
    if (!self->ports || !self->table) {
        PyErr_SetString(PyExc_RuntimeError, "Forwarder not initialised");
        return -1;
    }
    long in_no = PyLong_AsLong(in_obj);
    if (in_no == -1 && PyErr_Occurred())
        return -1;
    PyObject *port = port_of(self, in_obj);
    if (!port)
        return -1;
    Py_ssize_t pos = *pos_io;
    int rc = -1;
    while (pos < n) {
        uint64_t c = ctrl_at(buf + pos * MP_BYTES);
        int kind = TYPE_OF(c);
        if (kind == T_ADMIN)
            break;
        if (kind == T_HEADER) {
            if (*current_io != Py_None) {
                counts[C_HEADER_INSIDE]++;
                /* the input broke a Message off: terminate it downstream */
                if (PyTuple_GET_SIZE(*current_io) && sink(ctx, pos, pos, *current_io, 1) < 0)
                    goto done;
            }
            PyObject *t = route(self, port, in_no, buf + pos * MP_BYTES, broadcast, tree, counts);
            if (!t)
                goto done;
            Py_SETREF(*current_io, t);
            counts[C_RX_MESSAGES]++;
        } else if (*current_io == Py_None) {
            counts[C_STRAY_DATA]++;
            (*strays)++;
            pos++;
            continue;
        }
        /* the segment ends after a TAIL, before the next HEADER/ADMIN, or at the end: one
           read of each control word */
        Py_ssize_t k = pos, end;
        int tail = 0;
        for (uint64_t ck = c;;) {
            if (TAIL_OF(ck)) {
                end = k + 1;
                tail = 1;
                break;
            }
            if (++k == n) {
                end = n;
                break;
            }
            ck = ctrl_at(buf + k * MP_BYTES);
            if (TYPE_OF(ck) == T_HEADER || TYPE_OF(ck) == T_ADMIN) {
                end = k;
                break;
            }
        }
        if (sink(ctx, pos, end, *current_io, tail) < 0)
            goto done;
        if (tail) {
            Py_INCREF(Py_None);
            Py_SETREF(*current_io, Py_None);
        }
        pos = end;
    }
    rc = 0;
done:
    *pos_io = pos;
    return rc;
}

/* Forwarder.ingress's sink: a (start, end, targets, tail) tuple appended to a list. */
static int list_sink(void *ctx, Py_ssize_t start, Py_ssize_t end, PyObject *targets, int tail)
{
    PyObject *s = seg_tuple(start, end, targets, tail);
    int r = s ? PyList_Append((PyObject *)ctx, s) : -1;
    Py_XDECREF(s);
    return r;
}

/* ingress(recs, vc, in_port, current, pos, broadcast, tree_ports)
 *   -> (segments, pos, current, counts, stray_mps)
 * Walks recs (n micropackets of 40 bytes) from pos until the end or an ADMIN
 * micropacket (returned pos points at it). */
static PyObject *Forwarder_ingress(Forwarder *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "ingress(recs, vc, in_port, current, pos, broadcast, tree_ports)");
        return NULL;
    }
    if (!self->ports || !self->table) {
        PyErr_SetString(PyExc_RuntimeError, "Forwarder not initialised");
        return NULL;
    }
    long vc = PyLong_AsLong(args[1]);
    if (vc == -1 && PyErr_Occurred())
        return NULL;
    if (vc < 0 || vc >= NUM_VCS) {
        PyErr_SetString(PyExc_ValueError, "vc out of range");
        return NULL;
    }
    PyObject *in_obj = args[2], *current = args[3];
    if (PyLong_AsLong(in_obj) == -1 && PyErr_Occurred()) /* the port number first, as before */
        return NULL;
    Py_ssize_t pos = PyLong_AsSsize_t(args[4]);
    if (pos == -1 && PyErr_Occurred())
        return NULL;
    int broadcast = PyObject_IsTrue(args[5]);
    if (broadcast < 0)
        return NULL;
    unsigned long long tree = PyLong_AsUnsignedLongLong(args[6]);
    if (tree == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (current != Py_None && !PyTuple_Check(current)) {
        PyErr_SetString(PyExc_TypeError, "current must be None or a tuple of ports");
        return NULL;
    }
    if (!port_of(self, in_obj))
        return NULL;

    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    PyObject *segs = NULL, *result = NULL;
    Py_ssize_t counts[N_COUNTERS] = {0}, strays = 0;
    Py_INCREF(current);
    if (view.len % MP_BYTES) {
        PyErr_SetString(PyExc_ValueError, "recs is not a whole number of 40-byte micropackets");
        goto done;
    }
    Py_ssize_t n = view.len / MP_BYTES;
    if (pos < 0 || pos > n) {
        PyErr_SetString(PyExc_ValueError, "pos out of range");
        goto done;
    }
    if (!(segs = PyList_New(0)))
        goto done;
    if (fwd_walk((PyObject *)self, in_obj, view.buf, n, &pos, &current, broadcast, tree, counts, &strays, list_sink,
                 segs) < 0)
        goto done;
    PyObject *ct = PyTuple_New(N_COUNTERS);
    if (!ct)
        goto done;
    for (int i = 0; i < N_COUNTERS; i++) {
        PyObject *v = PyLong_FromSsize_t(counts[i]);
        if (!v) {
            Py_DECREF(ct);
            goto done;
        }
        PyTuple_SET_ITEM(ct, i, v);
    }
    result = Py_BuildValue("OnONn", segs, pos, current, ct, strays);
done:
    Py_XDECREF(segs);
    Py_DECREF(current);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef Forwarder_methods[] = {
    {"ingress", (PyCFunction)(void (*)(void))Forwarder_ingress, METH_FASTCALL,
     "ingress(recs, vc, in_port, current, pos, broadcast, tree_ports) -> (segments, pos, current, counts, "
     "stray_mps)"},
    {NULL},
};

static PyTypeObject ForwarderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "daemons._switchfwd.Forwarder",
    .tp_basicsize = sizeof(Forwarder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Forwarder(ports, table): gsn-switch's ingress walk over one batch of one input VC",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Forwarder_init,
    .tp_dealloc = (destructor)Forwarder_dealloc,
    .tp_traverse = (traverseproc)Forwarder_traverse,
    .tp_clear = (inquiry)Forwarder_clear,
    .tp_methods = Forwarder_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "daemons._switchfwd",
    "gsn-switch's forwarding walk compiled (daemons.switch.forward.PyForwarder is its oracle).", -1, NULL,
};

PyMODINIT_FUNC PyInit__switchfwd(void)
{
    if (PyType_Ready(&ForwarderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    PyObject *names = PyTuple_New(N_COUNTERS);
    if (!names)
        goto fail;
    for (int i = 0; i < N_COUNTERS; i++) {
        PyObject *s = PyUnicode_FromString(counter_names[i]);
        if (!s) {
            Py_DECREF(names);
            goto fail;
        }
        PyTuple_SET_ITEM(names, i, s);
    }
    if (PyModule_AddObject(m, "COUNTERS", names) < 0) {
        Py_DECREF(names);
        goto fail;
    }
    Py_INCREF(&ForwarderType);
    if (PyModule_AddObject(m, "Forwarder", (PyObject *)&ForwarderType) < 0) {
        Py_DECREF(&ForwarderType);
        goto fail;
    }
    static SwitchFwdApi api = {&ForwarderType, N_COUNTERS, fwd_walk};
    PyObject *cap = PyCapsule_New(&api, SWITCHFWD_CAPSULE, NULL);
    if (!cap || PyModule_AddObject(m, "_walk_api", cap) < 0) {
        Py_XDECREF(cap);
        goto fail;
    }
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
