"""Subnet manager and subnet administration core (sans-IO).

- Port discovery: ports REGISTER (port GUID); switches report who is on each of their
  ports (learned from cable hellos).  GUID -> LID from ``lids`` (the driver keeps it in
  a state file, so LIDs survive restarts); GID = prefix + GUID.
- P_Key tables from the partitions; PathRecord answers only between ports that share
  a partition with at least one full member.
- MCMemberRecord join/leave with JoinState; the IPoIB broadcast group of each ipoib
  partition exists from the start; other groups are created by a join that carries
  the group's parameters (Q_Key) copied from the broadcast group.
- Routing: shortest paths over the switch graph for each LID; multicast along a
  spanning tree rooted at the lowest switch GUID; tables are pushed to a switch whose
  report shows other versions than the SM's.
- The epoch (random per start) in every reply lets ports notice an SM restart.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import TypeAlias

from . import addr, mgmt, sa
from .constants import (GID_PREFIX_DEFAULT, PORT_EXPIRY_S, SWITCH_EXPIRY_S, IB_MTU_BYTES, LID_MCAST_MAX, LID_MCAST_MIN,
                        LID_UNICAST_MAX, PACKET_LIFETIME_DEFAULT, PKEY_FULL, PKEY_PARTITION_MASK, QKEY_PRIVILEGED,
                        SCOPE_LINK_LOCAL, SM_LID, SM_MAX_GROUPS, SM_MAX_JOINS_PER_PORT, SM_MAX_PORTS,
                        SM_MAX_PORTS_PER_ADDR)
from .mgmt import PEER_CA, PEER_SWITCH, Kind, Status
from .partitions import Partition, may_talk, pkey_table

SockAddr: TypeAlias = tuple[str, int] | tuple[str, int, int, int]
"""A UDP peer's address as the socket gives it (IPv4 or IPv6)."""



@dataclass
class Port:
    guid: int
    lid: int
    addr: SockAddr
    pkeys: tuple[int, ...]
    seen: float
    reregister: bool = True  # until the port joins a group again (ClientReregister)


@dataclass
class Switch:
    guid: int
    addr: SockAddr
    ports: dict[int, tuple[int, int, int]]  # port -> (peer guid, peer port, peer kind)
    lft_version: int
    mft_version: int
    seen: float


@dataclass
class Group:
    mgid: bytes
    mlid: int
    pkey: int
    qkey: int
    mtu: int
    rate: int
    sl: int
    broadcast: bool
    members: dict[bytes, int] = field(default_factory=dict)  # port GID -> JoinState bits


class SmCore:
    def __init__(self, epoch: int, partitions: list[Partition], lids: dict[int, int] | None = None,
                 gid_prefix: int = GID_PREFIX_DEFAULT) -> None:
        self.epoch = epoch
        self.partitions = partitions
        self.lids: dict[int, int] = dict(lids or {})  # port GUID -> LID (persisted by the driver)
        self.lids_changed = False
        self.prefix = gid_prefix
        self.ports: dict[int, Port] = {}
        self.switches: dict[int, Switch] = {}
        self.groups: dict[bytes, Group] = {}
        self.counters: Counter[str] = Counter()
        self.version = 0  # of the computed tables
        self.lft: dict[int, dict[int, int]] = {}
        self.mft: dict[int, dict[int, int]] = {}
        self._dirty = True
        self._out: list[tuple[SockAddr, bytes]] = []
        for p in partitions:
            if p.ipoib:
                mgid = addr.broadcast_mgid(p.pkey)
                self.groups[mgid] = Group(mgid, self._free_mlid(), p.pkey | PKEY_FULL, p.qkey, p.mtu, p.rate, p.sl,
                                          True)

    # --- input ----------------------------------------------------------------------
    def on_datagram(self, data: bytes, src: SockAddr, now: float) -> None:
        try:
            m = mgmt.decode(data)
            if m.kind == Kind.REGISTER:
                self._register(m, src, now)
            elif m.kind == Kind.SWITCH_REPORT:
                self._switch_report(m, src, now)
            elif m.kind == Kind.PATH_GET:
                self._path_get(m, src)
            elif m.kind in (Kind.MC_JOIN, Kind.MC_LEAVE):
                self._mc(m, src)
            else:
                self.counters["drop_unexpected_kind"] += 1
        except mgmt.MgmtError as exc:
            self.counters[f"drop_{exc.reason}"] += 1
        except ValueError:
            self.counters["drop_bad_record"] += 1
        self._recompute()

    def _reply(self, dst: SockAddr, m: mgmt.Mgmt, kind: Kind, status: Status = Status.OK, body: bytes = b"") -> None:
        self._out.append((dst, mgmt.Mgmt(kind, m.tid, self.epoch, status, body).encode()))
        if status != Status.OK:
            self.counters[f"sa_{status.name.lower()}"] += 1

    def _register(self, m: mgmt.Mgmt, src: SockAddr, now: float) -> None:
        guid, _node = mgmt.parse_register(m.body)
        if guid == 0:
            raise mgmt.MgmtError("bad_register")
        port = self.ports.get(guid)
        if port is None:
            if len(self.ports) >= SM_MAX_PORTS or sum(p.addr == src for p in self.ports.values()) >= SM_MAX_PORTS_PER_ADDR:
                self.counters["register_refused_too_many"] += 1
                self._reply(src, m, Kind.REGISTER_REPLY, Status.NO_RESOURCES)
                return
            lid = self.lids.get(guid)
            if lid is None:
                lid = self._free_lid()
                if lid is None:
                    self._reply(src, m, Kind.REGISTER_REPLY, Status.NO_RESOURCES)
                    return
                self.lids[guid] = lid
                self.lids_changed = True
            port = self.ports[guid] = Port(guid, lid, src, pkey_table(self.partitions, guid), now)
            self.counters["ports_registered"] += 1
            self._dirty = True
        else:
            port.addr, port.seen = src, now
        info = mgmt.PortInfo(port.lid, SM_LID, self.prefix, port.pkeys, port.reregister)
        self._reply(src, m, Kind.REGISTER_REPLY, body=info.encode())

    def _free_lid(self) -> int | None:
        used = set(self.lids.values())
        for lid in range(SM_LID + 1, LID_UNICAST_MAX + 1):
            if lid not in used:
                return lid
        return None

    def _free_mlid(self) -> int:
        used = {g.mlid for g in self.groups.values()}
        return next(m for m in range(LID_MCAST_MIN, LID_MCAST_MAX + 1) if m not in used)

    def _switch_report(self, m: mgmt.Mgmt, src: SockAddr, now: float) -> None:
        r = mgmt.SwitchReport.decode(m.body)
        ports = {p: (g, pp, k) for p, g, pp, k in r.ports}
        sw = self.switches.get(r.guid)
        if sw is None:
            if len(self.switches) >= SM_MAX_PORTS:
                self.counters["drop_too_many_switches"] += 1
                return
            sw = self.switches[r.guid] = Switch(r.guid, src, ports, r.lft_version, r.mft_version, now)
            self._dirty = True
            self.counters["switches_discovered"] += 1
        else:
            if sw.ports != ports:
                self._dirty = True
            sw.addr, sw.ports, sw.lft_version, sw.mft_version, sw.seen = src, ports, r.lft_version, r.mft_version, now
        if not self._recompute() and (sw.lft_version != self.version or sw.mft_version != self.version
                                      or m.epoch != self.epoch):
            self._push(sw)

    def _push(self, sw: Switch) -> None:
        lft = mgmt.encode_lft(self.version, self.lft.get(sw.guid, {}))
        mft = mgmt.encode_mft(self.version, self.mft.get(sw.guid, {}))
        self._out.append((sw.addr, mgmt.Mgmt(Kind.SET_LFT, epoch=self.epoch, body=lft).encode()))
        self._out.append((sw.addr, mgmt.Mgmt(Kind.SET_MFT, epoch=self.epoch, body=mft).encode()))
        self.counters["tables_pushed"] += 1

    # --- SA -------------------------------------------------------------------------------
    def _sender(self, src: SockAddr, gid: bytes) -> Port | None:
        """The registered port that sent from ``src`` and owns ``gid`` (no spoofed SGIDs)."""
        port = self._port_by_gid(gid)
        return port if port is not None and port.addr == src else None

    def _port_by_gid(self, gid: bytes) -> Port | None:
        if len(gid) != 16 or int.from_bytes(gid[:8], "big") != self.prefix:
            return None
        return self.ports.get(int.from_bytes(gid[8:], "big"))

    def _gid(self, port: Port) -> bytes:
        return addr.gid(self.prefix, port.guid)

    def _path_get(self, m: mgmt.Mgmt, src: SockAddr) -> None:
        mask, raw = mgmt.parse_masked(m.body, sa.PATH_RECORD_BYTES)
        q = sa.PathRecord.decode(raw)
        self.counters["path_queries"] += 1
        me = self._sender(src, q.sgid)
        if me is None or not mask & sa.PR_DGID or not mask & sa.PR_SGID:
            self._reply(src, m, Kind.PATH_REPLY, Status.NOT_REGISTERED if me is None else Status.REQ_INVALID)
            return
        dst = self._port_by_gid(q.dgid)
        if dst is None:
            self._reply(src, m, Kind.PATH_REPLY, Status.NO_RECORDS)
            return
        want = q.pkey if mask & sa.PR_PKEY else None
        pkey = self._shared_pkey(me, dst, want)
        if pkey is None:
            self.counters["path_partition_refused"] += 1
            self._reply(src, m, Kind.PATH_REPLY, Status.NO_RECORDS)
            return
        part = next(p for p in self.partitions if p.pkey == pkey & PKEY_PARTITION_MASK)
        rec = sa.PathRecord(dgid=q.dgid, sgid=q.sgid, dlid=dst.lid, slid=me.lid, pkey=pkey, sl=part.sl, mtu=part.mtu,
                            rate=part.rate, packet_lifetime=PACKET_LIFETIME_DEFAULT, tclass=q.tclass, hop_limit=0,
                            reversible=True, num_path=1)
        self._reply(src, m, Kind.PATH_REPLY, body=rec.encode())

    def _shared_pkey(self, a: Port, b: Port, want: int | None) -> int | None:
        for pa in a.pkeys:
            if want is not None and (pa & PKEY_PARTITION_MASK) != (want & PKEY_PARTITION_MASK):
                continue
            for pb in b.pkeys:
                if may_talk(pa, pb):
                    return pa
        return None

    def _mc(self, m: mgmt.Mgmt, src: SockAddr) -> None:
        mask, raw = mgmt.parse_masked(m.body, sa.MCMEMBER_RECORD_BYTES)
        r = sa.MCMemberRecord.decode(raw)
        me = self._sender(src, r.port_gid)
        if me is None:
            self._reply(src, m, Kind.MC_REPLY, Status.NOT_REGISTERED)
            return
        me.reregister = False
        if not addr.is_mgid(r.mgid) or not mask & sa.MC_MGID or not mask & sa.MC_JOIN_STATE or not r.join_state:
            self._reply(src, m, Kind.MC_REPLY, Status.REQ_INVALID)
            return
        g = self.groups.get(r.mgid)
        if m.kind == Kind.MC_LEAVE:
            if g is None or r.port_gid not in g.members:
                self._reply(src, m, Kind.MC_REPLY, Status.NO_RECORDS)
                return
            left = g.members[r.port_gid] & ~r.join_state
            if left:
                g.members[r.port_gid] = left
            else:
                del g.members[r.port_gid]
            if not g.members and not g.broadcast:
                del self.groups[r.mgid]
            self.counters["mc_leaves"] += 1
            self._dirty = True
            self._reply(src, m, Kind.MC_REPLY, body=self._mc_record(g, r.port_gid, r.join_state).encode())
            return
        pk = (g.pkey if g is not None else r.pkey)
        if not any(may_talk(pk | PKEY_FULL, p) for p in me.pkeys):
            self.counters["mc_partition_refused"] += 1
            self._reply(src, m, Kind.MC_REPLY, Status.REQ_INVALID)
            return
        if g is None:
            if r.qkey & QKEY_PRIVILEGED:  # a controlled Q_Key is the SM's to hand out
                self.counters["mc_privileged_qkey_refused"] += 1
                self._reply(src, m, Kind.MC_REPLY, Status.REQ_INVALID)
                return
            if not mask & sa.MC_QKEY or not mask & sa.MC_PKEY or len(self.groups) >= SM_MAX_GROUPS:
                self._reply(src, m, Kind.MC_REPLY, Status.NO_RECORDS)
                return
            part = next((p for p in self.partitions if p.pkey == r.pkey & PKEY_PARTITION_MASK), None)
            if part is None:
                self._reply(src, m, Kind.MC_REPLY, Status.REQ_INVALID)
                return
            g = self.groups[r.mgid] = Group(r.mgid, self._free_mlid(), part.pkey | PKEY_FULL, r.qkey, part.mtu,
                                            part.rate, part.sl, False)
            self.counters["mc_groups_created"] += 1
        if r.port_gid not in g.members and sum(r.port_gid in x.members for x in self.groups.values()) >= \
                SM_MAX_JOINS_PER_PORT:
            if not g.members and not g.broadcast:
                del self.groups[r.mgid]
            self.counters["mc_join_refused_too_many"] += 1
            self._reply(src, m, Kind.MC_REPLY, Status.NO_RESOURCES)
            return
        g.members[r.port_gid] = g.members.get(r.port_gid, 0) | r.join_state
        self.counters["mc_joins"] += 1
        self._dirty = True
        self._reply(src, m, Kind.MC_REPLY, body=self._mc_record(g, r.port_gid, r.join_state).encode())

    def _mc_record(self, g: Group, port_gid: bytes, join_state: int) -> sa.MCMemberRecord:
        return sa.MCMemberRecord(mgid=g.mgid, port_gid=port_gid, qkey=g.qkey, mlid=g.mlid, mtu=g.mtu, pkey=g.pkey,
                                 rate=g.rate, packet_lifetime=PACKET_LIFETIME_DEFAULT, sl=g.sl,
                                 scope=SCOPE_LINK_LOCAL, join_state=join_state)

    # --- routing ------------------------------------------------------------------------------
    def _recompute(self) -> bool:
        """Recompute and push every switch's tables if something changed; True if it did."""
        if not self._dirty:
            return False
        self._dirty = False
        self.version += 1
        self.lft, self.mft = route(self.switches, self.ports, self.groups, self.prefix)
        for sw in self.switches.values():
            self._push(sw)
        return True

    # --- timers ---------------------------------------------------------------------------------
    def timer(self) -> float:
        return min([p.seen + PORT_EXPIRY_S for p in self.ports.values()]
                   + [s.seen + SWITCH_EXPIRY_S for s in self.switches.values()] + [float("inf")])

    def handle_timer(self, now: float) -> None:
        for guid, p in list(self.ports.items()):
            if now - p.seen >= PORT_EXPIRY_S:
                del self.ports[guid]
                gid = self._gid(p)
                for mg, g in list(self.groups.items()):
                    if g.members.pop(gid, None) is not None and not g.members and not g.broadcast:
                        del self.groups[mg]
                self.counters["ports_expired"] += 1
                self._dirty = True
        for guid, s in list(self.switches.items()):
            if now - s.seen >= SWITCH_EXPIRY_S:
                del self.switches[guid]
                self.counters["switches_expired"] += 1
                self._dirty = True
        self._recompute()

    def outgoing(self) -> list[tuple[SockAddr, bytes]]:
        out, self._out = self._out, []
        return out

    def events(self) -> list[object]:
        return []  # none: everything it says goes out as datagrams

    def status(self) -> dict[str, object]:
        return {
            "epoch": f"{self.epoch:#018x}", "gid_prefix": f"{self.prefix:#018x}", "version": self.version,
            "ports": [{"guid": f"{p.guid:#018x}", "lid": p.lid, "gid": addr.gid_text(self._gid(p)),
                       "pkeys": [f"{k:#06x}" for k in p.pkeys]} for p in sorted(self.ports.values(), key=lambda p: p.lid)],
            "switches": [{"guid": f"{s.guid:#018x}", "neighbours": {str(k): f"{v[0]:#018x}" for k, v in sorted(s.ports.items())},
                          "lft_version": s.lft_version} for s in self.switches.values()],
            "groups": [{"mgid": addr.gid_text(g.mgid), "mlid": f"{g.mlid:#06x}", "pkey": f"{g.pkey:#06x}",
                        "qkey": f"{g.qkey:#010x}", "mtu": IB_MTU_BYTES.get(g.mtu, 0), "rate": g.rate,
                        "broadcast": g.broadcast, "members": len(g.members)} for g in self.groups.values()],
            "partitions": [{"name": p.name, "pkey": f"{p.pkey:#06x}", "ipoib": p.ipoib} for p in self.partitions],
            "counters": dict(self.counters),
        }


def route(switches: dict[int, Switch], ports: dict[int, Port], groups: dict[bytes, Group],
          prefix: int) -> tuple[dict[int, dict[int, int]], dict[int, dict[int, int]]]:
    """Unicast tables (shortest paths) and multicast tables (spanning tree) per switch."""
    # links between switches: guid -> [(my port, peer guid)]; a link counts when both ends report it
    adj: dict[int, list[tuple[int, int]]] = {g: [] for g in switches}
    attach: dict[int, tuple[int, int]] = {}  # CA port GUID -> (switch guid, switch port)
    for g, sw in switches.items():
        for p, (peer, peer_port, kind) in sw.ports.items():
            if kind == PEER_SWITCH and peer in switches and switches[peer].ports.get(peer_port, (0,))[0] == g:
                adj[g].append((p, peer))
            elif kind == PEER_CA:
                attach[peer] = (g, p)
    lft: dict[int, dict[int, int]] = {g: {} for g in switches}
    for guid, port in ports.items():
        at = attach.get(guid)
        if at is None:
            continue
        home, hport = at
        lft[home][port.lid] = hport
        seen = {home}
        todo = deque([home])
        while todo:
            y = todo.popleft()
            for x in switches:
                if x in seen:
                    continue
                for p, peer in adj[x]:
                    if peer == y:
                        lft[x][port.lid] = p
                        seen.add(x)
                        todo.append(x)
                        break
    # spanning tree from the lowest GUID of each connected piece
    tree: dict[int, list[tuple[int, int]]] = {g: [] for g in switches}
    placed: set[int] = set()
    for root in sorted(switches):
        if root in placed:
            continue
        placed.add(root)
        todo = deque([root])
        while todo:
            y = todo.popleft()
            for p, peer in sorted(adj[y]):
                if peer not in placed:
                    back = next(q for q, z in adj[peer] if z == y)
                    tree[y].append((p, peer))
                    tree[peer].append((back, y))
                    placed.add(peer)
                    todo.append(peer)
    mft: dict[int, dict[int, int]] = {g: {} for g in switches}
    for group in groups.values():
        local: dict[int, int] = {}  # switch -> mask of member CA ports
        for pgid, state in group.members.items():
            if not state & (sa.JOIN_FULL | sa.JOIN_NON_MEMBER):
                continue  # send-only members receive nothing
            at = attach.get(int.from_bytes(pgid[8:], "big"))
            if at is not None and int.from_bytes(pgid[:8], "big") == prefix:
                local[at[0]] = local.get(at[0], 0) | 1 << at[1]
        memo: dict[tuple[int, int], bool] = {}

        def has_members(y: int, came_from: int) -> bool:
            key = (y, came_from)
            if key not in memo:
                memo[key] = bool(local.get(y)) or any(has_members(z, y) for _, z in tree[y] if z != came_from)
            return memo[key]

        for x in switches:
            mask = local.get(x, 0)
            for p, y in tree[x]:
                if has_members(y, x):
                    mask |= 1 << p
            if mask:
                mft[x][group.mlid] = mask
    return lft, mft
