/* What both ServerNet extensions need, once: the packet CRC and the UDP address of a
 * router port or a node's router (servernet/_snetfwd.c, the router; servernet/_snetnode.c,
 * an end node's engine).  Included by each .c file; every function is static. */
#ifndef SNETCOMMON_H
#define SNETCOMMON_H

#include <Python.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "_udpio.h" /* daemons/: the same-peer check the data planes share */

static uint32_t crc_table[256];

/* fill crc_table (each module's init calls it once) */
static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

/* CRC-32/IEEE 802.3, as zlib.crc32: the packet CRC [SEED-SN] */
static uint32_t crc32_ieee(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    while (n--)
        c = crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

typedef struct {
    struct sockaddr_storage sa;
    socklen_t len;
} Addr;

/* (host, port) -> sockaddr; 0, or -1 with a Python error */
static int parse_addr(PyObject *tuple, Addr *out)
{
    if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) < 2) {
        PyErr_SetString(PyExc_ValueError, "an address is a (host, port) tuple");
        return -1;
    }
    const char *host = PyUnicode_AsUTF8(PyTuple_GET_ITEM(tuple, 0));
    if (host == NULL)
        return -1;
    long port = PyLong_AsLong(PyTuple_GET_ITEM(tuple, 1));
    if (port == -1 && PyErr_Occurred())
        return -1;
    if (port < 0 || port > 65535) {
        PyErr_SetString(PyExc_ValueError, "a UDP port is 0..65535");
        return -1;
    }
    memset(out, 0, sizeof *out);
    struct sockaddr_in *v4 = (struct sockaddr_in *)&out->sa;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&out->sa;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET, v4->sin_port = htons((uint16_t)port), out->len = sizeof *v4;
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6, v6->sin6_port = htons((uint16_t)port), out->len = sizeof *v6;
    } else {
        PyErr_Format(PyExc_ValueError, "%s is not an IPv4 or IPv6 address", host);
        return -1;
    }
    return 0;
}

/* A recvmmsg batch made ready: header i takes a datagram of up to len bytes into
 * buf + i * len (a [n][len] array) and its sender's address into from[i]. */
static void rx_batch_setup(struct mmsghdr *msg, struct iovec *iov, struct sockaddr_storage *from, unsigned char *buf,
                           size_t len, int n)
{
    for (int i = 0; i < n; i++) {
        iov[i].iov_base = buf + (size_t)i * len;
        iov[i].iov_len = len;
        memset(&msg[i].msg_hdr, 0, sizeof msg[i].msg_hdr);
        msg[i].msg_hdr.msg_iov = &iov[i];
        msg[i].msg_hdr.msg_iovlen = 1;
        msg[i].msg_hdr.msg_name = &from[i];
        msg[i].msg_hdr.msg_namelen = sizeof from[i];
    }
}

/* Send header i: the len bytes at buf, to one address. */
static void tx_hdr_setup(struct mmsghdr *msg, struct iovec *iov, void *buf, size_t len, const Addr *to)
{
    iov->iov_base = buf;
    iov->iov_len = len;
    memset(&msg->msg_hdr, 0, sizeof msg->msg_hdr);
    msg->msg_hdr.msg_iov = iov;
    msg->msg_hdr.msg_iovlen = 1;
    msg->msg_hdr.msg_name = (void *)&to->sa;
    msg->msg_hdr.msg_namelen = to->len;
}

/* msg[0..n) out by sendmmsg, never blocking. A datagram the kernel refuses is lost and
 * counted (*full: the socket buffer was full; *errors: anything else, e.g. the ICMP error
 * of an earlier send while the peer is gone), and the rest still go. */
static void tx_batch_send(int fd, struct mmsghdr *msg, int n, uint64_t *full, uint64_t *errors)
{
    for (int off = 0; off < n;) {
        int sent = sendmmsg(fd, msg + off, (unsigned)(n - off), MSG_DONTWAIT);
        if (sent > 0) {
            off += sent;
            continue;
        }
        if (sent < 0 && errno == EINTR)
            continue;
        if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            (*full)++;
        else
            (*errors)++;
        off++;
    }
}

/* the sender's address is this one (address and port; IPv6 flow and scope ignored) */
static int addr_is(const Addr *want, const struct sockaddr_storage *sa)
{
    return udpio_same_peer(sa, sizeof *sa, &want->sa);
}

#endif
