"""An IPoIB port (sans-IO): registration with the SM, the SA client (1000 ms timeout,
retries), multicast joins with back-off, one IPoIB interface per P_Key (ib0 on
the P_Key at index 0, children like ib0.8001), shadow ARP, and the UD packets in and
out.  The driver feeds cable datagrams, SM datagrams and TAP frames with the time,
and carries out what ``outgoing()`` returns:

    ("cable", bytes) | ("sm", bytes) | ("tap", ifname, frame) | ("carrier", ifname, up, mtu)
"""

from __future__ import annotations

import itertools
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from . import addr, mgmt, nodeinfo, packet, sa
from .addr import HwAddr
from .constants import (CLIENT_KEEPALIVE_S, IB_MTU_2048, IB_MTU_BYTES, IPOIB_HEADER_BYTES, JOIN_BACKOFF_MAX_S,
                        JOIN_BACKOFF_MIN_S, LID_PERMISSIVE, LINK_HELLO_S, MAX_GROUPS, NEIGH_IDLE_S, PKEY_FULL,
                        PKEY_PARTITION_MASK, PORT_UD_MTU, QPN_BASE, QPN_MCAST, SA_RETRIES, SA_TIMEOUT_S, SENDONLY_QUEUE_MAX)
from .eipoib import Translator
from .mgmt import PEER_CA, Kind, Status
from .partitions import may_talk
from .shadow import ShadowArp, State



@dataclass
class Group:
    mgid: bytes
    want: int  # JoinState bits wanted (full or send-only)
    mlid: int = 0
    joined: int = 0
    busy: bool = False
    retry_at: float = 0.0
    backoff: float = JOIN_BACKOFF_MIN_S
    queue: deque[bytes] = field(default_factory=deque)
    used: float = 0.0  # last send to a send-only group (reaped when idle)


def _is_probe(payload: bytes) -> bool:
    """A unicast ARP request or IPv6 neighbour solicitation (the kernel revalidating)."""
    if payload[:2] == b"\x08\x06":
        return payload[10:12] == b"\x00\x01"
    return payload[:2] == b"\x86\xdd" and len(payload) > 44 and payload[10] == 58 and payload[44] == 135


class Iface:
    def __init__(self, name: str, pkey: int | None, qpn: int, counters: Counter[str]) -> None:
        self.name = name
        self.want_pkey = pkey  # None: the P_Key at index 0
        self.pkey = 0  # the table entry in use (membership bit as the SM gave it)
        self.qpn = qpn
        self.counters = counters
        self.rx_key, self.tx_key = f"{name}_rx_frames", f"{name}_tx_frames"
        self.carrier = False
        self.mtu = 0
        self.qkey = 0
        self.rate = self.sl = 0
        self.ib_mtu = IB_MTU_2048  # learnt from the broadcast group
        self.groups: dict[bytes, Group] = {}
        self.kernel_groups: set[bytes] = set()
        self.shadow = ShadowArp(counters)
        self.tr: Translator | None = None

    @property
    def bcast(self) -> bytes:
        return addr.broadcast_mgid(self.pkey)


Ctx: TypeAlias = tuple[Literal["path", "leave"], str, bytes] | tuple[Literal["join"], str, bytes, int]
"""What an SA request was for: (what, interface, GID or MGID[, JoinState])."""

Out: TypeAlias = (tuple[Literal["cable", "sm"], bytes] | tuple[Literal["tap"], str, bytes]
                  | tuple[Literal["carrier"], str, bool, int])
"""What :meth:`PortCore.outgoing` hands the driver (the module docstring lists them)."""


@dataclass
class Request:
    kind: Kind
    body: bytes
    ctx: Ctx
    deadline: float
    tries: int = 1


class PortCore:
    def __init__(self, port_guid: int, node_guid: int, ifaces: list[tuple[str, int | None]], now: float = 0.0,
                 port_number: int = 1) -> None:
        self.guid, self.node_guid, self.port_number = port_guid, node_guid, port_number
        self.mac = addr.lemac(port_guid)
        self.counters: Counter[str] = Counter()
        self.ifaces = [Iface(name, pk, QPN_BASE + i, self.counters) for i, (name, pk) in enumerate(ifaces)]
        self.by_qpn = {i.qpn: i for i in self.ifaces}
        self.by_name = {i.name: i for i in self.ifaces}
        self.info: mgmt.PortInfo | None = None
        self.epoch = 0
        self.gid = b""
        self.requests: dict[int, Request] = {}
        self._tid = itertools.count(1)
        self._out: list[Out] = []
        self._next_register = now
        self._next_hello = now
        self._next_reap = now + 1.0
        self.timers_changed = True  # a request or a join was added (see daemons.runtime.corerunner)

    # --- helpers -------------------------------------------------------------------------
    @property
    def lid(self) -> int:
        return self.info.lid if self.info else 0

    def hwaddr(self, ifc: Iface) -> HwAddr:
        return HwAddr(ifc.qpn, self.gid)

    def _request(self, kind: Kind, body: bytes, ctx: Ctx, now: float) -> None:
        tid = next(self._tid)
        self.timers_changed = True
        self.requests[tid] = Request(kind, body, ctx, now + SA_TIMEOUT_S)
        self._out.append(("sm", mgmt.Mgmt(kind, tid, self.epoch, body=body).encode()))

    # --- registration ---------------------------------------------------------------------
    def _register(self, now: float) -> None:
        self._next_register = now + (CLIENT_KEEPALIVE_S if self.info else SA_TIMEOUT_S)
        body = mgmt.register_body(self.guid, self.node_guid)
        self._out.append(("sm", mgmt.Mgmt(Kind.REGISTER, 0, self.epoch, body=body).encode()))

    def _registered(self, m: mgmt.Mgmt, now: float) -> None:
        info = mgmt.PortInfo.decode(m.body)
        first = self.info is None
        changed = (self.info is not None and (info.lid != self.info.lid or info.pkeys != self.info.pkeys))
        resync = first or changed or m.epoch != self.epoch or info.reregister
        self.info, self.epoch = info, m.epoch
        self.gid = addr.gid(info.gid_prefix, self.guid)
        if not resync:
            return
        if not first:
            self.counters["sm_reregister"] += 1
        for ifc in self.ifaces:
            self._setup_iface(ifc, now, reregister=not first)

    def _setup_iface(self, ifc: Iface, now: float, reregister: bool) -> None:
        assert self.info is not None
        pkeys = self.info.pkeys
        if ifc.want_pkey is None:
            pk = pkeys[0] if pkeys else None
        else:
            pk = next((p for p in pkeys if p & PKEY_PARTITION_MASK == ifc.want_pkey & PKEY_PARTITION_MASK), None)
        if pk is None:
            self.counters[f"{ifc.name}_pkey_absent"] += 1
            self._carrier(ifc, False)
            return
        if pk != ifc.pkey or ifc.tr is None:
            ifc.pkey = pk
            ifc.tr = Translator(self.mac, self.hwaddr(ifc), pk, self.counters)
            ifc.groups.clear()
        ifc.tr.hw, ifc.tr.hw_bytes = self.hwaddr(ifc), self.hwaddr(ifc).pack()
        if reregister:
            ifc.shadow.invalidate()  # paths from before are invalid (ipoib_mark_paths_invalid)
        for g in ifc.groups.values():  # every group is joined again
            g.joined, g.busy, g.retry_at, g.backoff = 0, False, now, JOIN_BACKOFF_MIN_S
        self._want(ifc, ifc.bcast, sa.JOIN_FULL, now)
        for mg in ifc.kernel_groups:
            self._want(ifc, mg, sa.JOIN_FULL, now)
        self._joins(now)

    # --- multicast joins ---------------------------------------------------------------------
    def _want(self, ifc: Iface, mgid: bytes, state: int, now: float) -> Group | None:
        g = ifc.groups.get(mgid)
        if g is None:
            if len(ifc.groups) >= MAX_GROUPS:
                self.counters["drop_too_many_groups"] += 1
                return None
            g = ifc.groups[mgid] = Group(mgid, state, retry_at=now)
            self.timers_changed = True
        elif not g.want & state:
            self.timers_changed = True
            g.want |= state
            g.retry_at = now
        return g

    def _joins(self, now: float) -> None:
        if self.info is None:
            return
        for ifc in self.ifaces:
            if ifc.tr is None:
                continue
            bgroup = ifc.groups.get(ifc.bcast)
            bjoined = bgroup is not None and bgroup.joined
            for g in ifc.groups.values():
                missing = g.want & ~g.joined
                if not missing or g.busy or now < g.retry_at:
                    continue
                if g.mgid != ifc.bcast and not bjoined:
                    continue  # other joins copy the broadcast group's values
                state = sa.JOIN_FULL if missing & sa.JOIN_FULL else missing
                if g.mgid == ifc.bcast:
                    rec = sa.MCMemberRecord(mgid=g.mgid, port_gid=self.gid, pkey=ifc.pkey | PKEY_FULL,
                                            join_state=state)
                    mask = sa.MC_BROADCAST_JOIN
                else:
                    rec = sa.MCMemberRecord(mgid=g.mgid, port_gid=self.gid, qkey=ifc.qkey, pkey=ifc.pkey | PKEY_FULL,
                                            mtu=ifc.ib_mtu, rate=ifc.rate, sl=ifc.sl, join_state=state)
                    mask = (sa.MC_MGID | sa.MC_PORT_GID | sa.MC_QKEY | sa.MC_PKEY | sa.MC_MTU | sa.MC_RATE | sa.MC_SL
                            | sa.MC_JOIN_STATE)
                g.busy = True
                self._request(Kind.MC_JOIN, mgmt.masked_body(mask, rec.encode()), ("join", ifc.name, g.mgid, state),
                              now)

    def _joined(self, ifc: Iface, g: Group, state: int, rec: sa.MCMemberRecord, now: float) -> None:
        g.busy, g.backoff = False, JOIN_BACKOFF_MIN_S
        g.joined |= state
        g.mlid = rec.mlid
        self.counters["mc_joined"] += 1
        if g.mgid == ifc.bcast:
            ifc.qkey, ifc.rate, ifc.sl, ifc.ib_mtu = rec.qkey, rec.rate, rec.sl, rec.mtu
            mtu = min(IB_MTU_BYTES.get(rec.mtu, 256), PORT_UD_MTU) - IPOIB_HEADER_BYTES
            self._carrier(ifc, True, mtu)
        while g.queue:
            self._send_mcast(ifc, g, g.queue.popleft())

    def _join_failed(self, ifc: Iface, g: Group, now: float) -> None:
        g.busy = False
        self.timers_changed = True
        g.retry_at = now + g.backoff
        g.backoff = min(g.backoff * 2, JOIN_BACKOFF_MAX_S)
        self.counters["mc_join_failed"] += 1
        if g.want == sa.JOIN_SENDONLY_FULL and g.queue:
            self.counters["drop_sendonly_join_failed"] += len(g.queue)
            g.queue.clear()
        if g.mgid == ifc.bcast:
            self._carrier(ifc, False)

    def _carrier(self, ifc: Iface, up: bool, mtu: int | None = None) -> None:
        if up == ifc.carrier and (mtu is None or mtu == ifc.mtu):
            return
        ifc.carrier = up
        if mtu is not None:
            ifc.mtu = mtu
        self._out.append(("carrier", ifc.name, up, ifc.mtu))

    def _reap_sendonly(self, ifc: Iface, now: float) -> None:
        """Send-only groups (e.g. other hosts' solicited-node groups) left after 60 s idle."""
        for mg, g in list(ifc.groups.items()):
            if g.want == sa.JOIN_SENDONLY_FULL and now - g.used >= NEIGH_IDLE_S and not g.busy:
                del ifc.groups[mg]
                self.counters["mc_sendonly_reaped"] += 1
                if g.joined:
                    self._leave(ifc, mg, g.joined, now)

    def _leave(self, ifc: Iface, mgid: bytes, state: int, now: float) -> None:
        rec = sa.MCMemberRecord(mgid=mgid, port_gid=self.gid, pkey=ifc.pkey | PKEY_FULL, join_state=state)
        self._request(Kind.MC_LEAVE, mgmt.masked_body(sa.MC_MGID | sa.MC_PORT_GID | sa.MC_JOIN_STATE, rec.encode()),
                      ("leave", ifc.name, mgid), now)

    def set_kernel_groups(self, name: str, mgids: set[bytes], now: float) -> None:
        """The groups the kernel has joined on interface ``name`` (as MGIDs): join new
        ones, leave the ones it dropped."""
        ifc = self.by_name[name]
        for mg in mgids - ifc.kernel_groups:
            self._want(ifc, mg, sa.JOIN_FULL, now)
        for mg in ifc.kernel_groups - mgids:
            g = ifc.groups.pop(mg, None)
            if g is not None and g.joined and self.info is not None and ifc.tr is not None and mg != ifc.bcast:
                self._leave(ifc, mg, g.joined, now)
        ifc.kernel_groups = set(mgids)
        self._joins(now)

    # --- SM datagrams ----------------------------------------------------------------------------
    def on_sm(self, data: bytes, now: float) -> None:
        try:
            m = mgmt.decode(data)
            if m.kind == Kind.REGISTER_REPLY:
                if m.status == Status.OK:
                    self._registered(m, now)
                return
            req = self.requests.pop(m.tid, None)
            if req is None:
                self.counters["drop_sm_stray_reply"] += 1
                return
            self._answer(req, m, now)
        except (mgmt.MgmtError, ValueError):
            self.counters["drop_sm_malformed"] += 1
        self._joins(now)

    def _iface(self, name: str) -> Iface:
        return self.by_name[name]

    def _answer(self, req: Request, m: mgmt.Mgmt | None, now: float) -> None:
        body = m.body if m is not None and m.status == Status.OK else None  # None: failed or timed out
        if m is not None and m.epoch != self.epoch and self.info is not None:
            self._next_register = now  # an SM we have not registered with answered: re-register
            self.timers_changed = True
        ctx = req.ctx
        ifc = self._iface(ctx[1])
        if ctx[0] == "path":
            gid = ctx[2]
            if body is not None:
                path = sa.PathRecord.decode(body)
                for p, hw, payload in ifc.shadow.resolved(gid, path, now):
                    self._send_ud(ifc, p.dlid, hw.qpn, p.sl, payload)
            else:
                ifc.shadow.failed(gid)
        elif ctx[0] == "join":
            g = ifc.groups.get(ctx[2])
            if g is None:
                return
            if body is not None:
                self._joined(ifc, g, ctx[3], sa.MCMemberRecord.decode(body), now)
            else:
                self._join_failed(ifc, g, now)

    # --- cable -------------------------------------------------------------------------------------
    def on_cable(self, data: bytes, now: float) -> None:
        try:
            p = packet.decode(data)
        except packet.PacketError as exc:
            self.counters[f"rx_drop_{exc.reason}"] += 1
            return
        if p.dlid == LID_PERMISSIVE:
            self.counters["rx_hello"] += 1
            return
        if self.info is None:
            self.counters["rx_drop_unregistered"] += 1
            return
        if p.dqpn == QPN_MCAST:
            if p.grh is None or p.dlid < 0xC000:
                self.counters["rx_drop_mcast_without_grh"] += 1
                return
            for ifc in self.ifaces:
                g = ifc.groups.get(p.grh.dgid)
                if g is None or not g.joined & sa.JOIN_FULL:
                    continue
                if p.slid == self.lid and p.sqpn == ifc.qpn:
                    self.counters["rx_drop_own_mcast_echo"] += 1
                    continue
                self._deliver(ifc, p, now)
            return
        dest = self.by_qpn.get(p.dqpn)
        if dest is None or p.dlid != self.lid:
            self.counters["rx_drop_no_such_qp"] += 1
            return
        self._deliver(dest, p, now)

    def _deliver(self, ifc: Iface, p: packet.UdPacket, now: float) -> None:
        if ifc.tr is None or not ifc.carrier:
            self.counters["rx_drop_no_carrier"] += 1
            return
        if not may_talk(p.pkey, ifc.pkey):
            self.counters["rx_drop_pkey_mismatch"] += 1
            return
        if p.qkey != ifc.qkey:
            self.counters["rx_drop_qkey_mismatch"] += 1
            return
        if len(p.payload) > ifc.mtu + IPOIB_HEADER_BYTES:
            self.counters["rx_drop_too_long"] += 1
            return
        learned: list[HwAddr] = []
        frame = ifc.tr.rx(p.payload, p.slid, p.sqpn, p.grh.sgid if p.grh else None, p.grh.dgid if p.grh else None,
                          learned)
        if learned:
            for hw in learned:
                ifc.shadow.learn(hw, now)
            self._queries(ifc, now)
        if frame is not None:
            self.counters[ifc.rx_key] += 1
            self._out.append(("tap", ifc.name, frame))

    # --- TAP -------------------------------------------------------------------------------------------
    def on_tap(self, name: str, frame: bytes, now: float) -> None:
        ifc = self._iface(name)
        if not ifc.carrier or ifc.tr is None:
            self.counters["tx_drop_no_carrier"] += 1
            return
        r = ifc.tr.tx(frame)
        if r is None:
            return
        dst, payload = r
        if len(payload) > ifc.mtu + IPOIB_HEADER_BYTES:
            self.counters["tx_drop_too_long"] += 1
            return
        self.counters[ifc.tx_key] += 1
        if len(dst) == 16:  # an MGID
            g = ifc.groups.get(dst)
            if g is None:
                g = self._want(ifc, dst, sa.JOIN_SENDONLY_FULL, now)
                if g is None:
                    return
            g.used = now
            if g.joined:
                self._send_mcast(ifc, g, payload)
            elif len(g.queue) < SENDONLY_QUEUE_MAX:
                g.queue.append(payload)
                self._joins(now)
            else:
                self.counters["tx_drop_mcast_queue_full"] += 1
            return
        if _is_probe(payload):
            ifc.shadow.refresh(dst)
        for p, h, pl in ifc.shadow.send(dst, payload, now):
            self._send_ud(ifc, p.dlid, h.qpn, p.sl, pl)
        self._queries(ifc, now)

    def _queries(self, ifc: Iface, now: float) -> None:
        for gid in ifc.shadow.take_queries():
            rec = sa.PathRecord(dgid=gid, sgid=self.gid, pkey=ifc.pkey | PKEY_FULL, num_path=1)
            self._request(Kind.PATH_GET, mgmt.masked_body(sa.PR_IPOIB_QUERY, rec.encode()), ("path", ifc.name, gid),
                          now)

    def _send_ud(self, ifc: Iface, dlid: int, dqpn: int, sl: int, payload: bytes) -> None:
        self._out.append(("cable", packet.encode(packet.UdPacket(
            slid=self.lid, dlid=dlid, pkey=ifc.pkey, dqpn=dqpn, sqpn=ifc.qpn, qkey=ifc.qkey, payload=payload, sl=sl))))

    def _send_mcast(self, ifc: Iface, g: Group, payload: bytes) -> None:
        self._out.append(("cable", packet.encode(packet.UdPacket(
            slid=self.lid, dlid=g.mlid, pkey=ifc.pkey, dqpn=QPN_MCAST, sqpn=ifc.qpn, qkey=ifc.qkey, payload=payload,
            sl=ifc.sl, grh=packet.Grh(self.gid, g.mgid)))))

    # --- timers --------------------------------------------------------------------------------------------
    def timer(self) -> float:
        t = min(self._next_register, self._next_hello, self._next_reap)
        for r in self.requests.values():
            t = min(t, r.deadline)
        for ifc in self.ifaces:
            for g in ifc.groups.values():
                if g.want & ~g.joined and not g.busy:
                    t = min(t, g.retry_at)
        return t

    def handle_timer(self, now: float) -> None:
        if now >= self._next_register:
            self._register(now)
        if now >= self._next_hello:
            self._next_hello = now + LINK_HELLO_S
            self._out.append(("cable", nodeinfo.hello(PEER_CA, self.guid, self.port_number)))
        for tid, r in list(self.requests.items()):
            if now >= r.deadline:
                if r.tries < SA_RETRIES:
                    r.tries += 1
                    r.deadline = now + SA_TIMEOUT_S
                    self.counters["sa_retries"] += 1
                    self._out.append(("sm", mgmt.Mgmt(r.kind, tid, self.epoch, body=r.body).encode()))
                else:
                    del self.requests[tid]
                    self.counters["sa_timeouts"] += 1
                    self._answer(r, None, now)
        if now >= self._next_reap:
            self._next_reap = now + 1.0
            for ifc in self.ifaces:
                ifc.shadow.reap(now)
                self._reap_sendonly(ifc, now)
        self._joins(now)

    def outgoing(self) -> list[Out]:
        out, self._out = self._out, []
        return out

    def events(self) -> list[object]:
        return []  # none: everything it says is in outgoing()

    # --- the compiled steady state (ib.fastpath mirrors these into ib/_ibfast.c) -------------------------
    def fast_config(self) -> tuple[int, bool, list[tuple[bool, int, int, int, int]]]:
        """(LID, registered, [(carrier, QPN, P_Key, Q_Key, MTU)] per interface): what the
        compiled path checks a frame against."""
        return (self.lid, self.info is not None,
                [(i.carrier and i.tr is not None, i.qpn, i.pkey, i.qkey, i.mtu) for i in self.ifaces])

    def fast_key(self) -> tuple[tuple[int, int, int], ...]:
        """Moves whenever ``fast_neighbours()`` may have changed."""
        return tuple((id(i.tr), i.tr.remacs.version if i.tr else -1, i.shadow.version) for i in self.ifaces)

    def fast_neighbours(self) -> list[tuple[int, bytes, int, int, int]]:
        """[(interface index, MAC, DLID, destination QPN, SL)]: every MAC whose frames
        ``on_tap`` sends at once (its address RESOLVED, the path stored)."""
        out = []
        for k, ifc in enumerate(self.ifaces):
            if ifc.tr is None:
                continue
            for mac, hw in ifc.tr.remacs.by_mac.items():
                n = ifc.shadow.neighs.get(hw)
                if n is not None and n.state is State.RESOLVED and n.path is not None:
                    out.append((k, mac, n.path.dlid, n.hw.qpn, n.path.sl))
        return out

    def fast_used(self, used: list[tuple[int, bytes, float]]) -> None:
        """The compiled path sent to these MACs (oldest use first): the REMAC cache's
        LRU order and the shadow entries' last use, as ``on_tap`` would have left them."""
        for k, mac, last in used:
            ifc = self.ifaces[k]
            hw = ifc.tr.remacs.hw(mac) if ifc.tr is not None else None
            n = ifc.shadow.neighs.get(hw) if hw is not None else None
            if n is not None:
                n.used = last

    # --- operators -------------------------------------------------------------------------------------------
    def status(self) -> dict[str, object]:
        return {
            "port_guid": f"{self.guid:#018x}", "gid": addr.gid_text(self.gid) if self.gid else None, "lid": self.lid,
            "registered": self.info is not None, "sm_epoch": f"{self.epoch:#018x}",
            "pkeys": [f"{p:#06x}" for p in (self.info.pkeys if self.info else ())],
            "interfaces": [{"name": i.name, "pkey": f"{i.pkey:#06x}", "qpn": f"{i.qpn:#08x}", "carrier": i.carrier,
                            "mtu": i.mtu, "qkey": f"{i.qkey:#010x}", "mac": ":".join(f"{b:02x}" for b in self.mac),
                            "hwaddr": self.hwaddr(i).text() if self.gid else None} for i in self.ifaces],
            "counters": dict(self.counters),
        }

    def neighbours(self) -> list[dict[str, object]]:
        return [dict(n, interface=i.name) for i in self.ifaces for n in i.shadow.table()]

    def groups(self) -> list[dict[str, object]]:
        return [{"interface": i.name, "mgid": addr.gid_text(g.mgid), "mlid": f"{g.mlid:#06x}", "joined": g.joined,
                 "wanted": g.want, "queued": len(g.queue)} for i in self.ifaces for g in i.groups.values()]

    def path_info(self, mac: bytes) -> dict[str, object] | None:
        """The seed's ipoib_path_info for the neighbour behind ``mac`` (None: unknown)."""
        for ifc in self.ifaces:
            if ifc.tr is None:
                continue
            hw = ifc.tr.remacs.hw(mac)
            if hw is None:
                continue
            n = ifc.shadow.neighs.get(hw)
            p = n.path if n else None
            info: dict[str, object] = {"interface": ifc.name, "hwaddr": HwAddr.unpack(hw).text(),
                                       "state": n.state.value if n else "absent"}
            if p is not None:
                info.update(dest_gid=addr.gid_text(p.dgid), source_gid=addr.gid_text(p.sgid), dest_lid=p.dlid,
                            source_lid=p.slid, flow_label=p.flow_label, pkey=f"{p.pkey:#06x}", service_level=p.sl,
                            mtu=IB_MTU_BYTES.get(p.mtu, 0), static_rate=p.rate, packet_lifetime=p.packet_lifetime,
                            hop_limit=p.hop_limit, tclass=p.tclass)
            return info
        return None
