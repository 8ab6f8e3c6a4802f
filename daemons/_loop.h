/* gsnd's data-plane loop (README "Data plane"): one C call that stays in C while only
 * the data plane has work.
 *
 * dp_run(now, deadline, trio_fd, high, gso) polls the cable socket, the TAP (while DP_VC
 * holds at most `high` micropackets), the ULP clients C serves (_ulploop.h) and trio's
 * own epoll descriptor, with the GIL
 * released while it waits.  Ready descriptors are pumped with the batch functions of
 * _pump.h, the link's datagrams (data, acks, credits, keepalives) are sent from here,
 * and the link's ack/credit/keepalive times are waited for here.  It goes back to
 * Python when Python has work:
 *   LOOP_EVENTS    the link queued events (a Message for Python, ADMIN, link up/down)
 *   LOOP_CONTROL   trio's epoll descriptor is readable (a control or ULP socket, a
 *                  signal, a thread's wake-up) or a signal interrupted the wait
 *   LOOP_TIMER     the link's retransmission or dead timer is due (handle_timer)
 *   LOOP_SEND      the kernel refused a datagram: the rest goes to the Python path
 *                  (EMSGSIZE re-cut, no-GSO learning, counting)
 *   LOOP_DEADLINE  `deadline` passed (the caller's time slice or its own timers)
 *   LOOP_IDLE      the same, and no datagram or frame moved during the call: the
 *                  caller waits in trio (no wake-ups while idle)
 * Times are trio's (`now` is trio.current_time() at the call); the loop advances them
 * with CLOCK_MONOTONIC, the clock trio's SystemClock reads.  Included by _pump.h.
 */
#ifndef GSN_LOOP_H
#define GSN_LOOP_H

#include <math.h>
#include <poll.h>
#include <signal.h>
#include <time.h>

#define LOOP_DATAGRAMS 64 /* datagrams per receive batch (dataplane.PUMP_DATAGRAMS) */
#define LOOP_FRAMES 64    /* frames per TAP batch (dataplane.PUMP_FRAMES) */
#define LOOP_TAP_RETRY_S 0.002 /* a TAP that was ready but gave no frame is polled again after (project choice) */

enum { LOOP_IDLE, LOOP_DEADLINE, LOOP_EVENTS, LOOP_CONTROL, LOOP_TIMER, LOOP_SEND };

static double loop_clock(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* When Core_datagrams() has something to send without new input: an ack, credits, a
 * keepalive, a RESET. */
static double loop_flush_due(Core *s)
{
    if (s->state == ST_RESETTING)
        return s->reset_due;
    double t = s->last_sent + s->t_keepalive;
    if (s->ack_due < t)
        t = s->ack_due;
    if (s->credit_due < t)
        t = s->credit_due;
    return t;
}

/* When handle_timer() (Python) must run: retransmission or silence. */
static double loop_python_due(Core *s)
{
    if (s->state == ST_RESETTING)
        return INFINITY;
    double t = s->last_heard + s->t_dead;
    return s->rtx_deadline < t ? s->rtx_deadline : t;
}

/* The link's datagrams now, sent; what the kernel refused is left in *left. */
static int loop_flush(Core *s, double now, int gso, DpSent *r, PyObject **left)
{
    PyObject *t = PyFloat_FromDouble(now);
    if (!t)
        return -1;
    PyObject *list = Core_datagrams(s, t);
    Py_DECREF(t);
    if (!list)
        return -1;
    Py_ssize_t n = PyList_GET_SIZE(list), before = r->sent;
    if (n) {
        dp_send_list(s->dp, list, gso, r);
        if (r->sent - before < n && !(*left = PyList_GetSlice(list, r->sent - before, n))) {
            Py_DECREF(list);
            return -1;
        }
    }
    Py_DECREF(list);
    return 0;
}

static PyObject *Core_dp_run(Core *s, PyObject *args)
{
    double now0, deadline;
    int trio_fd, gso;
    Py_ssize_t high;
    NEED_DP(s);
    if (!PyArg_ParseTuple(args, "ddinp:dp_run", &now0, &deadline, &trio_fd, &high, &gso))
        return NULL;
    DataPlane *dp = s->dp;
    VcQueue *q = &s->q[DP_VC];
    const double t0 = loop_clock();
    double now = now0;
    Py_ssize_t got = 0, frames = 0;
    DpSent r = {0};
    PyObject *left = NULL;
    int reason, tap_ok = 1; /* tap_ok: cleared when the TAP is ready but gives no frame (EIO while down) */
    double tap_retry = INFINITY; /* ... until then: a long idle call must not leave the TAP unread */
    struct pollfd fds[3 + UL_CLIENTS] = {{dp->sock_fd, POLLIN, 0}, {-1, POLLIN, 0}, {trio_fd, POLLIN, 0}};
    Py_ssize_t ulp = 0; /* frames read from ULP clients (_ulploop.h) */
    uint64_t polls = 0, rx_at = 0; /* ppoll returns; the one the cable was last read at */
    int rx_lone = 0;               /* the cable's last read was one datagram: read one, no probe */
    /* what Python queued or freed since the last call (a ULP SEND, credits a delivery
     * returned) leaves now, not at the first wake-up: an idle call may wait until trio's
     * next deadline */
    if (loop_flush(s, now, gso, &r, &left) < 0)
        goto error;
    reason = LOOP_SEND; /* if the kernel refused some of it */
    while (!left) {
        double py_due = loop_python_due(s), wake = loop_flush_due(s);
        if (deadline < wake)
            wake = deadline;
        if (py_due < wake)
            wake = py_due;
        if (tap_retry < wake)
            wake = tap_retry;
        double wait = wake - now;
        if (wait < 0)
            wait = 0;
        struct timespec ts = {(time_t)wait, (long)((wait - floor(wait)) * 1e9)};
        fds[1].fd = tap_ok && q->count <= high ? dp->tap_fd : -1;
        int nfds = 3 + ul_poll_fill(s, fds + 3, high), rc;
        Py_BEGIN_ALLOW_THREADS rc = ppoll(fds, (nfds_t)nfds, &ts, NULL);
        Py_END_ALLOW_THREADS
        now = now0 + (loop_clock() - t0);
        polls++;
        if (now >= tap_retry)
            tap_ok = 1, tap_retry = INFINITY;
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
        if (fds[2].fd >= 0 && fds[2].revents) {
            reason = LOOP_CONTROL;
            break;
        }
        if (fds[0].revents) { /* one datagram a time while they come one by one: no EAGAIN recvmsg (_ulploop.h ul_read) */
            if (rx_lone && rx_at + 1 == polls)
                rx_lone = 0;
            rx_at = polls;
            Py_ssize_t limit = rx_lone ? 1 : LOOP_DATAGRAMS, n = dp_rx_read(s, now, limit);
            if (n < 0)
                goto error;
            if (n < limit)
                rx_lone = n == 1;
            got += n;
        }
        if (fds[1].fd >= 0 && fds[1].revents) {
            Py_ssize_t n = dp_tap_read(s, LOOP_FRAMES, high);
            if (n < 0)
                goto error;
            frames += n;
            if (!(tap_ok = n > 0))
                tap_retry = now + LOOP_TAP_RETRY_S;
        }
        if (nfds > 3) {
            Py_ssize_t n = ul_poll_read(s, fds + 3, nfds - 3, high);
            if (n < 0)
                goto error;
            ulp += n;
        }
        if (loop_flush(s, now, gso, &r, &left) < 0)
            goto error;
        if (left) {
            reason = LOOP_SEND;
            break;
        }
        if (PyList_GET_SIZE(s->events)) {
            reason = LOOP_EVENTS;
            break;
        }
        if (now >= loop_python_due(s)) {
            reason = LOOP_TIMER;
            break;
        }
        if (now >= deadline) {
            reason = got || frames || ulp ? LOOP_DEADLINE : LOOP_IDLE;
            break;
        }
    }
    if (!left) {
        left = Py_None;
        Py_INCREF(left);
    }
    return Py_BuildValue("innnnnnN", reason, got, frames, r.sent, r.sends, r.segs, r.biggest, left);
error:
    Py_XDECREF(left);
    return NULL;
}

#define LOOP_METHODS                                                                                         \
    {"dp_run", (PyCFunction)Core_dp_run, METH_VARARGS,                                                       \
     "dp_run(now, deadline, trio_fd, high, gso) -> (reason, datagrams, frames, sent, gso_sends, "            \
     "gso_datagrams, max_sent, refused or None): the data plane until Python has work (daemons/_loop.h)"},

#endif
