"""Every value the spec marks PROJECT CHOICE lives here, and only here.

Values marked FACT in ``../shared/spec/gsn-harp.md`` are kept here too when
several modules need them, so that each module imports one name.  Each block
cites the spec section it comes from.
"""

from __future__ import annotations

import enum

# --- micropacket (spec §1.1, §1.2) -------------------------------------------
MP_DATA_BYTES = 32  # FACT
MP_CTRL_BYTES = 8  # FACT: 64 control bits
MP_BYTES = MP_DATA_BYTES + MP_CTRL_BYTES  # 40 on the wire: data, then ctrl

# Control-word bit positions (PROJECT CHOICE, MSB first in IRIX order).
CTRL_VC_SHIFT = 62  # 2 bits
CTRL_TYPE_SHIFT = 58  # 4 bits
CTRL_TAIL_SHIFT = 57
CTRL_ERROR_SHIFT = 56
CTRL_VCR_SHIFT = 54  # 2 bits
CTRL_CR_SHIFT = 48  # 6 bits
CTRL_RSEQ_SHIFT = 40  # 8 bits
CTRL_TSEQ_SHIFT = 32  # 8 bits
CTRL_ECRC_SHIFT = 16  # 16 bits
CTRL_LCRC_SHIFT = 0  # 16 bits
CR_MAX = 63  # 6-bit CR field
SEQ_MOD = 256  # 8-bit TSEQ/RSEQ


class MpType(enum.IntEnum):
    """Micropacket TYPE codes (names FACT [IRIX]; numbers PROJECT CHOICE)."""

    NULL = 0x0
    DATA = 0x1
    HEADER = 0x2
    ADMIN = 0x3
    CREDIT = 0x4
    RESET = 0x5
    RESET_ACK = 0x6
    INIT = 0x7
    INIT_ACK = 0x8


SEQUENCED_TYPES = frozenset({MpType.DATA, MpType.HEADER, MpType.ADMIN, MpType.CREDIT})
UPPER_TYPES = frozenset({MpType.DATA, MpType.HEADER, MpType.ADMIN})

# --- CRCs (spec §1.6, PROJECT CHOICE): CRC-16/IBM-3740 ------------------------
CRC_POLY = 0x1021
CRC_INIT = 0xFFFF
CRC_CHECK = 0x29B1  # CRC of b"123456789"

# --- virtual channels (spec §2) ---------------------------------------------
NUM_VCS = 4
VC_MAX_DATA_MPS = (68, 4100, 4100, 1 << 27)  # FACT; HEADER not counted (PC)
M_LEN_MAX = (1 << 32) - 1  # 32-bit M_len field caps VC3 (PC)
VC_IP = 1  # FACT [2835 §4.1]
VC_ADMIN_REQUEST = 1  # FACT [IRIX Table 1-3]
VC_ADMIN_RESPONSE = 2

# --- Message header (spec §3.1, FACT) ----------------------------------------
MAC_HEADER_BYTES = 16
LLC_SNAP_PREFIX = bytes((0xAA, 0xAA, 0x03, 0x00, 0x00, 0x00))
LLC_SNAP_BYTES = 8
ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_ARP = 0x0806
ETHERTYPE_IPV6 = 0x86DD
ETHERTYPE_ST = 0x8181
# EtherTypes a ULP client may BIND or SEND only when privileged (PC, issue 12): its
# peer uid (SO_PEERCRED) is 0 or gsnd's own.  Binding them would show a member of the
# socket's group every IP packet and HARP exchange; sending them would let it forge
# IP and HARP replies.  harpd (0x0806) runs as gsnd's user under systemd.
ULP_PRIVILEGED_ETHERTYPES = frozenset({ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_ARP})

# --- ULAs (spec §5) -----------------------------------------------------------
ULA_BROADCAST = bytes.fromhex("ffffffffffff")  # FACT
ULA_HARP_SERVER = bytes.fromhex("00103bffffe0")  # FACT
ULA_NONE = bytes(6)
# Switch-assigned ULAs: 02:47:53:<switch-id>:<port>:00 (PC, spec §4.4).
ULA_ASSIGN_PREFIX = bytes((0x02, 0x47, 0x53))

# --- IP over GSN (RFC 2835 §4, FACT) ----------------------------------------------
IP_MTU = 65280  # RFC 2835 §4.3: the gsnN interface's MTU

# --- Admin (spec §4.2/4.3, codes PROJECT CHOICE) ------------------------------
ADMIN_MAX_HOPS = 255  # HOP_COUNT / INIT_HOPS are one byte each (spec §4.3, FACT)
ADMIN_RETRY_S = 0.5  # PROJECT CHOICE: gsnd repeats an unanswered ASSIGN_ULA this often


class AdminCmd(enum.IntEnum):
    ARE_YOU_THERE = 0x01
    SET_ELEMENT_ADDRESS = 0x02
    INITIALIZE = 0x03
    WHAT_ARE_YOU = 0x04
    ASSIGN_ULA = 0x05
    READ_REGISTER = 0x06
    WRITE_REGISTER = 0x07
    LIST_ULAS = 0x08
    CHANGE_ROUTE = 0x09
    GET_PORT = 0x0A
    I_AM_HERE = 0x81
    ELEMENT_ADDRESS_STATUS = 0x82
    INITIALIZE_DONE = 0x83
    I_AM = 0x84
    HERE_IS_ULA = 0x85
    REGISTER_DATA = 0x86
    WRITE_STATUS = 0x87
    ULA_LIST = 0x88
    ROUTE_STATUS = 0x89
    PORT_ID = 0x8A
    INVALID_ADMIN = 0xFF


ADMIN_RESPONSE_BIT = 0x80


class AdminStatus(enum.IntEnum):
    OK = 0
    NOT_SUPPORTED = 1
    BAD_ARGUMENT = 2
    NO_SUCH_ULA = 3


class ElementType(enum.IntEnum):
    ENDPOINT = 1
    SWITCH = 2


ADMIN_ROUTE_SLOTS = 7
ADMIN_ROUTE_UNUSED = 0xFF
ADMIN_XID_MEMORY_S = 1.0  # switch remembers XID -> ingress port for 1 s
# Bounds on switch Admin state a peer can make grow (PC): forwarded requests
# remembered at once (more are dropped, counted), and ULA table entries
# (CHANGE_ROUTE for a new ULA is refused when full; ULA_LIST's 16-bit index/total).
ADMIN_XID_TABLE_MAX = 4096
SWITCH_TABLE_MAX = 4096
# Admin authority at a switch (PC, issue 12): requests that change an element's
# configuration are obeyed, or forwarded on by hop count, only when they entered the
# switch on a port configured `management = true`; from any other port they get
# INVALID_ADMIN (status NOT_SUPPORTED), counted admin_refused_not_management.  Every
# other request (WHAT_ARE_YOU, ARE_YOU_THERE, ASSIGN_ULA -- which binds only the
# asking port --, READ_REGISTER, LIST_ULAS, GET_PORT) is open to every port.
ADMIN_MANAGEMENT_COMMANDS = frozenset({
    AdminCmd.SET_ELEMENT_ADDRESS, AdminCmd.INITIALIZE, AdminCmd.WRITE_REGISTER, AdminCmd.CHANGE_ROUTE,
})

# --- fabrics of many switches (issue 13; all PROJECT CHOICE) ---------------------
# I_AM args beyond spec §4.3's 16-23: a switch also gives the port the request
# entered it by (byte 24) and its 48-bit element serial (26-31, random per start),
# so a walk can join both ends of a cable and tell two switches with one id apart.
I_AM_ARRIVAL_OFFSET = 8  # within ARGS
I_AM_SERIAL_OFFSET = 10
# Inter-switch ("switch = true") ports are numbered 1..64: one 64-bit register
# bitmap (bit p-1 = port p) then holds them.
FABRIC_PORT_MAX = 64


class Register(enum.IntEnum):
    """Admin registers of gsn-switch (READ_REGISTER / WRITE_REGISTER address, args
    16-19; data args 20-27, big-endian)."""
    ELEMENT_ADDRESS = 0x00  # R: switch id (SET_ELEMENT_ADDRESS changes it)
    SERIAL = 0x01  # R: 48-bit element serial, random per start
    PORT_COUNT = 0x02  # R
    TABLE_ENTRIES = 0x03  # R: ULA table size
    FABRIC_PORTS = 0x10  # R: bitmap of inter-switch ports configured
    FABRIC_PORTS_UP = 0x11  # R: ... whose link is up
    TREE_PORTS = 0x12  # R/W: inter-switch ports in the broadcast spanning tree
    TOPOLOGY_NOTICE = 0x13  # W: serial(48) << 16 | counter(16): "the fabric changed"; R: own last
    MANAGER = 0x14  # R: fabric manager's switch id in this switch's last map (0xFFFF: none)
    MAP_GENERATION = 0x15  # R: walks completed


WRITABLE_REGISTERS = frozenset({Register.TREE_PORTS, Register.TOPOLOGY_NOTICE})
# CHANGE_ROUTE to port 0 removes the ULA's entry (ports are numbered from 1).
ROUTE_REMOVE_PORT = 0
# The walk: requests in flight at once, how long one may go unanswered (a link may
# have died under it), and the pause after a change before walking (coalesces the
# notices of one event).  Discovery runs on changes only, never on a timer, so an
# idle fabric carries keepalives and nothing else.
FABRIC_WINDOW = 32
FABRIC_REQUEST_TIMEOUT_S = 1.0
FABRIC_SETTLE_S = 0.05
FABRIC_RETRIES = 3  # walks again after a partial one (a request lost), at most this many times in a row
FABRIC_NOTICES_REMEMBERED = 1024  # origins whose last TOPOLOGY_NOTICE is kept

# --- gsn-switch's compiled data path (daemons/_switchloop.h; PROJECT CHOICE) --------
# It keeps a Message's targets as a 64-bit mask of port indices: a switch with more
# ports (or with a keyed cable) runs the Python path.
SWITCH_PLANE_PORTS = 64
# Datagrams received per cable per wake-up (as io/udp.py drains), so that acks and
# forwarding wait for a bounded amount of work.
SWITCH_PLANE_DATAGRAMS = 64

# --- link (spec §1.4, §1.5, §1.7; PROJECT CHOICE) -------------------------------
# Receive buffer per VC, in micropackets.  The spec's 64 suits a 40 m copper
# cable; an emulated UDP cable needs the buffer (hence the credit grant) to
# cover its bandwidth-delay product, exactly as the sequence window does
# (DESIGN §4).  A full-MTU IP datagram is 2041 micropackets.  VC1 (IP) holds 65536
# (2 MiB of data): a path with 1 ms more delay each way (the impairer's reordering,
# bench/ip_over_gsn.py (a5)) is credit-bound (bench/link_loss_sim.py --delay 1, 5% loss
# + 1% dup + 25% reorder: 1.07 Gbit/s at 16384, 1.88 at 32768, 2.39 at 65536; (a5)
# itself 1.9 -> 2.6 Gbit/s from 32768 to 65536, 2.7 at 131072).
VC_BUFFER_MPS = (512, 65536, 4096, 16384)
ACK_DELAY_S = 0.001  # spec default 1 ms
RTX_TIMEOUT_S = 0.020  # spec default 20 ms: the first retransmission
RTX_LIMIT = 8  # consecutive timeouts without progress -> link reset
# PROJECT CHOICE: the first timeout comes after the adaptive RTO (below); each
# further one without progress waits RTX_TIMEOUT_S doubled per timeout (as TCP's
# RTO backs off), up to RTX_TIMEOUT_MAX_S.  A peer that is alive and merely late to
# acknowledge (a userspace process off the CPU on a loaded host) gets about
# RTO+40+...+640+3x1000 ms = 4.2 s before the link is reset, instead of 9 x 20 ms =
# 180 ms, far shorter than the bound for a peer that says nothing at all
# (DEAD_INTERVAL_S).  A timeout resends only what the peer holds neither in order
# nor out of order.
RTX_TIMEOUT_MAX_S = 1.0
# PROJECT CHOICE: loss recovery (README "Loss recovery on the cable").  RTX_TIMEOUT_S
# is the first RTO only: from the first round-trip sample on, the RTO is
# SRTT + 4 x RTTVAR (RFC 6298 weights, Karn: no sample from a retransmitted
# datagram), clamped to [RTX_TIMEOUT_MIN_S, RTX_TIMEOUT_MAX_S].  The floor stays
# above the peer's ACK_DELAY_S plus a scheduling hiccup of a loaded host.
RTX_TIMEOUT_MIN_S = 0.005
RTT_ALPHA = 0.125  # SRTT gain
RTT_BETA = 0.25  # RTTVAR gain
# The receiver keeps out-of-order datagrams (at most the window's micropackets) and
# reports them in a SACK NULL: the NULL's 32 data bytes hold SACK_RANGES pairs of
# big-endian u32 (start, end) offsets from the shim's ack, lowest first, (0, 0)
# unused.  A datagram is lost, and resent at once, when SACK_DUPTHRESH datagrams
# sent after it have been selectively acknowledged (reordering shorter than that
# resends nothing).
SACK_RANGES = 4
SACK_DUPTHRESH = 3
# (A RACK-like wait of SRTT/4 before judging, tried on bench/link_loss_sim.py, cut
# goodput under 1% and 5% loss by a quarter to a half for fewer spurious resends.)
RESET_INTERVAL_S = 0.010  # RESET repeated every 10 ms until answered
KEEPALIVE_S = 0.100  # NULL when idle this long (emulation choice)
# Nothing heard this long -> link down (emulation choice).  Was 1 s: under load
# (2 cores, load ~10) a live gsnd or switch busy with a burst of datagrams sent
# nothing, not even a keepalive, for over 1 s; its peer reset the link and the
# 1 GiB stp send lost 32,768 micropackets ("timed out (peer silent)").  3 s is 30
# missed keepalives; a stopped process is still noticed within seconds.
DEAD_INTERVAL_S = 3.0
# Wide sequence window, micropackets in flight unacknowledged.
SEQ_WINDOW_MPS = sum(VC_BUFFER_MPS) + 1024
# The out-of-order buffer holds datagrams up to this far ahead (and at most this many
# micropackets), or the link's own window if larger: the peer's window is not ours
# (each end sizes it to its own path's MTU, io/runner.py).
OOO_MAX_MPS = SEQ_WINDOW_MPS
# ... and at most this many datagrams (a peer has at most io/runner.py's 128 in
# flight; the bound keeps a hostile peer's 1-micropacket datagrams from costing a
# scan of tens of thousands per arrival).
OOO_MAX_DATAGRAMS = 4096
VC_QUANTUM_MPS = 512  # round-robin quantum per VC per datagram

# --- UDP cable shim (DESIGN §4; PROJECT CHOICE) --------------------------------
SHIM_MAGIC = 0x4753  # "GS"
SHIM_VERSION = 1
SHIM_FLAG_SEQUENCED = 0x01
SHIM_BYTES = 32
MAX_DATAGRAM_MPS = 1600  # 32 + 1600*40 = 64,032 bytes < 65,507
SOCKET_BUFFER_BYTES = 8 << 20
# Kernel memory a received datagram costs beyond its bytes (sk_buff, truesize rounding):
# the cable window is sized so the peer's receive buffer holds it (io/runner.py).
RX_DATAGRAM_OVERHEAD_BYTES = 1024
NO_ACK = (1 << 64) - 1

# --- authenticated cables (PROJECT CHOICE, issue 12; daemons/wire/cableauth.py) ------
# A keyed cable appends a trailer to every datagram: session(8) counter(8) tag(16),
# tag = HMAC-SHA256(key, everything before the tag) cut to its first 16 bytes.
AUTH_KEY_BYTES = 32  # a pre-shared key per cable, like WireGuard's PSK
AUTH_TAG_BYTES = 16  # 128-bit tag (RFC 2104 s5 allows truncation to half the hash)
AUTH_TRAILER_BYTES = 8 + 8 + AUTH_TAG_BYTES
# Counters accepted out of order behind the highest one seen (a bitmap, as IPsec and
# WireGuard keep): at most 128 datagrams are in flight per cable (io/runner.py), so
# 4096 leaves room for GSO bursts reordered by the underlay.
AUTH_REPLAY_WINDOW = 4096

# --- ULP socket (PROJECT CHOICE) -----------------------------------------------
# Largest Message payload (bytes after LLC/SNAP) a client may SEND; the receiving
# gsnd reassembles and delivers exactly up to this size (M_len = payload + 8).
ULP_MAX_PAYLOAD = 4 << 20
# A sender (a ULP client, the TAP reader) waits while more than this many micropackets
# are queued on its VC: the link drains them before more are read.
HIGH_WATER_MPS = 8192
ULP_MAX_CLIENTS = 64  # concurrent ULP connections; more are refused (ERROR, close)
ULP_MAX_BINDINGS = 64  # EtherTypes one client may bind
ULP_ACCEPT_BACKOFF_S = 0.1  # pause after an accept that failed for want of fds
ULP_CLIENT_SOCKET_BYTES = 8 << 20  # SO_SNDBUF/SO_RCVBUF of a client socket (fits a 4 MiB frame)
# A trio client's SENDs queued while its socket is full (project choice): more are dropped and
# counted (AsyncUlpClient.drops), so a gsnd that stops reading cannot grow a daemon without bound.
ULP_CLIENT_BACKLOG_BYTES = 32 << 20
# Lossless delivery to a ULP client (see README "The ULP socket"): while a client's
# socket is full its Messages wait in gsnd and the VC's link credits are withheld
# (back-pressure to the sender), for at most ULP_HOLD_S without the client reading.
# Then its backlog is dropped, counted, and a drop notice goes back to the sender.
ULP_HOLD_S = 1.0
# poll() calls a Unix socket writable only once 3/4 of its buffer is free: while
# frames wait, gsnd also retries this often, so a client that reads is seen to.
ULP_PUMP_RETRY_S = 0.01
# Drop notice: a GSN Message gsnd -> gsnd on VC0, IEEE 802 OUI-extended EtherType
# 0x88B7 whose 5-byte protocol id is our locally administered OUI 02-47-53 ("GS")
# and protocol 0x0001.  The sending gsnd turns it into an ERROR frame.
ETHERTYPE_OUI_EXTENDED = 0x88B7  # FACT (IEEE 802)
ULP_NOTICE_PROTOCOL = bytes((0x02, 0x47, 0x53, 0x00, 0x01))
ULP_NOTICE_VC = 0
ULP_NOTICE_INTERVAL_S = 0.05  # notices go out at most this often, aggregated
ULP_NOTICE_KEYS_MAX = 256  # distinct (sender, VC, EtherType, reason) awaiting a notice
RUNTIME_DIR = "/run/gsnd"
SWITCH_RUNTIME_DIR = "/run/gsn-switch"

# --- defaults for config files ---------------------------------------------------
DEFAULT_CABLE_PORT = 6400
EX_CONFIG = 78  # sysexits.h

# --- metrics (daemons/runtime/metrics.py; PROJECT CHOICE) --------------------------
METRICS_MAX_CLIENTS = 8  # scrapes served at once; one more gets 503
METRICS_TIMEOUT_S = 3.0  # to send the request head, and again to take the answer
METRICS_MAX_REQUEST = 8192  # bytes of request head

# gsnd's data-plane loop (daemons/_loop.h, io/runner.py): the longest it stays in C
# before the other trio tasks run, when no control descriptor is ready (project choice:
# trio's timers run at most this late under full load; control and ULP sockets wake the
# loop at once).  10 ms cost ~8% less CPU per GB on (a) but let a control socket's round
# trip under full load reach ~20 ms with two loops in one run (README "Data plane").
DP_SLICE_S = 0.002
# gsn-switch's loop (daemons/_switchrun.h, switch/daemon.py) the same, longer (project choice):
# its control socket wakes the loop at once too, and the fabric agent's timer is passed to
# the loop as its deadline, so only trio's own timers (control-connection timeouts, log
# rate limits) run up to this late.  Each return costs a trio pass: Python outside the loop
# was 26% of the switch's CPU in bench/ip_over_gsn.py (b) at 2 ms (perf), 9% with this and
# no Python pass after a slice that only ran out (README "Switch forwarding").
SWITCH_SLICE_S = 0.01
# ... and the longest it waits in C while no other task can run (project choice: trio's
# next deadline bounds it first; this only caps a run with no timer at all).
DP_IDLE_MAX_S = 1.0
