/* gsn-switch's data-plane loop (README "Switch forwarding"): SwitchPlane.run, one C call
 * that stays in C while only the data path has work, as dp_run (_loop.h) does for gsnd.
 *
 * run(now, deadline, trio_fd) polls every cabled port's socket and trio's own epoll
 * descriptor with the GIL released.  A ready cable is received, its link run, the
 * micropackets it accepts walked and pumped (sw_rx_port + sw_pump, as rx() does); after
 * each batch every port's datagrams are built and sent (as flush() does), and the links'
 * ack, credit and keepalive times are waited for here.  It goes back to Python when
 * Python has work (the reasons are _loop.h's LOOP_*):
 *   LOOP_EVENTS    the switch's Python ran during the batch (a link's events: up, down,
 *                  a Received batch; an ADMIN micropacket): the agent and the logs follow
 *   LOOP_CONTROL   trio's epoll descriptor is readable (control socket, signal) or a
 *                  signal interrupted the wait
 *   LOOP_TIMER     a link's retransmission or dead timer is due (handle_timer)
 *   LOOP_SEND      the kernel refused a datagram: the rest goes to the Python path
 *   LOOP_DEADLINE  `deadline` passed (the caller's slice, the fabric agent's timer)
 *   LOOP_IDLE      the same, and no datagram arrived during the call
 * Returns (reason, {port: datagrams received}, {port: [datagrams refused]}).
 * Times are trio's; the loop advances `now` with CLOCK_MONOTONIC (loop_clock).
 * Included by _switchloop.h before its method table (after _loop.h, via _pump.h).
 */
#ifndef GSN_SWITCHRUN_H
#define GSN_SWITCHRUN_H

#include <malloc.h>

/* PROJECT CHOICE: the switch's heap is kept, not given back after every burst.  Each
 * datagram built (64 KB) and each forwarded segment is a malloc'd block; with glibc's
 * defaults the top of the heap was trimmed and grown again many times a second, and
 * the kernel's page faults and page clearing were ~10% of the switch's CPU (perf during
 * bench/ip_over_gsn.py (b)).  Set once, by the first run(): only gsn-switch calls it. */
#define SW_HEAP_TRIM_BYTES (64 << 20) /* free memory kept at the top of the heap */
#define SW_HEAP_MMAP_BYTES (4 << 20)  /* blocks below this come from the heap, not mmap */

/* Every cabled port's datagrams due now, sent; refusals into *refused (a dict, made on
 * the first).  Returns -1 on error. */
static int swrun_flush(SwitchPlane *pl, PyObject *nowo, PyObject **refused)
{
    for (int k = 0; k < pl->n; k++) {
        if (pl->fd[k] < 0)
            continue;
        PyObject *list = Core_datagrams(pl->links[k], nowo);
        if (!list)
            return -1;
        Py_ssize_t n = PyList_GET_SIZE(list), left = n ? sw_send(pl, k, list) : 0;
        if (left > 0) {
            PyObject *rest = PyList_GetSlice(list, n - left, n);
            if (!rest || (!*refused && !(*refused = PyDict_New()))
                || PyDict_SetItem(*refused, pl->numbers[k], rest) < 0) {
                Py_XDECREF(rest);
                Py_DECREF(list);
                return -1;
            }
            Py_DECREF(rest);
        }
        Py_DECREF(list);
        if (left < 0)
            return -1;
    }
    return 0;
}

static PyObject *Plane_run(SwitchPlane *pl, PyObject *args)
{
    double now0, deadline;
    int trio_fd;
    PLANE_READY(pl);
    if (!PyArg_ParseTuple(args, "ddi:run", &now0, &deadline, &trio_fd))
        return NULL;
    static int heap_kept;
    if (!heap_kept) {
        heap_kept = 1;
        mallopt(M_TRIM_THRESHOLD, SW_HEAP_TRIM_BYTES);
        mallopt(M_MMAP_THRESHOLD, SW_HEAP_MMAP_BYTES);
    }
    struct pollfd fds[SW_MAX_PORTS + 1];
    int port_of[SW_MAX_PORTS + 1], nf = 0;
    for (int k = 0; k < pl->n; k++)
        if (pl->fd[k] >= 0) {
            port_of[nf] = k;
            fds[nf++] = (struct pollfd){pl->fd[k], POLLIN, 0};
        }
    fds[nf] = (struct pollfd){trio_fd, POLLIN, 0};
    Py_ssize_t got[SW_MAX_PORTS] = {0}, total = 0;
    PyObject *refused = NULL, *received = NULL;
    const double t0 = loop_clock();
    const int64_t calls0 = pl->py_calls;
    double now = now0;
    int reason, stuck = 0; /* stuck: a flush left a link's flush time in the past (its window is full) */
    for (;;) {
        double wake = deadline;
        for (int i = 0; i < nf; i++) {
            Core *c = pl->links[port_of[i]];
            double f = stuck ? INFINITY : loop_flush_due(c), p = loop_python_due(c);
            if (f < wake)
                wake = f;
            if (p < wake)
                wake = p;
        }
        double wait = wake - now;
        if (wait < 0)
            wait = 0;
        struct timespec ts = {(time_t)wait, (long)((wait - floor(wait)) * 1e9)};
        int rc;
        Py_BEGIN_ALLOW_THREADS rc = ppoll(fds, (nfds_t)nf + 1, &ts, NULL);
        Py_END_ALLOW_THREADS
        now = now0 + (loop_clock() - t0);
        if (rc < 0) {
            if (errno != EINTR) {
                PyErr_SetFromErrno(PyExc_OSError);
                goto error;
            }
            if (PyErr_CheckSignals() < 0)
                goto error;
            reason = LOOP_CONTROL;
            break;
        }
        if (fds[nf].fd >= 0 && fds[nf].revents) {
            reason = LOOP_CONTROL;
            break;
        }
        for (int i = 0; i < nf; i++) {
            if (!fds[i].revents)
                continue;
            int k = port_of[i];
            Py_ssize_t n = sw_rx_port(pl, k, now, LOOP_DATAGRAMS);
            if (n < 0 || (n && sw_pump(pl) < 0))
                goto error;
            got[k] += n, total += n;
        }
        PyObject *nowo = PyFloat_FromDouble(now);
        int fr = nowo ? swrun_flush(pl, nowo, &refused) : -1;
        Py_XDECREF(nowo);
        if (fr < 0)
            goto error;
        stuck = 0; /* credits owed with the window full wait for an ack (a datagram), not spin */
        for (int i = 0; i < nf && !stuck; i++)
            stuck = loop_flush_due(pl->links[port_of[i]]) <= now;
        if (refused) {
            reason = LOOP_SEND;
            break;
        }
        if (pl->py_calls != calls0) {
            reason = LOOP_EVENTS;
            break;
        }
        int timer = 0;
        for (int i = 0; i < nf && !timer; i++)
            timer = now >= loop_python_due(pl->links[port_of[i]]);
        if (timer) {
            reason = LOOP_TIMER;
            break;
        }
        if (now >= deadline) {
            reason = total ? LOOP_DEADLINE : LOOP_IDLE;
            break;
        }
    }
    if (!(received = PyDict_New()))
        goto error;
    for (int k = 0; k < pl->n; k++) {
        if (!got[k])
            continue;
        PyObject *g = PyLong_FromSsize_t(got[k]);
        if (!g || PyDict_SetItem(received, pl->numbers[k], g) < 0) {
            Py_XDECREF(g);
            goto error;
        }
        Py_DECREF(g);
    }
    if (!refused && !(refused = PyDict_New()))
        goto error;
    return Py_BuildValue("iNN", reason, received, refused);
error:
    Py_XDECREF(received);
    Py_XDECREF(refused);
    return NULL;
}

#define SWITCHRUN_METHODS                                                                                    \
    {"run", (PyCFunction)Plane_run, METH_VARARGS,                                                            \
     "run(now, deadline, trio_fd) -> (reason, {port: datagrams received}, {port: datagrams refused}): "      \
     "the data path until Python has work (daemons/_switchrun.h)"},

#endif
