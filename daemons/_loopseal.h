/* A keyed cable on gsnd's data plane: dp_send (and so dp_run's flushes) seals every
 * datagram it sends, in C, with the cable's CableAuthCore (_cableauth.h: the same
 * subkey, session and counter the transport's Python path seals with; the receive side
 * opens in dp_rx_read against the same replay window).
 *
 * The body is not copied: each datagram goes out as two iovecs, the link's datagram
 * and its 32-byte trailer (session, counter, tag), so a GSO run of equal bodies is a
 * run of equal sealed segments.  What the kernel refuses is handed back unsealed, as
 * the plain path does; the Python path then seals it with the next counters (the
 * counters this call spent on it are skipped: the peer's window takes gaps).
 * Included by _pump.h after DpSent.
 */
#ifndef GSN_LOOPSEAL_H
#define GSN_LOOPSEAL_H

/* tag = HMAC-SHA256(k_tx, body || ids)[:16], hashed from the two pieces in place */
static int ls_tag(EVP_MAC_CTX *ctx, const uint8_t *body, size_t len, const uint8_t ids[CA_IDS], uint8_t out[CA_TAG])
{
    uint8_t md[EVP_MAX_MD_SIZE];
    size_t mdlen = 0;
    if (!EVP_MAC_init(ctx, NULL, 0, NULL) || !EVP_MAC_update(ctx, body, len) || !EVP_MAC_update(ctx, ids, CA_IDS)
        || !EVP_MAC_final(ctx, md, &mdlen, sizeof md) || mdlen < CA_TAG)
        return -1;
    memcpy(out, md, CA_TAG);
    return 0;
}

/* dp_send_list for a keyed cable: same runs, same accounting (sizes are sealed sizes). */
static void ls_send_list(DataPlane *dp, PyObject *list, int gso, DpSent *r)
{
    CableAuthCore *a = (CableAuthCore *)dp->auth;
    Py_ssize_t n = PyList_GET_SIZE(list), i = 0;
    while (i < n) {
        Py_ssize_t size = PyBytes_GET_SIZE(PyList_GET_ITEM(list, i)) + CA_TRAILER, j = i + 1, total = size;
        if (gso)
            while (j < n && j - i < DP_GSO_SEGMENTS) {
                Py_ssize_t l = PyBytes_GET_SIZE(PyList_GET_ITEM(list, j)) + CA_TRAILER;
                if (total + l > DP_GSO_BYTES || l > size)
                    break;
                total += l;
                j++;
                if (l < size)
                    break; /* only the last segment may be shorter */
            }
        struct iovec iov[2 * DP_GSO_SEGMENTS];
        uint8_t trailer[DP_GSO_SEGMENTS][CA_TRAILER];
        for (Py_ssize_t k = i; k < j; k++) {
            PyObject *b = PyList_GET_ITEM(list, k);
            uint8_t *t = trailer[k - i];
            store_be64(t, a->session);
            store_be64(t + 8, a->counter++);
            if (ls_tag(a->tx, (const uint8_t *)PyBytes_AS_STRING(b), (size_t)PyBytes_GET_SIZE(b), t, t + CA_IDS) < 0) {
                r->err = EIO; /* libcrypto failed: nothing leaves unsealed; the Python path raises */
                return;
            }
            iov[2 * (k - i)].iov_base = PyBytes_AS_STRING(b);
            iov[2 * (k - i)].iov_len = (size_t)PyBytes_GET_SIZE(b);
            iov[2 * (k - i) + 1].iov_base = t;
            iov[2 * (k - i) + 1].iov_len = CA_TRAILER;
        }
        union {
            char buf[CMSG_SPACE(sizeof(uint16_t))];
            struct cmsghdr align;
        } cbuf;
        struct msghdr mh = {.msg_name = &dp->peer, .msg_namelen = dp->peer_len, .msg_iov = iov,
                            .msg_iovlen = (size_t)(2 * (j - i))};
        if (j - i > 1) {
            memset(&cbuf, 0, sizeof cbuf);
            mh.msg_control = cbuf.buf, mh.msg_controllen = sizeof cbuf.buf;
            struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
            c->cmsg_level = SOL_UDP, c->cmsg_type = UDP_SEGMENT, c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
            uint16_t seg = (uint16_t)size;
            memcpy(CMSG_DATA(c), &seg, sizeof seg);
        }
        if (sendmsg(dp->sock_fd, &mh, MSG_DONTWAIT) < 0) {
            r->err = errno;
            break;
        }
        if (j - i > 1)
            r->sends++, r->segs += j - i;
        if (size > r->biggest)
            r->biggest = size;
        r->sent += j - i;
        a->dp_sealed += (uint64_t)(j - i);
        i = j;
    }
}

#endif
