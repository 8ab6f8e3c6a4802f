/* Received Messages written to ULP clients from C (README "ULP"), without waking Python.
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

#define UL_ETHERTYPE_NOTICE 0x88B7 /* constants.ETHERTYPE_OUI_EXTENDED */
static const uint8_t ul_notice_protocol[5] = {0x02, 0x47, 0x53, 0x00, 0x01}; /* constants.ULP_NOTICE_PROTOCOL */

static int dp_for_us(DataPlane *dp, const uint8_t *d_ula);

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
    if (fd < 0 || ets.len % 2 || ets.len / 2 > UL_BINDINGS || (!c && u->n >= UL_CLIENTS)) {
        PyErr_Format(PyExc_ValueError, "ulp_client: fd >= 0, at most %d EtherTypes (2 bytes each), at most %d clients",
                     UL_BINDINGS, UL_CLIENTS);
        goto done;
    }
    if (!c)
        c = &u->c[u->n++];
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

/* {"ulp.delivery": {...}, "per_vc": {"rx_messages_vcN", "rx_bytes_vcN"}} into out (per_vc:
 * everything delivered from C, to the TAP too). */
static int ul_counters(DataPlane *dp, PyObject *out)
{
    PyObject *d = PyDict_New(), *pv = PyDict_New();
    if (!d || !pv)
        goto error;
    for (int i = 0; i < UL_N + 8; i++) {
        char name[32];
        uint64_t v;
        PyObject *g = d;
        if (i < UL_N) {
            v = dp->ulp.counters[i];
            snprintf(name, sizeof name, "%s", ul_names[i]);
        } else {
            int vc = (i - UL_N) / 2, bytes = (i - UL_N) % 2;
            v = dp->rx_vc[bytes][vc];
            snprintf(name, sizeof name, "%s_vc%d", bytes ? "rx_bytes" : "rx_messages", vc);
            g = pv;
        }
        if (!v)
            continue;
        PyObject *c = PyLong_FromUnsignedLongLong(v);
        if (!c || PyDict_SetItemString(g, name, c) < 0) {
            Py_XDECREF(c);
            goto error;
        }
        Py_DECREF(c);
    }
    if (PyDict_SetItemString(out, "ulp.delivery", d) < 0 || PyDict_SetItemString(out, "per_vc", pv) < 0)
        goto error;
    Py_DECREF(d);
    Py_DECREF(pv);
    return 0;
error:
    Py_XDECREF(d);
    Py_XDECREF(pv);
    return -1;
}

#define ULPLOOP_METHODS                                                                                    \
    {"ulp_client", (PyCFunction)Core_ulp_client, METH_VARARGS,                                             \
     "ulp_client(fd, ethertypes, privileged, direct): add or update a ULP client the data plane serves"},  \
    {"ulp_forget", (PyCFunction)Core_ulp_forget, METH_O, "ulp_forget(fd) -> it was registered"},

#endif
