"""Scheduled Transfer values (spec st.md).  [PC] = project choice."""

import enum

from daemons.wire.message import max_payload

ETHERTYPE_ST = 0x8181  # FACT [ET]
HEADER_BYTES = 40
NO_ID = 0xFFFFFFFF  # "minus one": id not yet known
SLOTS_OFF = 0xFFFF  # no slot accounting
T_LEN_UNLIMITED = (1 << 64) - 1  # [PC]


class Op(enum.IntEnum):
    RC = 0x01
    CA = 0x02
    RD = 0x03
    DA = 0x04
    DC = 0x05
    NOP = 0x10
    RMR = 0x13
    MRA = 0x14
    GET = 0x15  # Function selects GET / FETCHOP inc, dec, clear / FOC
    RTS = 0x16
    RA = 0x17
    RTR = 0x18
    CTS = 0x1A
    DATA = 0x1B
    RS = 0x1C
    RSR = 0x1D
    END = 0x1E
    END_ACK = 0x1F


class Function(enum.IntEnum):
    GET = 0
    INCREMENT = 1
    DECREMENT = 2
    CLEAR = 3
    COMPLETE = 7  # FetchOp_Complete (FOC)


class Flag(enum.IntFlag):
    SILENT = 0x0080
    INTERRUPT = 0x0040
    SEND_STATE = 0x0020
    OUT_OF_ORDER = 0x0010
    LAST = 0x0008
    REJECT = 0x0004


DC_MASK = 0x0003
FUNCTION_SHIFT, FUNCTION_MASK = 8, 0x0700
OP_SHIFT = 11
NO_SLOT_OPS = frozenset({Op.RC, Op.RS, Op.RSR})  # plus Silent DATA ([PC], as IRIX)


class Reason(enum.IntEnum):
    """Refusal codes carried in option 0x05 [PC]."""

    NO_LISTENER = 1
    NO_RESOURCES = 2
    PARAMETER = 3
    TOO_LONG = 4
    UNKNOWN_ID = 5
    OUT_OF_BOUNDS = 6
    FETCHOP_BUSY = 7
    ULP_REFUSED = 8
    DUPLICATE = 9
    OTHER = 0xFFFF


OPT_END, OPT_NOOP, OPT_ERROR_TEXT, OPT_ERROR_CODE, OPT_IP_PAIR = 0x00, 0x01, 0x04, 0x05, 0x90
MAX_OPTION_BYTES = 32

# Defaults for the daemon [PC] (log2 sizes)
BUFSIZE = 20  # 1 MiB receive buffers
MAX_STU = 20
MAX_BLOCK = 22  # 4 MiB Blocks
SLOTS = 64
SLOT_RESERVE = 2
CTS_REQ = 8
MAX_TRANSFERS = 8  # per direction per VC

# Timers, seconds [PC]
RC_RETRY, RC_TRIES = 1.0, 5
TEARDOWN_RETRY, TEARDOWN_TRIES = 5.0, 3
TX_TIMEOUT = 10.0
RX_TIMEOUT = 10.0
SLOT_WAIT = 5.0
FOC_TIMEOUT, FOC_TRIES = 0.5, 5
END_RETRY, END_TRIES = 5.0, 3

# GSN VC size limits for one ST operation (ST payload after the 40-byte header):
# the largest Message payload gsnd sends on the VC minus the ST header, so that an
# operation of this size is exactly the largest legal Message (st.md §"Size limits":
# 2,144 on VC0, 131,168 on VC1/VC2).  On VC3 the 32-bit M_len field is the cap
# (gsn-harp.md §2), 17 bytes under st.md's 4,294,967,264.
VC_MAX_ST_PAYLOAD = tuple(max_payload(vc) - HEADER_BYTES for vc in range(4))
