/* The ULP clients gsnd's data plane serves itself (README "ULP"): a small registry
 * Python keeps in step with daemons/io/ulp.py (fd, bound EtherTypes, privileged, and
 * whether C may write RECV frames to it now).  State only; the functions are in
 * _ulploop.h.  Included by _dataplane.h.
 */
#ifndef GSN_ULPREG_H
#define GSN_ULPREG_H

#define UL_CLIENTS 64  /* constants.ULP_MAX_CLIENTS */
#define UL_BINDINGS 64 /* constants.ULP_MAX_BINDINGS */

/* A ULP frame's header (daemons/wire/ulp.py, PROJECT CHOICE): op, vc, EtherType, ULA. */
#define UL_HEADER 10
#define UL_OP_SEND 3
#define UL_OP_RECV 4
#define UL_BURST 64 /* frames read from one client per wake-up (io/ulp.py BURST) */

/* (group, name): the Delivery's rx_messages for the Messages written from C (also
 * rx_direct), why a Message for a registered client went up to Python after all, the
 * server's tx_messages for the SENDs queued from C, and the frames C handed to Python. */
#define UL_COUNTERS(X)                                                                                  \
    X(RX_MESSAGES, "ulp.delivery", "rx_messages") X(RX_DIRECT, "ulp.delivery", "rx_direct")               \
    X(RX_FULL, "ulp.delivery", "rx_direct_full_to_python")                                               \
    X(RX_ERROR, "ulp.delivery", "rx_direct_failed_to_python") X(TX_MESSAGES, "ulp", "tx_messages")       \
    X(TX_DIRECT, "ulp", "tx_direct") X(FRAMES_UP, "ulp", "rx_frames_to_python")                          \
    X(PARKED, "ulp", "tx_waited_for_room")

#define UL_ENUM(id, group, name) UL_##id,
#define UL_GROUP(id, group, name) group,
#define UL_NAME(id, group, name) name,
enum { UL_COUNTERS(UL_ENUM) UL_N };
static const char *ul_groups[UL_N] = {UL_COUNTERS(UL_GROUP)};
static const char *ul_names[UL_N] = {UL_COUNTERS(UL_NAME)};

typedef struct {
    int fd;
    int privileged; /* may send ULP_PRIVILEGED_ETHERTYPES */
    int direct;     /* C may write RECV frames: Python holds nothing for it (cleared by C on a refused write) */
    int closed;     /* C saw its end (or an error): Python forgets it */
    int parked;     /* the VC whose queue its next SEND waits for (wait_room), or -1 */
    int hup;        /* it hung up: what its socket holds is read without waiting for room */
    int lone;       /* its last burst was one frame: read one per wake-up, no probe for a second (_ulploop.h) */
    int large;      /* its last frame did not fit a pool buffer: the next is read into a large one (_ulpraw.h) */
    uint64_t read_at; /* the poll (UlpReg.polls) it was last read at */
    int nets;
    uint16_t ets[UL_BINDINGS];
} UlClient;

typedef struct {
    int n;
    UlClient c[UL_CLIENTS];
    uint8_t *buf; /* one receive buffer for every client: a whole frame and one byte more */
    uint8_t *rbuf; /* a transmit pool buffer a frame is read into first (_ulpraw.h), or NULL */
    uint8_t *bbuf; /* a large-frame buffer (tx_big_get) a `large` client's frame is read into, or NULL */
    Py_ssize_t buf_len;
    uint64_t polls; /* dp_run's poll returns that read clients (ul_poll_read) */
    uint64_t counters[UL_N];
} UlpReg;

#endif
