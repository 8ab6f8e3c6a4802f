/* A userspace stand-in for `tc netem loss L duplicate D [delay 1ms reorder R]` on one UDP
 * cable (this kernel has no sch_netem); see impair.py, which builds and runs it.
 *
 *   impair LISTEN_HOST:PORT INNER_PEER_HOST:PORT OUTER_BIND_HOST:PORT OUTER_PEER_HOST:PORT
 *          LOSS DUP REORDER SEED [FRAG_MTU]
 *
 * Datagrams from the inner peer arriving on LISTEN go out of OUTER_BIND to OUTER_PEER, and
 * the other way round; datagrams from any other source are ignored.  Each datagram is lost
 * with probability LOSS and sent twice with DUP.  With REORDER > 0, as netem's
 * `delay 1ms reorder R` does, each copy is sent at once with probability REORDER or else
 * delayed by 1 ms, so the prompt ones overtake.  With REORDER 0 nothing is delayed: a
 * loss-only or duplication-only run adds no latency, so it is measured against the same
 * path without the impairer (the delay exists only to make reordering).  With FRAG_MTU,
 * LOSS is per IP packet on an underlay of that MTU (a datagram that travels as k
 * fragments is lost with probability 1 - (1 - LOSS)^k).
 *
 * Written in C so that the impairer is not what limits a multi-Gbit/s link under test:
 * recvmmsg/sendmmsg in batches, delayed datagrams in a FIFO (the delay is constant). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64
#define MAXDG 65536
#define QCAP 16384          /* delayed datagrams held at most; beyond, dropped and counted */
#define DELAY_NS 1000000LL  /* netem's 1 ms */

static uint64_t rng_state;
static double rnd(void) { /* xorshift64*, in [0, 1) */
    rng_state ^= rng_state >> 12; rng_state ^= rng_state << 25; rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int parse_addr(const char *s, struct sockaddr_in *a) {
    char host[64];
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s || (size_t)(colon - s) >= sizeof host) return -1;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = 0;
    memset(a, 0, sizeof *a);
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)atoi(colon + 1));
    return inet_pton(AF_INET, host, &a->sin_addr) == 1 ? 0 : -1;
}

static int open_sock(const struct sockaddr_in *bind_to) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0), sz = 8 << 20;
    if (fd < 0) return -1;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    if (bind(fd, (const struct sockaddr *)bind_to, sizeof *bind_to) < 0) return -1;
    return fd;
}

struct held { int64_t due; int out; struct sockaddr_in dest; uint32_t len; unsigned char *data; };
static struct held queue[QCAP];
static size_t qhead, qlen;
static unsigned long long dropped_full;

static void send_one(int fd, const struct sockaddr_in *dest, const void *data, size_t len) {
    (void)!sendto(fd, data, len, 0, (const struct sockaddr *)dest, sizeof *dest);
}

/* prompt datagrams of one received batch (a duplicate twice), sent together by sendmmsg */
static struct mmsghdr out_msgs[2 * BATCH];
static struct iovec out_iovs[2 * BATCH];
static int out_n;

static void out_add(const struct sockaddr_in *dest, void *data, size_t len) {
    out_iovs[out_n].iov_base = data;
    out_iovs[out_n].iov_len = len;
    memset(&out_msgs[out_n].msg_hdr, 0, sizeof out_msgs[out_n].msg_hdr);
    out_msgs[out_n].msg_hdr.msg_iov = &out_iovs[out_n];
    out_msgs[out_n].msg_hdr.msg_iovlen = 1;
    out_msgs[out_n].msg_hdr.msg_name = (void *)dest;
    out_msgs[out_n].msg_hdr.msg_namelen = sizeof *dest;
    out_n++;
}

static void out_flush(int fd) {
    int done = 0;
    while (done < out_n) {
        int k = sendmmsg(fd, out_msgs + done, (unsigned)(out_n - done), 0);
        if (k <= 0) { /* a full socket buffer or a refusal: this datagram is lost, as on a wire */
            if (k < 0 && errno == EINTR) continue;
            done++;
            continue;
        }
        done += k;
    }
    out_n = 0;
}

int main(int argc, char **argv) {
    if (argc < 9) {
        fprintf(stderr, "usage: impair LISTEN INNER OUTER_BIND OUTER_PEER LOSS DUP REORDER SEED [FRAG_MTU]\n");
        return 2;
    }
    struct sockaddr_in listen_a, inner, bind_b, outer;
    if (parse_addr(argv[1], &listen_a) || parse_addr(argv[2], &inner) || parse_addr(argv[3], &bind_b)
        || parse_addr(argv[4], &outer)) {
        fprintf(stderr, "impair: bad HOST:PORT\n");
        return 2;
    }
    double loss = atof(argv[5]), dup = atof(argv[6]), reorder = atof(argv[7]);
    rng_state = (uint64_t)strtoull(argv[8], NULL, 10) * 0x9E3779B97F4A7C15ULL + 1;
    long frag_mtu = argc > 9 ? atol(argv[9]) : 0;
    int a = open_sock(&listen_a), b = open_sock(&bind_b);
    if (a < 0 || b < 0) {
        perror("impair: socket");
        return 1;
    }
    /* per socket: where its datagrams go and whom they must come from */
    int outs[2] = {b, a};
    struct sockaddr_in *dests[2] = {&outer, &inner}, *expect[2] = {&inner, &outer};
    int fds[2] = {a, b};

    static unsigned char bufs[BATCH][MAXDG];
    static struct mmsghdr msgs[BATCH];
    static struct iovec iovs[BATCH];
    static struct sockaddr_in srcs[BATCH];
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        struct pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
        struct timespec ts, *tmo = NULL;
        if (qlen) {
            int64_t left = queue[qhead].due - now_ns();
            if (left < 0) left = 0;
            ts.tv_sec = left / 1000000000LL;
            ts.tv_nsec = left % 1000000000LL;
            tmo = &ts;
        }
        if (ppoll(p, 2, tmo, NULL) < 0 && errno != EINTR) return 1;
        for (int s = 0; s < 2; s++) {
            if (!(p[s].revents & POLLIN)) continue;
            for (;;) {
                for (int i = 0; i < BATCH; i++) {
                    iovs[i].iov_base = bufs[i];
                    iovs[i].iov_len = MAXDG;
                    memset(&msgs[i].msg_hdr, 0, sizeof msgs[i].msg_hdr);
                    msgs[i].msg_hdr.msg_iov = &iovs[i];
                    msgs[i].msg_hdr.msg_iovlen = 1;
                    msgs[i].msg_hdr.msg_name = &srcs[i];
                    msgs[i].msg_hdr.msg_namelen = sizeof srcs[i];
                }
                int n = recvmmsg(fds[s], msgs, BATCH, MSG_DONTWAIT, NULL);
                if (n <= 0) break;
                int64_t t = now_ns();
                for (int i = 0; i < n; i++) {
                    size_t len = msgs[i].msg_len;
                    if (srcs[i].sin_addr.s_addr != expect[s]->sin_addr.s_addr || srcs[i].sin_port != expect[s]->sin_port)
                        continue;
                    double p_loss = loss;
                    if (frag_mtu > 28) {
                        long per = (frag_mtu - 20) & ~7L, frags = ((long)len + 8 + per - 1) / per;
                        p_loss = 1.0 - pow(1.0 - loss, (double)frags);
                    }
                    if (rnd() < p_loss) continue;
                    int copies = rnd() < dup ? 2 : 1;
                    for (int c = 0; c < copies; c++) {
                        if (reorder <= 0.0 || rnd() < reorder) {
                            out_add(dests[s], bufs[i], len);
                        } else if (qlen == QCAP) {
                            dropped_full++;
                        } else {
                            struct held *h = &queue[(qhead + qlen) % QCAP];
                            h->data = malloc(len ? len : 1);
                            if (!h->data) { dropped_full++; continue; }
                            memcpy(h->data, bufs[i], len);
                            h->len = (uint32_t)len;
                            h->due = t + DELAY_NS;
                            h->out = outs[s];
                            h->dest = *dests[s];
                            qlen++;
                        }
                    }
                }
                out_flush(outs[s]);
                if (n < BATCH) break;
            }
        }
        int64_t t = now_ns();
        while (qlen && queue[qhead].due <= t) {
            struct held *h = &queue[qhead];
            send_one(h->out, &h->dest, h->data, h->len);
            free(h->data);
            qhead = (qhead + 1) % QCAP;
            qlen--;
        }
    }
}
