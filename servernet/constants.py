"""ServerNet values (spec servernet-ipoib.md Part 1).  Values the spec tags with a
source say so; every other one is a project choice and lives only here."""

import enum

# --- packet format (§1.3) -------------------------------------------------------------------
HEADER_BYTES = 8  # [SEED-SN]
ADDRESS_BYTES = 4  # [SEED-SN]
CRC_BYTES = 4  # 32-bit CRC over every field before it [GLOS; SCM]
MAX_DATA = 64  # ServerNet I data field [SEED-SN]
MAX_DATA_II = 512  # ServerNet II packet limit [GLOS]
LEN_UNIT_II = 8  # project choice: ServerNet II mode counts LEN in 8-byte units (open question 5)
ID_BITS = 20  # [SDM Fig. 2-2]
ID_MAX = (1 << ID_BITS) - 1
TID_COUNT = 16  # 4-bit TID: 16 outstanding transactions per device [SEED-SN]
ROUTE_BYTES = 3  # a router chooses the port from the first 3 bytes (the DID) [SEED-SN]


class TType(enum.IntEnum):
    """Transaction types; the codes are not published: project choice (§1.3)."""

    READ = 0x0
    WRITE = 0x1
    BARRIER = 0x2  # a READ with LEN = 0 checking that a path works
    DIAG = 0xE  # diagnostic/status: no response expected


class Fabric(enum.IntEnum):
    """The path bit: 0 = X (primary), 1 = Y (alternate) [SEED-SN]."""

    X = 0
    Y = 1


FABRIC_NAMES = ("X", "Y")  # by path bit, without an enum lookup per packet


# --- UDP envelope (§1.8, project choice) -------------------------------------------------------
ENVELOPE_MAGIC = 0x534E  # 'SN'
ENVELOPE_VERSION = 1
ENVELOPE_BYTES = 4
FLAG_FABRIC = 0x01  # 0 = X, 1 = Y
FLAG_TPB = 0x02  # a router saw a bad CRC: "this packet bad"
FLAG_II = 0x04  # ServerNet II mode: data up to 512 bytes
FLAGS_KNOWN = FLAG_FABRIC | FLAG_TPB | FLAG_II
MAX_DATAGRAM = ENVELOPE_BYTES + HEADER_BYTES + ADDRESS_BYTES + MAX_DATA + CRC_BYTES  # 84
MAX_DATAGRAM_II = ENVELOPE_BYTES + HEADER_BYTES + ADDRESS_BYTES + MAX_DATA_II + CRC_BYTES  # 532

# --- AVT (§1.5, project choice) ------------------------------------------------------------------
PAGE_SHIFT = 12  # address = (avt_index << 12) | offset
PAGE_BYTES = 1 << PAGE_SHIFT
AVT_ENTRIES = 1 << (32 - PAGE_SHIFT)
INTERRUPT_QUEUE = 64  # bounded interrupt queue (entries)

# --- BTE, timers and paths (§1.6, §1.8, project choice unless tagged) -------------------------
RESPONSE_TIMEOUT_S = 0.050  # per-transaction timer (loopback/LAN)
RETRIES_SAME_FABRIC = 1  # one retry on the same fabric, then the other
HARD_DOWN_TIMEOUTS = 40  # more than 40 BTE timeouts put a path hard down [SCM 8-18]
PROBE_INTERVAL_S = 1.0  # a HARD_DOWN path is probed with a BARRIER every second
PROBE_ACKS_UP = 3  # barrier ACKs in a row that bring a PROBING path UP
PENDING_OPS = 4096  # transactions waiting for a TID (beyond: refused, counted)
DOORBELL_BYTES = 16  # {address u32, length u32, seq u32, crc32 u32}
MAX_BLOCK_BYTES = 16 << 20  # largest block one control request may move

# --- PacketWay over ServerNet (§1.8, project choice) -----------------------------------------
RING_WINDOW = "pktway-ring"  # the AVT window PacketWay messages are written into
BELL_WINDOW = "pktway-bell"  # its doorbell page (interrupt flag), the page right after the ring
RING_SLOTS = 16  # slots of one page each: a message of up to 4096 bytes per slot
RING_BASE = 0x00400000  # where the ring sits unless a node's route says otherwise
SLOT_BYTES = PAGE_BYTES
PW_MTU_BYTES = 512  # default PacketWay MTU on this link (the pre-push buffer size [SDM 9-12])
CREDIT_OFFSET = 0x800  # where a receiver WRITEs its credit (the seq last taken from each slot) in the doorbell page
CREDIT_WAIT_S = 2.0  # a slot whose doorbell was ACKed this long ago without a credit is taken back
PW_BACKLOG = 64  # messages a sender holds per peer while that peer's ring has no free slot (beyond: dropped)
L2RH_ROUTE_BYTES = 8  # DID (3) | fabric preference (1) | ring base (4)
PREF_EITHER = 2

# --- daemons (project choice) ----------------------------------------------------------------------
ROUTER_PORTS = 12  # ports per router (the ServerNet II router has 12 [GLOS])
NODE_BATCH = 64  # datagrams per recvmmsg/sendmmsg call of an end node (NODE_BATCH in _snetfwd.c, BATCH in _snetnode.c)
NODE_BLOCKS = 64  # blocks an end node's compiled engine runs at once (MAX_BLOCKS in _snetnode.c; beyond: Python's BTE)
NODE_SLOW_QUEUE = 1024  # datagrams the engine holds for the Python core (SLOW_QUEUE; beyond: drop_slow_path_full)
FORWARD_POLL_MS = 100  # the router's forwarding thread looks at its stop flag at least this often
DROP_LOG_S = 1.0  # how often the router logs new drops
SOCKET_BUFFER_BYTES = 1 << 20
CONTROL_INLINE_BYTES = 16384  # largest data a control request carries in hex
MAX_WAITING_CLIENT_OPS = 64  # control requests waiting on the BTE at once
MAX_WAITING_BLOCKS = 4  # of which blocks (each holds its data in memory until done)
