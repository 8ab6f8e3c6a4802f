/* gsnd's compiled data plane (DESIGN §4, README "Data plane"): the state a CLink
 * holds once dp_attach() hands it the TAP and the cable socket.  The functions are in
 * _pump.h; this header holds the state and the counters (the names the Python path
 * counts under, by group: ip, gsnd, tap, cable).  Included by _link.c only.
 */
#ifndef GSN_DATAPLANE_H
#define GSN_DATAPLANE_H

#include <netinet/in.h>

#include "_ulpreg.h"

#define DP_VC 1               /* RFC 2835 §4.1: IP rides on VC1 (constants.VC_IP) */
#define DP_FRAME_BYTES 65600  /* a TAP read (io/tap.py READ_BYTES) */
#define DP_RECV_BYTES 65536   /* one (GRO-coalesced) UDP receive (io/udp.py RECV_BYTES) */
#define DP_ALIASES 8          /* ULAs besides the port's own that a Message may be sent to */
#define DP_ERRNOS 160         /* errno counters kept per errno below this (others: the last slot) */
#define DP_GSO_SEGMENTS 64    /* io/udp.py GSO_MAX_SEGMENTS */
#define DP_GSO_BYTES 65507    /* io/udp.py GSO_MAX_BYTES */

#define DP_COUNTERS(X)                                                                               \
    X(IP_TX_FRAMES, "ip", "tx_frames") X(IP_RUNT, "ip", "tx_drop_runt_frame")                         \
    X(IP_NOT_IP, "ip", "tx_drop_not_ip_or_arp") X(IP_OVER_MTU, "ip", "tx_drop_over_mtu")              \
    X(IP_UNKNOWN_ULA, "ip", "tx_drop_unknown_ula") X(IP_ARP_OFF, "ip", "tx_drop_arp_off")             \
    X(IP_TX_LINK, "ip", "tx_drop_link") X(IP_RX_FRAMES, "ip", "rx_frames")                            \
    X(IP_OWN_BCAST, "ip", "rx_own_broadcast_not_to_tap") X(IP_RX_ARP, "ip", "rx_arp_not_to_tap")      \
    X(EP_TX_MESSAGES, "gsnd", "tx_messages") X(EP_RX_MESSAGES, "gsnd", "rx_messages")                 \
    X(EP_TX_BYTES, "gsnd", "tx_bytes") X(EP_RX_BYTES, "gsnd", "rx_bytes")                             \
    X(EP_NOT_FOR_US, "gsnd", "rx_drop_not_for_us") X(EP_LINK_DOWN, "gsnd", "tx_drop_link_down")       \
    X(EP_NO_ULA, "gsnd", "tx_drop_no_ula") X(TAP_FULL, "tap", "tx_dropped_tap_full")                  \
    X(RX_DATAGRAMS, "cable", "rx_datagrams") X(RX_FOREIGN, "cable", "rx_foreign_datagram")            \
    X(RX_GRO, "cable", "rx_gro_coalesced") X(RX_TRUNC, "cable", "rx_truncated")                      \
    X(TAP_GSO, "tap", "read_drop_gso") X(TAP_BAD_CSUM, "tap", "read_drop_bad_csum_offsets")

#define DP_ENUM(id, group, name) DP_##id,
#define DP_GROUP(id, group, name) group,
#define DP_NAME(id, group, name) name,
enum { DP_COUNTERS(DP_ENUM) DP_N };
static const char *dp_groups[DP_N] = {DP_COUNTERS(DP_GROUP)};
static const char *dp_names[DP_N] = {DP_COUNTERS(DP_NAME)};

/* Counters per errno: (group, name prefix) */
enum { DPE_TAP_READ, DPE_TAP_WRITE, DPE_RX, DPE_N };
static const char *dpe_groups[DPE_N] = {"tap", "tap", "cable"};
static const char *dpe_prefix[DPE_N] = {"read_", "tx_error_", "rx_error_"};

typedef struct {
    Reasm ra;                 /* every VC's reassembly (Python's Reassembler is the oracle) */
    int tap_fd, sock_fd;      /* -1: no TAP (IP Messages go up to Python) */
    int arp_on;
    int vnet;                 /* the TAP's frames carry a virtio_net_hdr (_vnet.h) */
    Py_ssize_t mtu;           /* largest IP packet taken from the TAP */
    int has_ula;
    uint8_t ula[6];
    uint8_t aliases[DP_ALIASES][6];
    int naliases;
    unsigned ulp_wants;       /* bit 0 IPv4, 1 IPv6, 2 ARP: a ULP client is bound to it (Python delivers) */
    int hold[RA_VCS];         /* a VC's credits withheld (ULP backlog, Endpoint.hold) */
    int64_t withheld[RA_VCS];
    UlpReg ulp;               /* the ULP clients C writes RECV frames to (_ulploop.h) */
    struct sockaddr_storage peer;
    socklen_t peer_len;
    PyObject *auth;           /* a keyed cable: its CableAuthCore (_cableauth.h), else NULL */
    uint64_t counters[DP_N];
    uint64_t rx_vc[2][RA_VCS]; /* per VC: Messages and payload bytes delivered from C (TAP, ULP clients) */
    uint64_t tx_vc[2][RA_VCS]; /* per VC: Messages and payload bytes queued from C (TAP, ULP clients) */
    uint64_t errnos[DPE_N][DP_ERRNOS];
    uint8_t *rbuf;            /* the buffer the next TAP frame is read into (_txfast.h) */
    uint8_t rx[DP_RECV_BYTES];
    uint8_t gather[MAX_DGRAM_MPS * MP_BYTES];
    uint16_t b0[MAX_DGRAM_MPS];        /* per micropacket of the datagram: its data's zero-init CRC */
    uint16_t gather_b0[MAX_DGRAM_MPS]; /* the same for gather */
} DataPlane;

static void tx_big_put(uint8_t *b); /* _txfast.h */

static void dp_free(DataPlane *dp)
{
    if (!dp)
        return;
    ra_free(&dp->ra);
    PyMem_Free(dp->ulp.buf);
    PyMem_Free(dp->ulp.rbuf);
    tx_big_put(dp->ulp.bbuf);
    PyMem_Free(dp->rbuf);
    Py_CLEAR(dp->auth);
    PyMem_Free(dp);
}

static inline void dp_errno(DataPlane *dp, int which, int err)
{
    dp->errnos[which][err > 0 && err < DP_ERRNOS ? err : DP_ERRNOS - 1]++;
}

/* The accepted micropackets of vc (not CREDIT), from first on, copied back to back
 * (with their b0 to gather_b0). */
static const uint8_t *dp_gather(DataPlane *dp, const uint8_t *mps, const uint16_t *b0, Py_ssize_t first, int vc,
                                Py_ssize_t acc)
{
    uint8_t *q = dp->gather;
    for (Py_ssize_t i = first, got = 0; got < acc; i++) {
        const uint8_t *m = mps + i * MP_BYTES;
        uint64_t c = load_be64(m + MP_DATA);
        if ((int)(c >> 62) == vc && ((c >> 58) & 0xF) != T_CREDIT) {
            memcpy(q + got * MP_BYTES, m, MP_BYTES);
            if (b0)
                dp->gather_b0[got] = b0[i];
            got++;
        }
    }
    return dp->gather;
}

#endif
