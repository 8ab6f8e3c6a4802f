/* UDP socket I/O the compiled data planes share: GRO receives (a run of datagrams from
 * one source coalesced into one receive, cut back by the segment size the kernel reports)
 * and GSO sends (a run of datagrams of one size, the last may be shorter, in one
 * sendmsg with UDP_SEGMENT).  Used by gsnd's pump (_pump.h), gsn-switch's plane
 * (_switchloop.h) and ib/_ibfast.c (which finds it on its include path); each keeps its
 * own counting.  The Python oracle of both directions is daemons/io/udp.py.
 */
#ifndef GSN_UDPIO_H
#define GSN_UDPIO_H

#include <stdint.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

/* Room for the one control message of either direction (an int for GRO, a u16 for GSO). */
typedef union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
} UdpioCtl;

/* The source ``a`` (name length ``len``) is the peer ``b``: same family, address and port. */
static inline int udpio_same_peer(const struct sockaddr_storage *a, socklen_t len, const struct sockaddr_storage *b)
{
    if (len < sizeof(sa_family_t) || a->ss_family != b->ss_family)
        return 0;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
        return x->sin6_port == y->sin6_port && !memcmp(&x->sin6_addr, &y->sin6_addr, 16);
    }
    return 0;
}

/* The GRO segment size a receive's control messages carry, 0 when it was not coalesced. */
static inline int udpio_gro_size(struct msghdr *h)
{
    int v = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR(h, c))
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO && c->cmsg_len >= CMSG_LEN(sizeof(int)))
            memcpy(&v, CMSG_DATA(c), sizeof v);
    return v;
}

/* One receive into buf[0..cap): its length (-1 and errno as recvmsg), the source in *from
 * with its length in *fromlen, the message flags in *flags and the GRO segment size in
 * *seg (0: one datagram). */
static inline ssize_t udpio_recv(int fd, void *buf, size_t cap, struct sockaddr_storage *from, socklen_t *fromlen,
                                 int *flags, int *seg)
{
    UdpioCtl ctl;
    struct iovec iov = {buf, cap};
    struct msghdr mh = {.msg_name = from, .msg_namelen = sizeof *from, .msg_iov = &iov, .msg_iovlen = 1,
                        .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    ssize_t len = recvmsg(fd, &mh, MSG_DONTWAIT);
    if (len < 0)
        return len;
    *fromlen = mh.msg_namelen;
    *flags = mh.msg_flags;
    *seg = udpio_gro_size(&mh);
    return len;
}

/* Make ``h`` one GSO send of ``seg``-byte segments, its control message in ``ctl``. */
static inline void udpio_set_segment(struct msghdr *h, UdpioCtl *ctl, uint16_t seg)
{
    memset(ctl, 0, sizeof *ctl);
    h->msg_control = ctl->buf;
    h->msg_controllen = CMSG_SPACE(sizeof(uint16_t));
    struct cmsghdr *c = CMSG_FIRSTHDR(h);
    c->cmsg_level = SOL_UDP, c->cmsg_type = UDP_SEGMENT, c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
    memcpy(CMSG_DATA(c), &seg, sizeof seg);
}

/* How many of iov[0..n) one GSO send takes: datagrams of iov[0]'s size, the last may be
 * shorter, at most max_segs of them and max_bytes in all. */
static inline int udpio_run(const struct iovec *iov, int n, int max_segs, size_t max_bytes)
{
    size_t size = iov[0].iov_len, total = size;
    int j = 1;
    while (j < n && j < max_segs && iov[j].iov_len <= size && total + iov[j].iov_len <= max_bytes) {
        total += iov[j].iov_len;
        if (iov[j++].iov_len < size)
            break; /* only the last segment may be shorter */
    }
    return j;
}

#ifdef Py_PYTHON_H
/* iov[0..) over list[i..] (bytes objects, checked by the caller): as many as one GSO send
 * may take (max), one without gso.  How many. */
static inline int udpio_iov_list(PyObject *list, Py_ssize_t i, int gso, int max, struct iovec *iov)
{
    Py_ssize_t left = PyList_GET_SIZE(list) - i;
    int have = gso ? (int)(left < max ? left : max) : 1;
    for (int k = 0; k < have; k++) {
        PyObject *d = PyList_GET_ITEM(list, i + k);
        iov[k].iov_base = PyBytes_AS_STRING(d), iov[k].iov_len = (size_t)PyBytes_GET_SIZE(d);
    }
    return have;
}
#endif

/* Send iov[0..n) to ``peer`` as one message: one datagram, or (n > 1) one GSO send of
 * iov[0]'s size.  sendmsg's result. */
static inline ssize_t udpio_send(int fd, const struct sockaddr_storage *peer, socklen_t plen, struct iovec *iov, int n)
{
    UdpioCtl ctl;
    struct msghdr mh = {.msg_name = (void *)peer, .msg_namelen = plen, .msg_iov = iov, .msg_iovlen = (size_t)n};
    if (n > 1)
        udpio_set_segment(&mh, &ctl, (uint16_t)iov[0].iov_len);
    return sendmsg(fd, &mh, MSG_DONTWAIT);
}

#endif
