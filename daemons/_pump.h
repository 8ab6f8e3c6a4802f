/* gsnd's compiled data plane, the functions (state and counters: _dataplane.h).
 *
 * A "pump": one C call per batch from gsnd's trio loop, no Python per frame.
 *   tap_pump:  read(TAP) -> RFC 2835 frame->Message (oracle: wire/ether.py) -> fused
 *              encode -> DP_VC's queue (a PyMem block per frame, no Python object)
 *   rx_pump:   recvmsg (UDP GRO) -> the link's receive -> DP_VC's micropackets are
 *              reassembled here (_reasm.h) -> Message->frame in place -> write(TAP)
 *   dp_send:   the link's datagrams -> sendmsg with UDP_SEGMENT (GSO) / sendto; stops at
 *              the first error and says where, for the Python path (EMSGSIZE re-cut,
 *              counting) to take over
 * Every VC is reassembled here; a Message with one ULP client bound to its EtherType is
 * written to that client (_ulploop.h).  Everything else goes up as events: other
 * Messages (Delivered), ADMIN (AdminIn), link up/down.  Included by _link.c after Core's functions.
 */
#ifndef GSN_PUMP_H
#define GSN_PUMP_H

#include <arpa/inet.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "_udpio.h"

#define ETH_IPV4 0x0800
#define ETH_ARP 0x0806
#define ETH_IPV6 0x86DD

static PyObject *ev_delivered, *ev_admin; /* set by setup_dp() */
static const uint8_t ULA_BCAST[6] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};

static inline unsigned ip_bit(unsigned ethertype)
{
    return ethertype == ETH_IPV4 ? 1 : ethertype == ETH_IPV6 ? 2 : ethertype == ETH_ARP ? 4 : 0;
}

static int dp_for_us(DataPlane *dp, const uint8_t *d_ula)
{
    if (dp->has_ula && !memcmp(d_ula, dp->ula, 6))
        return 1;
    for (int i = 0; i < dp->naliases; i++)
        if (!memcmp(d_ula, dp->aliases[i], 6))
            return 1;
    return 0;
}

#include "_ulploop.h"
#include "_vnet.h"

/* A Message reassembled on any VC (mps > 0: stream = MAC header, LLC/SNAP, payload) or an
 * ADMIN micropacket (mps == 0: its 32 data bytes). */
static int dp_sink(void *ctx, int vc, uint8_t *data, uint64_t mps)
{
    Core *s = ctx;
    DataPlane *dp = s->dp;
    if (!mps)
        return add_event(s, PyObject_CallFunction(ev_admin, "iy#", vc, (const char *)data, (Py_ssize_t)MP_DATA));
    if (dp->ulp.n && !ul_deliver(dp, vc, data)) /* written to its ULP client */
        return 0;
    unsigned ethertype = ((unsigned)data[22] << 8) | data[23];
    unsigned bit = ip_bit(ethertype);
    if (vc != DP_VC || !bit || dp->tap_fd < 0 || (dp->ulp_wants & bit)) /* Python delivers (ULP clients, notices) */
        return add_event(s, PyObject_CallFunction(ev_delivered, "iy#K", vc, (const char *)data,
                                                  (Py_ssize_t)(mps * MP_DATA), (unsigned long long)mps));
    const uint8_t *d = data, *src = data + 6;
    if (!dp_for_us(dp, d)) {
        dp->counters[DP_EP_NOT_FOR_US]++;
        return 0;
    }
    uint64_t m_len = ((uint64_t)data[12] << 24) | ((uint64_t)data[13] << 16) | ((uint64_t)data[14] << 8) | data[15];
    dp->counters[DP_EP_RX_MESSAGES]++;
    dp->counters[DP_EP_RX_BYTES] += m_len - RA_LLC;
    dp->rx_vc[0][vc]++;
    dp->rx_vc[1][vc] += m_len - RA_LLC;
    int bcast = !memcmp(d, ULA_BCAST, 6);
    if (bcast && dp->has_ula && !memcmp(src, dp->ula, 6)) { /* the switch copies broadcasts to the sender */
        dp->counters[DP_IP_OWN_BCAST]++;
        return 0;
    }
    if (ethertype == ETH_ARP && !dp->arp_on) {
        dp->counters[DP_IP_RX_ARP]++;
        return 0;
    }
    Py_ssize_t plen = (Py_ssize_t)(m_len - RA_LLC); /* reassembly checked M_len against the stream */
    const uint8_t *pl = data + RA_PREFIX;
    uint8_t dst[6];
    memcpy(dst, d, 6);
    if (bcast) { /* GSN has no multicast: rebuild the group MAC from the IP destination */
        if (ethertype == ETH_IPV6 && plen >= 40 && pl[24] == 0xFF) {
            dst[0] = 0x33, dst[1] = 0x33;
            memcpy(dst + 2, pl + 36, 4);
        } else if (ethertype == ETH_IPV4 && plen >= 20 && pl[16] >= 224 && pl[16] <= 239) {
            dst[0] = 0x01, dst[1] = 0x00, dst[2] = 0x5E, dst[3] = pl[17] & 0x7F, dst[4] = pl[18], dst[5] = pl[19];
        }
    }
    /* the Ethernet header in place, just before the payload: dst | src | EtherType (already at 22) */
    memmove(data + 16, src, 6);
    memcpy(data + 10, dst, 6);
    uint8_t *w = data + 10; /* with a virtio_net_hdr: written over the ULAs, now moved */
    if (dp->vnet)
        vnet_to_tap(w - VNET_HDR, w, 14 + (size_t)plen), w -= VNET_HDR;
    if (write(dp->tap_fd, w, (size_t)(data + 24 + plen - w)) < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            dp->counters[DP_TAP_FULL]++;
        else
            dp_errno(dp, DPE_TAP_WRITE, errno);
        return 0;
    }
    dp->counters[DP_IP_RX_FRAMES]++;
    return 0;
}

/* n micropackets the link accepted on vc (their buffers are in use): reassemble, then
 * return the buffers to the peer unless the upper layer holds the VC. */
static int dp_take(Core *s, int vc, const uint8_t *mps, const uint16_t *b0, Py_ssize_t n, int plain)
{
    DataPlane *dp = s->dp;
    if (ra_feed(&dp->ra, vc, mps, n, b0, plain, dp_sink, s) < 0)
        return -1;
    if (dp->hold[vc]) {
        dp->withheld[vc] += n;
    } else {
        int64_t k = n < s->used[vc] ? n : s->used[vc];
        s->used[vc] -= k;
        s->pending[vc] += k;
    }
    return 0;
}

/* --- Python methods -------------------------------------------------------------- */

static PyObject *Core_dp_attach(Core *s, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"tap_fd", "sock_fd", "peer", "mtu", "arp", "aliases", "max_payload", "vnet", NULL};
    int tap_fd, sock_fd, arp_on, vnet = 0;
    const char *host;
    int port;
    Py_ssize_t mtu;
    long long max_payload;
    Py_buffer al;
    READY(s, NULL);
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ii(si)npy*L|$p:dp_attach", kwlist, &tap_fd, &sock_fd, &host, &port,
                                     &mtu, &arp_on, &al, &max_payload, &vnet))
        return NULL;
    if (s->dp || !ev_delivered) {
        PyBuffer_Release(&al);
        return PyErr_Format(PyExc_RuntimeError, s->dp ? "the data plane is attached already"
                                                      : "daemons._link.setup_dp() was not called");
    }
    if (al.len % 6 || al.len / 6 > DP_ALIASES || mtu < 0 || port < 0 || port > 65535) {
        PyBuffer_Release(&al);
        return PyErr_Format(PyExc_ValueError, "dp_attach: aliases (6-byte ULAs, at most %d), mtu, port", DP_ALIASES);
    }
    DataPlane *dp = PyMem_Calloc(1, sizeof *dp);
    if (!dp) {
        PyBuffer_Release(&al);
        return PyErr_NoMemory();
    }
    struct sockaddr_in *v4 = (struct sockaddr_in *)&dp->peer;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&dp->peer;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET, v4->sin_port = htons((uint16_t)port), dp->peer_len = sizeof *v4;
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6, v6->sin6_port = htons((uint16_t)port), dp->peer_len = sizeof *v6;
    } else {
        PyBuffer_Release(&al);
        PyMem_Free(dp);
        return PyErr_Format(PyExc_ValueError, "dp_attach: %s is not a numeric IP address", host);
    }
    ra_init(&dp->ra, max_payload);
    dp->tap_fd = tap_fd, dp->sock_fd = sock_fd, dp->arp_on = arp_on, dp->mtu = mtu, dp->vnet = vnet;
    dp->naliases = (int)(al.len / 6);
    memcpy(dp->aliases, al.buf, al.len);
    PyBuffer_Release(&al);
    s->dp = dp;
    Py_RETURN_NONE;
}

#define NEED_DP(s)                                                                   \
    READY(s, NULL);                                                                  \
    if (!(s)->dp)                                                                    \
        return PyErr_Format(PyExc_RuntimeError, "the data plane is not attached");

static PyObject *Core_dp_ula(Core *s, PyObject *arg)
{
    NEED_DP(s);
    if (arg == Py_None) {
        s->dp->has_ula = 0;
        Py_RETURN_NONE;
    }
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0)
        return NULL;
    if (b.len != 6) {
        PyBuffer_Release(&b);
        return PyErr_Format(PyExc_ValueError, "a ULA is 6 bytes");
    }
    memcpy(s->dp->ula, b.buf, 6);
    s->dp->has_ula = 1;
    PyBuffer_Release(&b);
    Py_RETURN_NONE;
}

static PyObject *Core_dp_hold(Core *s, PyObject *args)
{
    int vc, on;
    NEED_DP(s);
    if (!PyArg_ParseTuple(args, "ip:dp_hold", &vc, &on))
        return NULL;
    if (vc < 0 || vc >= RA_VCS)
        return PyErr_Format(PyExc_ValueError, "dp_hold: VC %d out of range 0..3", vc);
    s->dp->hold[vc] = on;
    int64_t w = s->dp->withheld[vc];
    s->dp->withheld[vc] = 0;
    return PyLong_FromLongLong(w);
}

static PyObject *Core_dp_wants(Core *s, PyObject *arg)
{
    NEED_DP(s);
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    s->dp->ulp_wants = (unsigned)v & 7;
    Py_RETURN_NONE;
}

/* Frames from the TAP until it is empty, `limit` frames, or DP_VC holds `high`
 * micropackets; how many were read, -1 with an exception set. */
static Py_ssize_t dp_tap_read(Core *s, Py_ssize_t limit, Py_ssize_t high)
{
    DataPlane *dp = s->dp;
    VcQueue *q = &s->q[DP_VC];
    Py_ssize_t frames = 0;
    while (frames < limit && q->count <= high) {
        if (!dp->rbuf && !(dp->rbuf = tx_buf_get())) {
            PyErr_NoMemory();
            return -1;
        }
        /* the frame at TX_HEADROOM: the Message's head is built in place over its
           Ethernet header, so the stream (head + IP packet) is contiguous (_txfast.h) */
        uint8_t *head = dp->rbuf, *f = head + TX_HEADROOM;
        ssize_t len = dp->vnet ? read(dp->tap_fd, f - VNET_HDR, DP_FRAME_BYTES + VNET_HDR)
                               : read(dp->tap_fd, f, DP_FRAME_BYTES);
        if (len < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                dp_errno(dp, DPE_TAP_READ, errno); /* EIO while the interface is down */
            break;
        }
        frames++;
        if (dp->vnet && (len = vnet_take(dp, f - VNET_HDR, len)) < 0)
            continue;
        if (len < 14) {
            dp->counters[DP_IP_RUNT]++;
            continue;
        }
        unsigned ethertype = ((unsigned)f[12] << 8) | f[13];
        if (!ip_bit(ethertype)) {
            dp->counters[DP_IP_NOT_IP]++;
            continue;
        }
        const uint8_t *pl = f + 14;
        Py_ssize_t plen = len - 14;
        if (ethertype == ETH_IPV4 && plen >= 20) {
            Py_ssize_t total = ((Py_ssize_t)pl[2] << 8) | pl[3];
            if (total >= 20 && total <= plen)
                plen = total;
        }
        if (plen > dp->mtu) {
            dp->counters[DP_IP_OVER_MTU]++;
            continue;
        }
        if (!(f[0] & 1) && !(f[0] | f[1] | f[2] | f[3] | f[4] | f[5])) {
            dp->counters[DP_IP_UNKNOWN_ULA]++;
            continue;
        }
        if (ethertype == ETH_ARP && !dp->arp_on) {
            dp->counters[DP_IP_ARP_OFF]++;
            continue;
        }
        if (s->state != ST_UP || !dp->has_ula) {
            dp->counters[s->state != ST_UP ? DP_EP_LINK_DOWN : DP_EP_NO_ULA]++;
            dp->counters[DP_IP_TX_LINK]++;
            continue;
        }
        if (q_room(q) < 0)
            return -1;
        /* broadcast and multicast: the authoritative address; f[0..5] ends before head[6] is written */
        memcpy(head, f[0] & 1 ? ULA_BCAST : f, 6);
        uint64_t m_len = RA_LLC + (uint64_t)plen;
        memcpy(head + 6, dp->ula, 6);
        put_be32(head + 12, (uint32_t)m_len);
        memcpy(head + RA_MAC, ra_llc_snap, 6);
        head[22] = (uint8_t)(ethertype >> 8), head[23] = (uint8_t)ethertype; /* where it was */
        Py_ssize_t n = (Py_ssize_t)((RA_MAC + m_len + MP_DATA - 1) / MP_DATA);
        Chunk *ch = &q->c[q->end];
        memset(ch, 0, sizeof *ch);
        if (n >= TX_RAW_MIN) { /* encoded into the datagram that takes it */
            ch->view.buf = head, ch->view.len = RA_PREFIX + plen, ch->raw = 1, ch->ecrc = CRC_INIT;
            dp->rbuf = NULL;
        } else {
            uint8_t *mps = PyMem_Malloc(n * MP_BYTES);
            if (!mps) {
                PyErr_NoMemory();
                return -1;
            }
            encode_mps(head, RA_PREFIX, pl, plen, mps, n, DP_VC, T_HEADER);
            ch->view.buf = mps, ch->view.len = n * MP_BYTES;
        }
        ch->obj = NULL, ch->n = n;
        q->end++;
        q->count += n;
        dp->counters[DP_EP_TX_MESSAGES]++;
        dp->counters[DP_EP_TX_BYTES] += (uint64_t)plen;
        dp->tx_vc[0][DP_VC]++;
        dp->tx_vc[1][DP_VC] += (uint64_t)plen;
        dp->counters[DP_IP_TX_FRAMES]++;
    }
    return frames;
}

static PyObject *Core_tap_pump(Core *s, PyObject *args)
{
    Py_ssize_t limit, high;
    NEED_DP(s);
    if (!PyArg_ParseTuple(args, "nn:tap_pump", &limit, &high))
        return NULL;
    Py_ssize_t frames = dp_tap_read(s, limit, high);
    return frames < 0 ? NULL : PyLong_FromSsize_t(frames);
}

/* Datagrams from the cable socket (GRO-coalesced ones split) into the link, up to about
 * `limit`; how many, -1 with an exception set. */
static Py_ssize_t dp_rx_read(Core *s, double now, Py_ssize_t limit)
{
    DataPlane *dp = s->dp;
    Py_ssize_t got = 0, tries = 0; /* receives tried: at most 4 * limit, not wrapped (a limit from Python) */
    const Py_ssize_t max_tries = limit <= 0 ? 0 : limit > PY_SSIZE_T_MAX / 4 ? PY_SSIZE_T_MAX : 4 * limit;
    while (got < limit && tries++ < max_tries) {
        struct sockaddr_storage from;
        socklen_t fromlen;
        int flags, gro;
        ssize_t len = udpio_recv(dp->sock_fd, dp->rx, DP_RECV_BYTES, &from, &fromlen, &flags, &gro);
        if (len < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            dp_errno(dp, DPE_RX, errno); /* ICMP errors from a previous send surface here */
            continue;
        }
        if (!udpio_same_peer(&from, fromlen, &dp->peer)) {
            dp->counters[DP_RX_FOREIGN]++;
            continue;
        }
        if (flags & MSG_TRUNC) {
            dp->counters[DP_RX_TRUNC]++;
            continue;
        }
        Py_ssize_t seg = gro;
        if (seg <= 0 || seg >= len)
            seg = len ? len : 1;
        else
            dp->counters[DP_RX_GRO]++;
        for (Py_ssize_t off = 0; off < len || !off; off += seg) { /* an empty one too: counted bad, as io/udp.py */
            Py_ssize_t k = len - off < seg ? len - off : seg;
            got++;
            if (dp->auth && (k = ca_open_dp(dp->auth, dp->rx + off, k)) < 0) /* a keyed cable: counted there */
                continue;
            dp->counters[DP_RX_DATAGRAMS]++; /* as io/udp.py: on a keyed cable, those that opened */
            if (receive_raw(s, dp->rx + off, k, NULL, now) < 0)
                return -1;
        }
    }
    return got;
}

static PyObject *Core_rx_pump(Core *s, PyObject *args)
{
    double now;
    Py_ssize_t limit;
    NEED_DP(s);
    if (!PyArg_ParseTuple(args, "dn:rx_pump", &now, &limit))
        return NULL;
    Py_ssize_t got = dp_rx_read(s, now, limit);
    return got < 0 ? NULL : PyLong_FromSsize_t(got);
}

/* What one dp_send_list() did. */
typedef struct {
    Py_ssize_t sent, sends, segs, biggest; /* datagrams sent; GSO sendmsgs and their datagrams; largest */
    int err;                               /* errno of datagrams[sent] when sent < len(datagrams) */
} DpSent;

#include "_loopseal.h"

/* Send the datagrams (a list of bytes, checked by the caller) in order, runs of equal
 * size (the last may be shorter) as one GSO sendmsg when gso; adds to *r. */
static void dp_send_list(DataPlane *dp, PyObject *list, int gso, DpSent *r)
{
    if (dp->auth) { /* a keyed cable: sealed on the way out (_loopseal.h) */
        ls_send_list(dp, list, gso, r);
        return;
    }
    Py_ssize_t n = PyList_GET_SIZE(list), i = 0;
    while (i < n) {
        struct iovec iov[DP_GSO_SEGMENTS];
        int run = udpio_run(iov, udpio_iov_list(list, i, gso, DP_GSO_SEGMENTS, iov), DP_GSO_SEGMENTS, DP_GSO_BYTES);
        Py_ssize_t size = (Py_ssize_t)iov[0].iov_len;
        if (udpio_send(dp->sock_fd, &dp->peer, dp->peer_len, iov, run) < 0) {
            r->err = errno;
            break;
        }
        if (run > 1)
            r->sends++, r->segs += run;
        if (size > r->biggest)
            r->biggest = size;
        r->sent += run;
        i += run;
    }
}

/* dp_send(datagrams, gso) -> (sent, errno, gso_sends, gso_datagrams, max_sent): sent <
 * len(datagrams) when the kernel refused datagrams[sent] with errno. */
static PyObject *Core_dp_send(Core *s, PyObject *args)
{
    PyObject *list;
    int gso;
    NEED_DP(s);
    if (!PyArg_ParseTuple(args, "O!p:dp_send", &PyList_Type, &list, &gso))
        return NULL;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(list); k++)
        if (!PyBytes_Check(PyList_GET_ITEM(list, k)))
            return PyErr_Format(PyExc_TypeError, "dp_send: datagrams must be bytes");
    DpSent r = {0};
    dp_send_list(s->dp, list, gso, &r);
    return Py_BuildValue("ninnn", r.sent, r.err, r.sends, r.segs, r.biggest);
}

/* {group: {name: count}} of the non-zero data-plane counters. */
static PyObject *Core_dp_counters(Core *s, PyObject *Py_UNUSED(ignored))
{
    NEED_DP(s);
    DataPlane *dp = s->dp;
    PyObject *out = PyDict_New();
    if (!out)
        return NULL;
    for (int i = 0; i < DP_N + DPE_N * DP_ERRNOS; i++) {
        const char *group;
        char name[64];
        uint64_t v;
        if (i < DP_N) {
            v = dp->counters[i], group = dp_groups[i];
            snprintf(name, sizeof name, "%s", dp_names[i]);
        } else {
            int w = (i - DP_N) / DP_ERRNOS, e = (i - DP_N) % DP_ERRNOS;
            v = dp->errnos[w][e], group = dpe_groups[w];
            const char *en = e < DP_ERRNOS - 1 ? strerrorname_np(e) : NULL;
            if (en)
                snprintf(name, sizeof name, "%s%s", dpe_prefix[w], en);
            else
                snprintf(name, sizeof name, "%s%d", dpe_prefix[w], e);
        }
        if (!v)
            continue;
        PyObject *g = PyDict_GetItemString(out, group); /* borrowed */
        if (!g) {
            if (!(g = PyDict_New()) || PyDict_SetItemString(out, group, g) < 0) {
                Py_XDECREF(g);
                Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(g);
        }
        PyObject *c = PyLong_FromUnsignedLongLong(v);
        if (!c || PyDict_SetItemString(g, name, c) < 0) {
            Py_XDECREF(c);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(c);
    }
    PyObject *ra = ra_counter_dict(&dp->ra);
    if (!ra || PyDict_SetItemString(out, "reassembly", ra) < 0 || ul_counters(dp, out) < 0) {
        Py_XDECREF(ra);
        Py_DECREF(out);
        return NULL;
    }
    Py_DECREF(ra);
    return out;
}

static PyObject *Core_get_dp_vc(Core *s, void *c) { return PyLong_FromLong(s->dp ? DP_VC : -1); }

#include "_loop.h"

#define PUMP_METHODS                                                                                        \
    {"dp_attach", (PyCFunction)(void (*)(void))Core_dp_attach, METH_VARARGS | METH_KEYWORDS,                  \
     "dp_attach(tap_fd, sock_fd, peer, mtu, arp, aliases, max_payload, *, vnet=False): gsnd's data plane takes VC1 "   \
     "(vnet: the TAP's frames carry a virtio_net_hdr, daemons/_vnet.h)"},        \
    {"dp_ula", (PyCFunction)Core_dp_ula, METH_O, "dp_ula(ula or None): the port's ULA"},                    \
    {"dp_hold", (PyCFunction)Core_dp_hold, METH_VARARGS, "dp_hold(vc, on) -> vc's micropackets withheld so far"}, \
    {"dp_wants", (PyCFunction)Core_dp_wants, METH_O, "dp_wants(mask): IPv4 1, IPv6 2, ARP 4 go to Python"}, \
    {"tap_pump", (PyCFunction)Core_tap_pump, METH_VARARGS, "tap_pump(limit, high) -> frames read"},         \
    {"rx_pump", (PyCFunction)Core_rx_pump, METH_VARARGS, "rx_pump(now, limit) -> datagrams received"},     \
    {"dp_send", (PyCFunction)Core_dp_send, METH_VARARGS,                                                    \
     "dp_send(datagrams, gso) -> (sent, errno, gso_sends, gso_datagrams, max_sent)"},                       \
    {"dp_counters", (PyCFunction)Core_dp_counters, METH_NOARGS, "{group: {name: count}}"},                   \
    LOOP_METHODS                                                                                            \
    ULPLOOP_METHODS

/* --- the reassembly alone, for the differential tests and the fuzz target --------- */

static int collect_sink(void *ctx, int vc, uint8_t *data, uint64_t mps)
{
    PyObject *o = mps ? Py_BuildValue("(siy#K)", "message", vc, (const char *)data, (Py_ssize_t)(mps * MP_DATA),
                                      (unsigned long long)mps)
                      : Py_BuildValue("(siy#)", "admin", vc, (const char *)data, (Py_ssize_t)MP_DATA);
    if (!o)
        return -1;
    int r = PyList_Append((PyObject *)ctx, o);
    Py_DECREF(o);
    return r;
}

static PyObject *mod_reassemble(PyObject *self, PyObject *args)
{
    long long max_payload;
    PyObject *batches;
    if (!PyArg_ParseTuple(args, "LO:reassemble", &max_payload, &batches))
        return NULL;
    PyObject *seq = PySequence_Fast(batches, "batches: a sequence of (vc, micropackets) or None (a reset)");
    if (!seq)
        return NULL;
    Reasm *r = PyMem_Malloc(sizeof *r);
    PyObject *out = PyList_New(0), *ret = NULL;
    if (!r || !out) {
        if (!r)
            PyErr_NoMemory();
        goto done;
    }
    ra_init(r, max_payload);
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *b = PySequence_Fast_GET_ITEM(seq, i);
        if (b == Py_None) {
            ra_reset(r);
            continue;
        }
        int vc;
        Py_buffer v;
        if (!PyTuple_Check(b)) {
            PyErr_Format(PyExc_TypeError, "batch %zd: (vc, micropackets) or None", i);
            goto done_r;
        }
        if (!PyArg_ParseTuple(b, "iy*", &vc, &v))
            goto done_r;
        if (vc < 0 || vc >= RA_VCS || v.len % MP_BYTES) {
            PyBuffer_Release(&v);
            PyErr_Format(PyExc_ValueError, "batch %zd: VC 0..3 and whole micropackets", i);
            goto done_r;
        }
        int rc = ra_feed(r, vc, v.buf, v.len / MP_BYTES, NULL, 0, collect_sink, out);
        PyBuffer_Release(&v);
        if (rc < 0)
            goto done_r;
    }
    PyObject *c = ra_counter_dict(r);
    if (c)
        ret = Py_BuildValue("(ON)", out, c);
done_r:
    ra_free(r);
done:
    PyMem_Free(r);
    Py_XDECREF(out);
    Py_DECREF(seq);
    return ret;
}

static PyObject *mod_setup_dp(PyObject *self, PyObject *args)
{
    PyObject *delivered, *admin;
    if (!PyArg_ParseTuple(args, "OO:setup_dp", &delivered, &admin))
        return NULL;
    Py_INCREF(delivered), Py_INCREF(admin);
    Py_XSETREF(ev_delivered, delivered);
    Py_XSETREF(ev_admin, admin);
    Py_RETURN_NONE;
}

static PyObject *mod_crc_impl(PyObject *self, PyObject *args)
{
    const char *name = NULL;
    if (!PyArg_ParseTuple(args, "|z:crc_impl", &name))
        return NULL;
    return PyUnicode_FromString(crc_use(name));
}

#define PUMP_MODULE_METHODS                                                                                  \
    {"crc_impl", mod_crc_impl, METH_VARARGS,                                                                 \
     "crc_impl(name=None) -> the block CRC in use: 'vpclmul', 'clmul' (when the CPU has them) or 'tables'"},  \
    {"reassemble", mod_reassemble, METH_VARARGS,                                                             \
     "reassemble(max_payload, batches) -> (outputs, counters): the C reassembly alone (max_payload -1: none)"}, \
    {"setup_dp", mod_setup_dp, METH_VARARGS, "setup_dp(delivered(vc, stream, mps), admin(vc, data))"},      \
    ULPLOOP_MODULE_METHODS

#endif
