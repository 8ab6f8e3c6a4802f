/* The compiled ingress walk's C interface (issue 11): daemons._switchfwd exports it as
 * the capsule SWITCHFWD_CAPSULE, and gsn-switch's SwitchPlane (_switchloop.h) calls it
 * per received batch directly, without building and parsing Python segment tuples.
 * Forwarder.ingress (the Python method the differential tests hold against
 * daemons/switch/forward.py) is the same walk with a sink that makes the tuples.
 */
#ifndef GSN_SWITCHFWDAPI_H
#define GSN_SWITCHFWDAPI_H

#include <Python.h>

#define SWITCHFWD_CAPSULE "daemons._switchfwd._walk_api"

/* One segment of the walk, as Forwarder.ingress returns them: micropackets
 * [start, end) to the ports in targets (a tuple of port numbers, borrowed), TAIL seen;
 * start == end: close the open Message with TAIL + ERROR.  -1 (exception set) stops it. */
typedef int (*fwd_sink)(void *ctx, Py_ssize_t start, Py_ssize_t end, PyObject *targets, int tail);

typedef struct {
    PyTypeObject *type; /* daemons._switchfwd.Forwarder: fwd below must be one */
    int n_counters;     /* length of counts (daemons._switchfwd.COUNTERS) */
    /* Forwarder.ingress on n micropackets at buf from *pos (advanced to the end or to an
     * ADMIN micropacket); *current: a reference in and out (None or a tuple); counts and
     * *strays are added to.  0, or -1 with an exception (*current still a reference). */
    int (*walk)(PyObject *fwd, PyObject *in_port, const unsigned char *buf, Py_ssize_t n, Py_ssize_t *pos,
                PyObject **current, int broadcast, unsigned long long tree, Py_ssize_t *counts, Py_ssize_t *strays,
                fwd_sink sink, void *ctx);
} SwitchFwdApi;

#endif
