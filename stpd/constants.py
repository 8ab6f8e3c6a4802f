"""Scheduled Transfer values (spec st.md).  [PC] = project choice."""

import enum

from daemons.constants import MP_DATA_BYTES, VC_BUFFER_MPS
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
SLOTS = 255  # the IRIX default (st.md §3.9): 8 CTSs of 16 STUs each fit, no RS/RSR wait mid-transfer
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
# [PC] An STU fills at most half of the receiving gsnd's buffer (its link credits) on
# the data VC, rounded down to a power of two, so one Message streams in while the
# one before it is handed to stpd: 256 KiB on VC3 (16,384 micropackets of 32 bytes),
# 64 KiB on VC2.  A 1 MiB STU was twice VC3's whole buffer.
VC_CREDIT_STU = tuple(1 << ((mps * MP_DATA_BYTES // 2).bit_length() - 1) for mps in VC_BUFFER_MPS)

# [PC] Ops waiting for room in gsnd's ULP socket (stpd/ulpio.py), oldest first: references,
# not copies, and a file's STU is read only when it leaves.  The core's flow control keeps
# far fewer waiting (CTS_REQ Blocks per transfer); past this, an op is dropped and counted.
ULP_TX_QUEUE_MAX = 65536
# [PC] One drained burst of ST Messages stops after this many bytes (16 STUs of 256 KiB):
# each burst costs a pass of the event loop and a flush of the core, so a receiver that
# fell behind catches up in few of them; handling 4 MiB takes milliseconds, far inside
# gsnd's ULP_HOLD_S.
ULP_DRAIN_MAX_BYTES = 4 << 20

# --- stpd's local API socket [PC] -------------------------------------------------------------------
API_MAX_MSG = 131072  # one request/answer datagram (inline data: 64 KiB, base64 in JSON)
API_MAX_FDS = 4  # descriptors taken from one request (more are closed by the kernel)
API_MAX_BRACKETS = 4  # '{' + '[' outside strings: requests are flat objects
API_MAX_INT_DIGITS = 20  # an integer literal longer than this is refused before int() sees it
API_MAX_STR = 64  # host names, functions: short strings
INLINE_MAX = 65536  # inline data (send/recv/read/serve/put without a descriptor)
API_MAX_BYTES = (1 << 48) - 1  # largest transfer, region, offset over the API (fits off_t and T_len)
U32_ID = (1, 0xFFFFFFFE)  # VC, transfer and region ids (0 and 0xFFFFFFFF are never ids)
ULP_PORT_MAX = 0xFFFFFFFF  # a ULP port rides in the 32-bit D_id/S_id of RC/CA
GET_MAX = 0xFFFF  # GET's T_len is the 16-bit Param
API_MAX_CLIENTS = 64  # concurrent API connections; more are refused (counted)
API_FIRST_REQUEST_TIMEOUT = 10.0  # seconds a new client may stay silent
API_IDLE_TIMEOUT = 600.0  # seconds between requests (never while a request is being served)
API_ACCEPT_BACKOFF = 0.1  # seconds to pause accept() after EMFILE/ENFILE/ENOMEM
API_PROGRESS_EVERY = 0.25  # seconds between progress answers while a transfer runs
API_REPLY_TIMEOUT = 10.0  # a client that does not read its answer for this long is dropped
API_UNBOUNDED_OPS = frozenset({"accept", "connect", "send", "recv", "read", "serve"})  # may wait for the peer for long
MAX_EXPOSED_PER_VC = 16  # exposures waiting for the peer's RMR, per VC
MAX_SHARED_OBJECTS = 256  # distinct memory objects (memfd/shm) exposed at once, daemon-wide
MAX_READ_REQUESTS = 8  # the peer's RTRs waiting for a local `serve`, per VC (oldest dropped)
STP_PORT = 5001  # `stp send`/`stp recv` meet on this ULP port
STP_SERVE_PORT = 5002  # `stp serve`/`stp read` (RTR reads) meet on this one
MAX_LISTENERS = 1024  # ULP ports listened on at once (API listen/accept), daemon-wide
MAX_CONNECT_VCS = 4096  # an API connect is refused while this many VCs exist
# Local clients are isolated (issue 12): a connection (with its transfers, regions and
# exposures) and a listened port belong to the API connection that made them; only
# that client may use them.  When it hangs up, its ports are withdrawn and its
# connections orphaned: kept (the peer may still use what was exposed on them) but
# usable by nobody; the peer's close or root's `close` ends them.
# A client whose peer uid (SO_PEERCRED) is this one is an administrator: `status`
# shows it every client's objects, and it may end (`abort`, `release`, `close`)
# any connection's transfers, regions or the connection itself -- `stp abort`,
# `stp release` from another process -- but never send, receive or take them.
API_ADMIN_UID = 0
API_ADMIN_OPS = frozenset({"status", "abort", "release", "close"})
