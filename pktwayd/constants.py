"""PacketWay values (spec pktway.md).  Every value the spec marks PC lives here."""

import enum

WORD = 8
ADDR_UNSPECIFIED = 0x000000
ADDR_HEY_YOU = 0x7FFFFE  # power-up addressing over point-to-point links
ADDR_BROADCAST = 0x7FFFFF
LOGICAL_BASE, LOGICAL_MASK = 0xE00000, 0xF00000  # 20-bit logical (group) addresses
MAX_DL_WORDS = (1 << 25) - 1


class PT(enum.IntEnum):
    """Packet types (PC, §1.12: values below 0x0600 cannot clash with EtherTypes)."""

    ERR = 0x0001
    RRP = 0x0002
    EMBEDDED = 0x0003
    MEMORY_READ = 0x0004
    MEMORY_WRITE = 0x0005
    USER = 0x0006


class RrpTE(enum.IntEnum):
    GVL2 = 1
    L2SR = 2
    RDRC = 3
    TELL = 4
    INFO = 5
    HRTO = 6
    WRU = 7
    GVRT = 8
    RTBL = 9


class ErrTE(enum.IntEnum):
    UNK = 1
    HRDOWN = 2
    LINKDOWN = 3
    GENERAL = 4


LIVENESS_S = 5.0  # spec §3.4 PC: a WRU to the twin every 5 s ...
LIVENESS_MISSES = 3  # ... and three unanswered ones mean it is gone
REGATHER_S = 1.0  # after a withdrawal, GVRT the twin and buddies this much later
REDIRECT_TTL_S = 60.0  # a node obeys an RDRC this long, then asks its default router again
REDIRECT_INTERVAL_S = 1.0  # a half-router redirects one node about one destination at most this often (PC)
REDIRECTED_MAX = 4096  # (node, destination) pairs whose last redirect a half-router remembers (PC)
TWIN_HIGH_WATER_MPS = 65536  # twin-link backlog (micropackets) beyond which packets are dropped, counted

# Optional header field types this implementation knows (spec §1.8, §1.12: none is defined,
# PC).  An unknown mandatory (T=1) field: the message is dropped, ERR/GENERAL to its SA; an
# unknown optional one is ignored where the message is consumed and forwarded unchanged.
KNOWN_OH_TYPES: frozenset[int] = frozenset()

# ERR/GENERAL carries the offending message from its EEP header, at most this many bytes (PC:
# the spec says "truncated to the path MTU"; 64 words fit every SAN this project emulates)
ERR_GENERAL_COPY_MAX = 8 * 64

SYMBOL_NOP = 0x00001  # PC: consumed and ignored (tests)
ETHERTYPE_PKTWAY = 0x88B6  # PC: PacketWay in GSN Messages (IEEE local experimental EtherType 2), on VC1
MYRINET_TYPE = 0x0300

# MessageWay v5 dialect (§5)
MW_VERSION = 5
MW_L2RH_LIMIT = 0x0040  # a first 16-bit value below this is an L2RH
MW_LOGICAL = 0x8000
MW_HEY_YOU, MW_BROADCAST = 0xFFFE, 0xFFFF

# IP over PacketWay (the pw0 interface, pktway ip)
PT_IPV4, PT_IPV6 = 0x0800, 0x86DD  # PT reuses the EtherType for layered protocols [M:L90-91]
IP_HEADER_WORDS = 3  # an L3 EEP packet around an IP packet: header (2 words) + TAIL (1)
ICMP_HOP_LIMIT = 64  # TTL / hop limit of the ICMP errors pw0 hands to its own stack (PC)
IP_NEIGHBOURS_MAX = 1024  # IP -> PacketWay address entries kept (configured ones not counted) (PC)
IP_PENDING_DESTS = 64  # destinations waiting for a TELL answer at once (PC)
IP_PENDING_PACKETS = 8  # IP packets held per such destination (PC)
IP_RESOLVE_RETRY_S = 1.0  # TELL again after this long without an answer ... (PC)
IP_RESOLVE_TRIES = 3  # ... this many times, then the destination is unknown ... (PC)
IP_NEGATIVE_S = 5.0  # ... for this long: its packets are dropped, counted (PC)
IP_LEARNED_S = 300.0  # a learned IP -> PacketWay address is asked again after this long (PC)
IP_MTU_RECHECK_S = 60.0  # pw0 asks its peers' route MTUs again this often and follows them (PC)
IP_MTU_QUERIES_MAX = 16  # destinations whose route MTU is being asked (GVL2) at once (PC)
IP_TOO_BIG_HELD = 4  # returned packet copies kept per destination until its MTU is known (PC)
IP_REDIRECT_TTL_S = 10.0  # pw0 obeys an RDRC this long, then goes through its router again (PC)
IP_ROUTER_PROBE_S = 5.0  # pw0 asks its router who it is (WRU) when it heard nothing from it this long ... (PC)
IP_ROUTER_MISSES = 3  # ... and after this many such periods of silence asks the others which to use (HRTO) (PC)
IP_HRTO_RETRY_S = 1.0  # without a router, pw0 asks the half-routers it knows (HRTO) this often (PC)
IP_HRS_MAX = 16  # half-routers of its SAN a pw0 node keeps (configured, and heard at their power-up) (PC)
IP_WRU_QUIET_S = 3.0  # a redirected-to node that did not answer my WRU is not asked again for this long (PC)
IP_REDIRECTS_MAX = 256  # redirected destinations, and native routes of redirected-to nodes, kept (PC)
IP_DEFAULT_MTU = 1500  # pw0's MTU until a route's MinMTU is known (PC)
# IP multicast -> PacketWay logical address: the group's low 19 bits under a base per IP
# version (as IPv4 multicast maps onto Ethernet, the IP stack filters what collides) (PC)
IP_GROUP_V4_BASE, IP_GROUP_V6_BASE, IP_GROUP_BITS = 0xE00000, 0xE80000, 0x7FFFF
IP_GROUPS_MAX = 64  # multicast groups one pw0 node listens to (PC)
IP_GROUPS_POLL_S = 1.0  # pw0 reads the kernel's memberships on it (/proc/net/igmp, igmp6) this often (PC)
IP_GROUPS_ALWAYS = ("224.0.0.1", "ff02::1")  # all-hosts / all-nodes: every pw0 node is a member (PC)
MEMORY_BOARD_MAX = 1 << 20  # bytes of memory board one node may serve (pktway listen --memory) (PC)
MEMORY_READ_MAX = 4096  # bytes a memory READ may ask for at once (the answer must fit the SANs' MTUs) (PC)

# The compiled fast path (pktwayd._pwfast, pktwayd/fastpath.py)
FAST_BURST_FRAMES = 64  # frames (or TUN packets) one compiled burst takes at most (PC)
FAST_BURST_BYTES = 2 << 20  # ... and no more once this many bytes are received (PC: 32 frames of 64 KiB)
# How long a compiled burst waits, GIL released, for room on a full ULP socket.  gsnd reads its
# clients as its VC queues empty, so a full socket is back-pressure: the router holds what had no
# room and reads nothing more until it went (gsnd then holds the rest); short, as the process
# serves nothing else meanwhile (PC)
FAST_ROOM_WAIT_US = 5000
FAST_HELD_POLL_S = 0.001  # ... and, while nothing comes in to prompt a burst, tries again this often (PC)
# A router burst whose frames all went waits this long (GIL released) for the next and goes on,
# for at most FAST_SLICE_US in all, so trio wakes once a slice, not once a 64 KiB packet (~15 us
# of Python each); input on the other half's socket, or a frame Python must see, ends it at once (PC)
FAST_LINGER_US = 500
FAST_SLICE_US = 2000
FAST_PEERS_MAX = 256  # pw0 peers the compiled path looks up (more: the Python path serves all) (PC)
FAST_ENV = "PKTWAY_FASTPATH"  # "0" in the environment: the Python path only (benches compare the two)
