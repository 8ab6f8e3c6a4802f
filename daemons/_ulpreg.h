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
#define UL_OP_RECV 4

/* The Delivery's rx_messages for the Messages written from C (also rx_direct), and why a
 * Message for a registered client went up to Python after all. */
#define UL_COUNTERS(X)                                                                                \
    X(RX_MESSAGES, "rx_messages") X(RX_DIRECT, "rx_direct") X(RX_FULL, "rx_direct_full_to_python")      \
    X(RX_ERROR, "rx_direct_failed_to_python")

#define UL_ENUM(id, name) UL_##id,
#define UL_NAME(id, name) name,
enum { UL_COUNTERS(UL_ENUM) UL_N };
static const char *ul_names[UL_N] = {UL_COUNTERS(UL_NAME)};

typedef struct {
    int fd;
    int privileged; /* may send ULP_PRIVILEGED_ETHERTYPES */
    int direct;     /* C may write RECV frames: Python holds nothing for it (cleared by C on a refused write) */
    int nets;
    uint16_t ets[UL_BINDINGS];
} UlClient;

typedef struct {
    int n;
    UlClient c[UL_CLIENTS];
    uint64_t counters[UL_N];
} UlpReg;

#endif
