/* A client's SEND read straight into a transmit pool buffer (_txfast.h), so that a large
 * Message is queued as a "raw" chunk, as a TAP frame is: the frame is received with its
 * payload where the Message's stream wants it (the 10-byte ULP header lands in the last
 * 10 of the stream's 24 header bytes, which are written over once the header is read),
 * and the datagram that takes its micropackets encodes them straight from there (copy,
 * block CRCs, ECRC, link fields and LCRC in one pass).  Before, each SEND was encoded
 * into a fresh malloc'd block (for 64 KiB, an 82 KB block: page faults and zeroing)
 * and copied once more into the datagram.
 *
 * A frame larger than a pool buffer spills into the registry's receive buffer and is
 * made contiguous there (one extra copy), then encoded into a malloc'd block; and the
 * client is marked `large`: its next frames are read into a large-frame buffer
 * (tx_big_get, room for the largest frame) and queued raw from there as well, until one
 * fits a pool buffer again.  A stream of large Messages (ST's 256 KiB STUs) thus pays one
 * user-space copy each, not four and the block's page faults.  Included by _ulploop.h.
 */
#ifndef GSN_ULPRAW_H
#define GSN_ULPRAW_H

#define UL_RAW_AT (RA_PREFIX - UL_HEADER) /* where a frame is read in the pool buffer */
/* Queued raw from 1024 micropackets (a payload of 32,713 bytes) up: a queued raw chunk
 * holds a whole pool buffer (64 KiB), so a smaller Message is encoded at once and the
 * buffer read into again; what a VC queue of HIGH_WATER_MPS holds in pool buffers stays
 * within 8 of them. */
#define UL_RAW_MIN 1024
#define UL_RAW_CAP ((Py_ssize_t)TX_BUF_BYTES - UL_RAW_AT)

/* One frame from c (recvmsg flags MSG_DONTWAIT | MSG_TRUNC) into the pool buffer, the
 * rest into u->buf; *f set to the frame, contiguous (its first u->buf_len bytes when it
 * spilled).  recvmsg's result (the frame's whole size), -2 when no pool buffer could be
 * had (an exception set). */
static ssize_t ul_raw_recv(UlpReg *u, UlClient *c, struct msghdr *mh, const uint8_t **f)
{
    if (c->large) { /* the whole frame (and the byte that shows truncation) into a large buffer */
        if (!u->bbuf && !(u->bbuf = tx_big_get((size_t)(UL_RAW_AT + u->buf_len)))) {
            PyErr_NoMemory();
            return -2;
        }
        struct iovec iov = {u->bbuf + UL_RAW_AT, (size_t)u->buf_len};
        mh->msg_iov = &iov, mh->msg_iovlen = 1;
        ssize_t n = recvmsg(c->fd, mh, MSG_DONTWAIT | MSG_TRUNC);
        mh->msg_iov = NULL, mh->msg_iovlen = 0;
        *f = u->bbuf + UL_RAW_AT;
        if (n >= 0 && n <= UL_RAW_CAP)
            c->large = 0;
        return n;
    }
    if (!u->rbuf && !(u->rbuf = tx_buf_get())) {
        PyErr_NoMemory();
        return -2;
    }
    struct iovec iov[2] = {{u->rbuf + UL_RAW_AT, (size_t)UL_RAW_CAP}, {u->buf, (size_t)u->buf_len}};
    mh->msg_iov = iov, mh->msg_iovlen = 2;
    ssize_t n = recvmsg(c->fd, mh, MSG_DONTWAIT | MSG_TRUNC);
    mh->msg_iov = NULL, mh->msg_iovlen = 0;
    *f = u->rbuf + UL_RAW_AT;
    if (n > UL_RAW_CAP) { /* spilled: u->buf holds the rest; make the frame's head contiguous there */
        c->large = 1;
        Py_ssize_t keep = n < u->buf_len ? n : u->buf_len;
        if (keep > UL_RAW_CAP)
            memmove(u->buf + UL_RAW_CAP, u->buf, (size_t)(keep - UL_RAW_CAP));
        memcpy(u->buf, u->rbuf + UL_RAW_AT, (size_t)(keep < UL_RAW_CAP ? keep : UL_RAW_CAP));
        *f = u->buf;
    }
    return n;
}

/* The sendable SEND f (n bytes) onto its VC's queue as a raw chunk when it is in the pool
 * buffer and large enough (1), else 0: the caller encodes it (ul_enqueue).  -1 with an
 * exception set. */
static int ul_queue_raw(Core *s, UlpReg *u, const uint8_t *f, Py_ssize_t n)
{
    Py_ssize_t plen = n - UL_HEADER;
    uint64_t m_len = RA_LLC + (uint64_t)plen;
    Py_ssize_t nmps = (Py_ssize_t)((RA_MAC + m_len + MP_DATA - 1) / MP_DATA);
    int big = u->bbuf && f == u->bbuf + UL_RAW_AT;
    if ((!big && f != u->rbuf + UL_RAW_AT) || nmps < UL_RAW_MIN)
        return 0;
    int vc = f[1];
    VcQueue *q = &s->q[vc];
    if (q_room(q) < 0)
        return -1;
    uint8_t hdr[UL_HEADER], *head = big ? u->bbuf : u->rbuf;
    memcpy(hdr, f, UL_HEADER); /* head's last 10 bytes are the ULP header: read it first */
    memcpy(head, hdr + 4, 6);  /* D_ULA */
    memcpy(head + 6, s->dp->ula, 6);
    put_be32(head + 12, (uint32_t)m_len);
    memcpy(head + RA_MAC, ra_llc_snap, 6);
    head[22] = hdr[2], head[23] = hdr[3]; /* EtherType */
    Chunk *ch = &q->c[q->end++];
    memset(ch, 0, sizeof *ch);
    ch->view.buf = head, ch->view.len = RA_PREFIX + plen, ch->raw = big ? 2 : 1, ch->ecrc = CRC_INIT;
    ch->obj = NULL, ch->n = nmps;
    q->count += nmps;
    if (big) /* the chunk owns it (back to its pool when taken) */
        u->bbuf = NULL;
    else
        u->rbuf = NULL;
    return 1;
}

#endif
