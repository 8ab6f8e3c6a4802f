"""Values of the InfiniBand-style emulation (spec: ../shared/spec/servernet-ipoib.md Part 2).

Each value is tagged with its source as the spec gives it ([OSM], [LNX], [IPXE],
[SEED-IB], IBA) or "project choice"; project choices live here and only here.
"""

from __future__ import annotations

# --- LIDs, QPNs, keys (spec 2.1) ----------------------------------------------
LID_UNICAST_MIN = 0x0001  # [OSM]
LID_UNICAST_MAX = 0xBFFF  # [OSM]
LID_MCAST_MIN = 0xC000  # [OSM]
LID_MCAST_MAX = 0xFFFE  # [OSM]
LID_PERMISSIVE = 0xFFFF  # [OSM]
QPN_MCAST = 0xFFFFFF  # IPoIB multicast QPN [LNX]
QPN_SMI = 0  # QP0, the management QP [OSM]
QKEY_PRIVILEGED = 0x80000000  # high bit: controlled key [OSM]
QKEY_IPOIB_DEFAULT = 0x00000B1B  # broadcast group Q_Key of an ipoib partition [OSM]
PKEY_FULL = 0x8000  # bit 15 = full membership [OSM]
PKEY_PARTITION_MASK = 0x7FFF
GID_PREFIX_DEFAULT = 0xFE80000000000000  # fe80::/64 [OSM]

# --- IB MTU enum and rates (spec 2.1, 2.7) -------------------------------------
IB_MTU_BYTES = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}  # 4 = 2048 [OSM]; others IBA, unverified
IB_MTU_2048 = 4
RATE_10G = 3  # OpenSM ipoib default rate [OSM]
SL_DEFAULT = 0  # [OSM]
SCOPE_LINK_LOCAL = 2  # [OSM]
PACKET_LIFETIME_DEFAULT = 18  # ~1 s encoded as 4.096 us * 2^18; project choice (OpenSM-like)

# --- packet framing (spec 2.1) --------------------------------------------------
LRH_BYTES = 8  # [LNX ib_pack.h]
GRH_BYTES = 40
BTH_BYTES = 12
DETH_BYTES = 8
ICRC_BYTES = 4
GRH_NEXT_HEADER = 0x1B  # [LNX]
LNH_LOCAL = 2  # LRH link next header: BTH follows (IBA)
LNH_GLOBAL = 3  # GRH follows (IBA)
LRH_LVER = 0
BTH_TVER = 0
OPCODE_UD_SEND_ONLY = 0x64  # UD class (0b011) + SEND Only (IBA)
VL_MANAGEMENT = 15  # hellos travel on the management VL (IBA)

# --- IPoIB (spec 2.2-2.6) --------------------------------------------------------
IPOIB_HEADER_BYTES = 4  # [SEED-IB; LNX; RFC4391]
IPOIB_HWADDR_BYTES = 20  # [LNX; SEED-IB]
ARPHRD_INFINIBAND = 32  # [SEED-IB; LNX]
IPOIB_ARP_BYTES = 56  # 8 + 2 * (20 + 4)
ETH_ARP_BYTES = 28
IPOIB_UD_MTU_2048 = 2044  # IB MTU 2048 - 4 [LNX; RFC4391]
ND_OPT_IB_BYTES = 24  # type, length=3, 2 padding bytes, 20-byte address [LNX]
ND_OPT_ETH_BYTES = 8
IPOIB_TX_TYPES = frozenset({0x0800, 0x0806, 0x8035, 0x86DD, 0x88CA})  # what Linux transmits [LNX]
ETH_P_IP, ETH_P_ARP, ETH_P_IPV6 = 0x0800, 0x0806, 0x86DD

# --- eIPoIB-style MAC mapping (spec 2.10) ------------------------------------------
GUID_MAC_BYTES = (0, 1, 2, 5, 6, 7)  # mask 0xE7 [IPXE; WINOF]
REMAC_QPN_LA = 0x02000000  # locally administered bit over the QPN [IPXE]
REMAC_CACHE_SIZE = 1024  # LRU entries; project choice

# --- SA and shadow ARP timers (spec 2.7, 2.8, 2.11) ------------------------------------
SA_TIMEOUT_S = 1.0  # [LNX path_rec_start]
SA_RETRIES = 3  # project choice (spec 2.8)
NEIGH_QUEUE_MAX = 3  # IPOIB_MAX_PATH_REC_QUEUE [LNX]
NEIGH_IDLE_S = 60.0  # 2 x ARP GC interval [LNX]
JOIN_BACKOFF_MIN_S = 1.0  # [LNX]
JOIN_BACKOFF_MAX_S = 16.0  # [LNX]
SENDONLY_QUEUE_MAX = 64  # [LNX]

# --- emulation transport (spec 2.11, project choice) ------------------------------------
SM_PORT_DEFAULT = 4791  # UDP port of the SM's management socket; project choice
CLIENT_KEEPALIVE_S = 2.0  # an endpoint re-registers this often (learns an SM restart); project choice
SWITCH_REPORT_S = 1.0  # a switch reports its neighbours to the SM this often; project choice
LINK_HELLO_S = 0.5  # NodeInfo hello on each cable this often; project choice
LINK_DEAD_S = 2.0  # neighbour forgotten when silent this long; project choice
PORT_EXPIRY_S = 3 * CLIENT_KEEPALIVE_S  # the SM forgets a silent port (its LID is kept); project choice
SWITCH_EXPIRY_S = 3.0  # the SM forgets a switch that stopped reporting; project choice
KERNEL_GROUPS_POLL_S = 1.0  # ipoibd reads the kernel's multicast memberships this often; project choice
MGMT_MAGIC = b"IM"  # management datagrams (ib/mgmt.py); project choice
MGMT_VERSION = 1  # project choice
PORT_UD_MTU = 2048  # the emulated port's UD MTU (IBA Profile B / the seed's 2 KB); project choice
SM_LID = 1  # the SM's own LID (SA requests name it); project choice
MAX_SWITCH_PORTS = 64  # MFT port mask width; project choice
MAX_LFT_ENTRIES = 4096  # entries in one table message; project choice
DATAGRAM_MAX = 65535
DROPLOG_PERIOD_S = 1.0  # daemons look at their drop counters this often (for the log); project choice
MAX_NEIGHS = 4096  # shadow-ARP entries per interface; project choice
MAX_GROUPS = 256  # multicast groups per interface; project choice
SM_MAX_PORTS = 16384  # registered ports the SM keeps; project choice
SM_MAX_GROUPS = 4096  # multicast groups the SM keeps; project choice
SM_MAX_PORTS_PER_ADDR = 8  # port GUIDs one UDP source may register (each takes a LID for good); project choice
SM_MAX_JOINS_PER_PORT = 256  # groups one port may belong to; project choice
QPN_BASE = 0x000048  # ib0's UD QPN; children take the next ones; project choice

# --- PacketWay over the fabric (spec 2.12, project choice) ----------------------------
ETHERTYPE_PACKETWAY_NATIVE = 0x88B5  # in the IPoIB Type field between emulated nodes (spec 2.12)
QPN_PACKETWAY = 0x0000A0  # the UD QP of a PacketWay port
QKEY_PACKETWAY = 0x00005057  # "PW"; below 0x80000000 (not a controlled key)
L2RH_IB_BYTES = 5  # DLID u16 + QPN u24; the P_Key is the port's partition
REGISTER_WAIT_S = 10.0  # a blocking PacketWay node waits this long for the SM
PUMP_BUDGET = 64  # frames or datagrams the compiled pump thread takes from one TAP or cable per turn; project choice
