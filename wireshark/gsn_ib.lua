-- The InfiniBand-style emulation of ib/: UD packets on its UDP cables and the management
-- datagrams to and from the subnet manager (ib/packet.py, ib/mgmt.py, ib/sa.py and
-- ib/constants.py are the reference; ../shared/spec/servernet-ipoib.md Part 2).
--
--   UD packet: LRH (8) | GRH (40, LNH 3) | BTH (12) | DETH (8) | payload | pad | ICRC (4)
--     ICRC: CRC-32 over the packet with LRH VL, GRH traffic class/flow label/hop limit and the
--     BTH reserved byte read as ones (the project's masking, ib/packet.py icrc()).
--     Payload on QP0: the cable hello (node type, GUID, port); otherwise the IPoIB header
--     (EtherType, reserved) and the frame, handed to Wireshark's "ethertype" table.
--   management: 'IM' | version 1 | kind | status | reserved | TID u64 | SM epoch u64 | body
--
-- Registration: UD packets by a heuristic on every UDP datagram (LVer 0, LNH 2/3, PktLen equal
-- to the datagram, BTH opcode 0x64) and a UDP ports preference (default none); management
-- datagrams on UDP port 4791 (preference; the SM's default port, taking it from RoCEv2) and by
-- a heuristic (magic 'IM', version 1, a known kind).

local bit = require("gsn_bit") -- band, bor, bxor, lshift, rshift on any Lua Wireshark embeds
local band, bor, bxor, rshift = bit.band, bit.bor, bit.bxor, bit.rshift

-- wire constants (ib/constants.py, ib/mgmt.py, ib/sa.py)
local LRH_BYTES, GRH_BYTES, BTH_BYTES, DETH_BYTES, ICRC_BYTES = 8, 40, 12, 8, 4
local LNH_LOCAL, LNH_GLOBAL, GRH_NEXT_HEADER, OPCODE_UD_SEND_ONLY = 2, 3, 0x1B, 0x64
local MIN_UD = LRH_BYTES + BTH_BYTES + DETH_BYTES + ICRC_BYTES
local QPN_SMI, IPOIB_HEADER_BYTES, HELLO_BYTES = 0, 4, 10
local SM_PORT = 4791
local MGMT_MAGIC, MGMT_VERSION, MGMT_HEADER_BYTES = 0x494D, 1, 24
local PATH_RECORD_BYTES, MCMEMBER_RECORD_BYTES = 64, 52
local KINDS = { [1] = "REGISTER", [2] = "REGISTER_REPLY", [3] = "PATH_GET", [4] = "PATH_REPLY", [5] = "MC_JOIN",
    [6] = "MC_LEAVE", [7] = "MC_REPLY", [8] = "SWITCH_REPORT", [9] = "SET_LFT", [10] = "SET_MFT" }
local STATUS = { [0] = "OK", "NO_RECORDS", "REQ_INVALID", "NO_RESOURCES", "NOT_REGISTERED" }
local NODE_TYPES = { [1] = "CA", [2] = "switch" }
local LNHS = { [0] = "raw", "IPv6 (raw)", "BTH (local)", "GRH (global)" }
local ETHERTYPE_PACKETWAY_NATIVE = 0x88B5

local CRC32 = require("gsn_crc32") -- zlib's CRC-32, shared with gsn_servernet.lua
local crc32_update = CRC32.update

-- ICRC over s[1..last] with the variant fields read as ones: those sit in the first bytes
-- (up to the BTH reserved byte), ORed into a copy of that prefix
local function icrc(s, last, global)
    local bth = LRH_BYTES + 1
    local ones = { [1] = 0xF0 }
    if global then
        ones[9], ones[10], ones[11], ones[12], ones[16] = 0x0F, 0xFF, 0xFF, 0xFF, 0xFF
        bth = bth + GRH_BYTES
    end
    ones[bth + 4] = 0xFF
    local prefix = {}
    for k = 1, bth + 4 do prefix[k] = bor(s:byte(k), ones[k] or 0) end
    local crc = crc32_update(0xFFFFFFFF, string.char((table.unpack or unpack)(prefix)), 1, bth + 4)
    return bxor(crc32_update(crc, s, bth + 5, last), 0xFFFFFFFF)
end

local ib = Proto("gsn_ib", "InfiniBand-style UD packet (gsn-revival ib/)")
local F = {
    vl = ProtoField.uint8("gsn_ib.lrh.vl", "VL", base.DEC, nil, 0xF0),
    lver = ProtoField.uint8("gsn_ib.lrh.lver", "LVer", base.DEC, nil, 0x0F),
    sl = ProtoField.uint8("gsn_ib.lrh.sl", "SL", base.DEC, nil, 0xF0),
    lnh = ProtoField.uint8("gsn_ib.lrh.lnh", "LNH", base.DEC, LNHS, 0x03),
    dlid = ProtoField.uint16("gsn_ib.lrh.dlid", "DLID", base.HEX),
    pktlen = ProtoField.uint16("gsn_ib.lrh.pktlen", "PktLen (words)", base.DEC, nil, 0x07FF),
    slid = ProtoField.uint16("gsn_ib.lrh.slid", "SLID", base.HEX),
    ipver = ProtoField.uint32("gsn_ib.grh.ipver", "IPVer", base.DEC, nil, 0xF0000000),
    tclass = ProtoField.uint32("gsn_ib.grh.tclass", "Traffic class", base.HEX, nil, 0x0FF00000),
    flow = ProtoField.uint32("gsn_ib.grh.flow_label", "Flow label", base.HEX, nil, 0x000FFFFF),
    paylen = ProtoField.uint16("gsn_ib.grh.paylen", "PayLen"),
    nxthdr = ProtoField.uint8("gsn_ib.grh.nxthdr", "NxtHdr", base.HEX),
    hoplmt = ProtoField.uint8("gsn_ib.grh.hoplmt", "HopLmt"),
    sgid = ProtoField.ipv6("gsn_ib.grh.sgid", "SGID"),
    dgid = ProtoField.ipv6("gsn_ib.grh.dgid", "DGID"),
    opcode = ProtoField.uint8("gsn_ib.bth.opcode", "OpCode", base.HEX, { [OPCODE_UD_SEND_ONLY] = "UD SEND Only" }),
    se = ProtoField.bool("gsn_ib.bth.se", "Solicited event", 8, nil, 0x80),
    migreq = ProtoField.bool("gsn_ib.bth.migreq", "MigReq", 8, nil, 0x40),
    padcnt = ProtoField.uint8("gsn_ib.bth.padcnt", "Pad count", base.DEC, nil, 0x30),
    tver = ProtoField.uint8("gsn_ib.bth.tver", "TVer", base.DEC, nil, 0x0F),
    pkey = ProtoField.uint16("gsn_ib.bth.pkey", "P_Key", base.HEX),
    dqpn = ProtoField.uint24("gsn_ib.bth.dqpn", "Destination QP", base.HEX),
    ackreq = ProtoField.bool("gsn_ib.bth.ackreq", "AckReq", 8, nil, 0x80),
    psn = ProtoField.uint24("gsn_ib.bth.psn", "PSN"),
    qkey = ProtoField.uint32("gsn_ib.deth.qkey", "Q_Key", base.HEX),
    sqpn = ProtoField.uint24("gsn_ib.deth.sqpn", "Source QP", base.HEX),
    payload = ProtoField.bytes("gsn_ib.payload", "Payload"),
    pad = ProtoField.bytes("gsn_ib.pad", "Pad"),
    icrc = ProtoField.uint32("gsn_ib.icrc", "ICRC", base.HEX),
    icrc_ok = ProtoField.bool("gsn_ib.icrc_ok", "ICRC correct"),
    icrc_calc = ProtoField.uint32("gsn_ib.icrc_calc", "ICRC computed", base.HEX),
    hello_type = ProtoField.uint8("gsn_ib.hello.node_type", "Hello node type", base.DEC, NODE_TYPES),
    hello_guid = ProtoField.uint64("gsn_ib.hello.guid", "Hello GUID", base.HEX),
    hello_port = ProtoField.uint8("gsn_ib.hello.port", "Hello port"),
    ipoib_type = ProtoField.uint16("gsn_ib.ipoib.type", "IPoIB EtherType", base.HEX),
    ipoib_rsvd = ProtoField.uint16("gsn_ib.ipoib.reserved", "IPoIB reserved", base.HEX),
}
local list = {}
for _, f in pairs(F) do list[#list + 1] = f end
ib.fields = list
local E = {
    bad = ProtoExpert.new("gsn_ib.malformed", "Malformed UD packet", expert.group.MALFORMED, expert.severity.ERROR),
    icrc = ProtoExpert.new("gsn_ib.icrc_bad", "ICRC mismatch", expert.group.CHECKSUM, expert.severity.ERROR),
}
ib.experts = { E.bad, E.icrc }
ib.prefs.ports = Pref.range("UD cable UDP ports", "", "UDP ports of ib-switch/ipoibd cables (the heuristic finds them)",
    65535)

local mgmt = Proto("gsn_ib_mgmt", "InfiniBand-style management datagram (gsn-revival ib/)")
local M = {
    magic = ProtoField.string("gsn_ib_mgmt.magic", "Magic"),
    version = ProtoField.uint8("gsn_ib_mgmt.version", "Version"),
    kind = ProtoField.uint8("gsn_ib_mgmt.kind", "Kind", base.DEC, KINDS),
    status = ProtoField.uint16("gsn_ib_mgmt.status", "Status", base.DEC, STATUS),
    reserved = ProtoField.uint16("gsn_ib_mgmt.reserved", "Reserved", base.HEX),
    tid = ProtoField.uint64("gsn_ib_mgmt.tid", "TID", base.HEX),
    epoch = ProtoField.uint64("gsn_ib_mgmt.epoch", "SM epoch", base.HEX),
    body = ProtoField.bytes("gsn_ib_mgmt.body", "Body"),
    mask = ProtoField.uint64("gsn_ib_mgmt.comp_mask", "Component mask", base.HEX),
    port_guid = ProtoField.uint64("gsn_ib_mgmt.port_guid", "Port GUID", base.HEX),
    node_guid = ProtoField.uint64("gsn_ib_mgmt.node_guid", "Node GUID", base.HEX),
    lid = ProtoField.uint16("gsn_ib_mgmt.lid", "LID", base.HEX),
    sm_lid = ProtoField.uint16("gsn_ib_mgmt.sm_lid", "SM LID", base.HEX),
    gid_prefix = ProtoField.uint64("gsn_ib_mgmt.gid_prefix", "GID prefix", base.HEX),
    rereg = ProtoField.uint8("gsn_ib_mgmt.client_reregister", "ClientReregister"),
    npkeys = ProtoField.uint8("gsn_ib_mgmt.pkeys", "P_Keys"),
    pkey_entry = ProtoField.uint16("gsn_ib_mgmt.pkey", "P_Key", base.HEX),
    -- PathRecord
    pr = ProtoField.bytes("gsn_ib_mgmt.path_record", "PathRecord"),
    pr_sid = ProtoField.uint64("gsn_ib_mgmt.pr.service_id", "ServiceID", base.HEX),
    pr_dgid = ProtoField.ipv6("gsn_ib_mgmt.pr.dgid", "DGID"),
    pr_sgid = ProtoField.ipv6("gsn_ib_mgmt.pr.sgid", "SGID"),
    pr_dlid = ProtoField.uint16("gsn_ib_mgmt.pr.dlid", "DLID", base.HEX),
    pr_slid = ProtoField.uint16("gsn_ib_mgmt.pr.slid", "SLID", base.HEX),
    pr_flow = ProtoField.uint32("gsn_ib_mgmt.pr.flow_label", "FlowLabel", base.HEX, nil, 0x0FFFFF00),
    pr_hop = ProtoField.uint32("gsn_ib_mgmt.pr.hop_limit", "HopLimit", base.DEC, nil, 0x000000FF),
    pr_tclass = ProtoField.uint8("gsn_ib_mgmt.pr.tclass", "TClass", base.HEX),
    pr_reversible = ProtoField.bool("gsn_ib_mgmt.pr.reversible", "Reversible", 8, nil, 0x80),
    pr_numb = ProtoField.uint8("gsn_ib_mgmt.pr.numb_path", "NumbPath", base.DEC, nil, 0x7F),
    pr_pkey = ProtoField.uint16("gsn_ib_mgmt.pr.pkey", "P_Key", base.HEX),
    pr_sl = ProtoField.uint16("gsn_ib_mgmt.pr.sl", "SL", base.DEC, nil, 0x000F),
    pr_mtu = ProtoField.uint8("gsn_ib_mgmt.pr.mtu", "MTU", base.DEC, nil, 0x3F),
    pr_rate = ProtoField.uint8("gsn_ib_mgmt.pr.rate", "Rate", base.DEC, nil, 0x3F),
    pr_life = ProtoField.uint8("gsn_ib_mgmt.pr.packet_lifetime", "PacketLifeTime", base.DEC, nil, 0x3F),
    pr_pref = ProtoField.uint8("gsn_ib_mgmt.pr.preference", "Preference"),
    -- MCMemberRecord
    mc = ProtoField.bytes("gsn_ib_mgmt.mcmember_record", "MCMemberRecord"),
    mc_mgid = ProtoField.ipv6("gsn_ib_mgmt.mc.mgid", "MGID"),
    mc_pgid = ProtoField.ipv6("gsn_ib_mgmt.mc.port_gid", "PortGID"),
    mc_qkey = ProtoField.uint32("gsn_ib_mgmt.mc.qkey", "Q_Key", base.HEX),
    mc_mlid = ProtoField.uint16("gsn_ib_mgmt.mc.mlid", "MLID", base.HEX),
    mc_mtu = ProtoField.uint8("gsn_ib_mgmt.mc.mtu", "MTU", base.DEC, nil, 0x3F),
    mc_tclass = ProtoField.uint8("gsn_ib_mgmt.mc.tclass", "TClass", base.HEX),
    mc_pkey = ProtoField.uint16("gsn_ib_mgmt.mc.pkey", "P_Key", base.HEX),
    mc_rate = ProtoField.uint8("gsn_ib_mgmt.mc.rate", "Rate", base.DEC, nil, 0x3F),
    mc_life = ProtoField.uint8("gsn_ib_mgmt.mc.packet_lifetime", "PacketLifeTime", base.DEC, nil, 0x3F),
    mc_sl = ProtoField.uint32("gsn_ib_mgmt.mc.sl", "SL", base.DEC, nil, 0xF0000000),
    mc_flow = ProtoField.uint32("gsn_ib_mgmt.mc.flow_label", "FlowLabel", base.HEX, nil, 0x0FFFFF00),
    mc_hop = ProtoField.uint32("gsn_ib_mgmt.mc.hop_limit", "HopLimit", base.DEC, nil, 0x000000FF),
    mc_scope = ProtoField.uint8("gsn_ib_mgmt.mc.scope", "Scope", base.DEC, nil, 0xF0),
    mc_join = ProtoField.uint8("gsn_ib_mgmt.mc.join_state", "JoinState", base.HEX, nil, 0x0F),
    mc_proxy = ProtoField.bool("gsn_ib_mgmt.mc.proxy_join", "ProxyJoin", 8, nil, 0x80),
    entries = ProtoField.uint16("gsn_ib_mgmt.entries", "Entries"),
    version_field = ProtoField.uint32("gsn_ib_mgmt.table_version", "Table version"),
    report_ports = ProtoField.uint8("gsn_ib_mgmt.report_ports", "Reported ports"),
}
local mlist = {}
for _, f in pairs(M) do mlist[#mlist + 1] = f end
mgmt.fields = mlist
local ME = ProtoExpert.new("gsn_ib_mgmt.malformed", "Malformed management datagram", expert.group.MALFORMED,
    expert.severity.ERROR)
mgmt.experts = { ME }
mgmt.prefs.port = Pref.uint("SM UDP port", SM_PORT, "UDP port of the subnet manager (ib-sm listen; 0: heuristic only)")

-- the failure of a malformed input, caught by the dissector and shown as expert info
local function fail(msg)
    error({ msg = msg }, 0)
end

local function message_of(err)
    return type(err) == "table" and err.msg or ("dissector error: " .. tostring(err))
end

-- UD packets ---------------------------------------------------------------------------------

local ethertype_table
local function ipoib(tvb, pinfo, tree, t)
    if tvb:len() < IPOIB_HEADER_BYTES then fail("payload shorter than the 4-byte IPoIB header") end
    local et = tvb(0, 2):uint()
    t:add(F.ipoib_type, tvb(0, 2))
    t:add(F.ipoib_rsvd, tvb(2, 2))
    local inner = tvb(IPOIB_HEADER_BYTES):tvb()
    local has_pw, pw = false, nil
    if et == ETHERTYPE_PACKETWAY_NATIVE then has_pw, pw = pcall(Dissector.get, "pktway") end -- gsn_pktway.lua
    local ok, err = pcall(function()
        if has_pw then
            pw:call(inner, pinfo, tree)
            return
        end
        ethertype_table = ethertype_table or DissectorTable.get("ethertype")
        if ethertype_table:try(et, inner, pinfo, tree) == 0 then
            Dissector.get("data"):call(inner, pinfo, tree)
        end
    end)
    if not ok then
        t:add_proto_expert_info(E.bad, string.format("the 0x%04x payload is malformed (%s)", et, tostring(err)))
    end
    return string.format("IPoIB 0x%04x", et)
end

local function ud(tvb, pinfo, tree, t)
    local n = tvb:len()
    if n < MIN_UD then fail(n .. " bytes is shorter than LRH + BTH + DETH + ICRC (" .. MIN_UD .. ")") end
    local raw = tvb:raw()
    local b0, b1 = raw:byte(1, 2)
    local lrh = t:add(ib, tvb(0, LRH_BYTES), "LRH")
    lrh:add(F.vl, tvb(0, 1))
    lrh:add(F.lver, tvb(0, 1))
    lrh:add(F.sl, tvb(1, 1))
    lrh:add(F.lnh, tvb(1, 1))
    lrh:add(F.dlid, tvb(2, 2))
    lrh:add(F.pktlen, tvb(4, 2))
    lrh:add(F.slid, tvb(6, 2))
    local dlid, slid, words = tvb(2, 2):uint(), tvb(6, 2):uint(), tvb(4, 2):uint()
    if band(b0, 0x0F) ~= 0 then fail("LVer " .. band(b0, 0x0F) .. " is not 0") end
    local lnh = band(b1, 0x03)
    if lnh ~= LNH_LOCAL and lnh ~= LNH_GLOBAL then fail("LNH " .. lnh .. " is not 2 (BTH) or 3 (GRH)") end
    if band(words, 0x07FF) * 4 ~= n or band(words, 0xF800) ~= 0 then
        fail(string.format("PktLen %d words is not the %d-byte datagram", band(words, 0x7FF), n))
    end
    local off = LRH_BYTES
    local global = lnh == LNH_GLOBAL
    if global then
        if n < MIN_UD + GRH_BYTES then fail(n .. " bytes is too short for a packet with a GRH") end
        local g = t:add(ib, tvb(off, GRH_BYTES), "GRH")
        g:add(F.ipver, tvb(off, 4))
        g:add(F.tclass, tvb(off, 4))
        g:add(F.flow, tvb(off, 4))
        g:add(F.paylen, tvb(off + 4, 2))
        g:add(F.nxthdr, tvb(off + 6, 1))
        g:add(F.hoplmt, tvb(off + 7, 1))
        g:add(F.sgid, tvb(off + 8, 16))
        g:add(F.dgid, tvb(off + 24, 16))
        if rshift(tvb(off, 1):uint(), 4) ~= 6 or tvb(off + 6, 1):uint() ~= GRH_NEXT_HEADER then
            fail("GRH IPVer is not 6 or NxtHdr is not 0x1b")
        end
        if tvb(off + 4, 2):uint() ~= n - LRH_BYTES - GRH_BYTES then fail("GRH PayLen does not match the packet") end
        off = off + GRH_BYTES
    end
    local bth = t:add(ib, tvb(off, BTH_BYTES), "BTH")
    bth:add(F.opcode, tvb(off, 1))
    bth:add(F.se, tvb(off + 1, 1))
    bth:add(F.migreq, tvb(off + 1, 1))
    bth:add(F.padcnt, tvb(off + 1, 1))
    bth:add(F.tver, tvb(off + 1, 1))
    bth:add(F.pkey, tvb(off + 2, 2))
    bth:add(F.dqpn, tvb(off + 5, 3))
    bth:add(F.ackreq, tvb(off + 8, 1))
    bth:add(F.psn, tvb(off + 9, 3))
    local opcode, pad, pkey = tvb(off, 1):uint(), rshift(band(tvb(off + 1, 1):uint(), 0x30), 4), tvb(off + 2, 2):uint()
    local dqpn = tvb(off + 5, 3):uint()
    if opcode ~= OPCODE_UD_SEND_ONLY then
        fail(string.format("opcode 0x%02x is not UD SEND Only (0x64)", opcode))
    end
    if band(tvb(off + 1, 1):uint(), 0x0F) ~= 0 then fail("TVer is not 0") end
    off = off + BTH_BYTES
    local deth = t:add(ib, tvb(off, DETH_BYTES), "DETH")
    deth:add(F.qkey, tvb(off, 4))
    deth:add(F.sqpn, tvb(off + 5, 3))
    local sqpn = tvb(off + 5, 3):uint()
    off = off + DETH_BYTES
    local stop = n - ICRC_BYTES - pad
    if stop < off then fail("pad count " .. pad .. " runs into the headers") end

    local got, calc = tvb(n - ICRC_BYTES, ICRC_BYTES):uint(), icrc(raw, n - ICRC_BYTES, global)
    local ci = t:add(F.icrc, tvb(n - ICRC_BYTES, ICRC_BYTES))
    ci:add(F.icrc_ok, tvb(n - ICRC_BYTES, ICRC_BYTES), got == calc):set_generated()
    if got ~= calc then
        ci:add(F.icrc_calc, tvb(n - ICRC_BYTES, ICRC_BYTES), calc):set_generated()
        ci:add_proto_expert_info(E.icrc, string.format("ICRC 0x%08x, computed 0x%08x", got, calc))
    end
    if pad > 0 then t:add(F.pad, tvb(stop, pad)) end
    local summary = string.format("UD 0x%04x > 0x%04x QP 0x%06x > 0x%06x P_Key 0x%04x", slid, dlid, sqpn, dqpn, pkey)
    if got ~= calc then summary = summary .. " [ICRC bad]" end
    t:append_text(": " .. summary)
    local ptvb = tvb(off, stop - off):tvb()
    local pt = t:add(F.payload, tvb(off, stop - off))
    local what
    if dqpn == QPN_SMI then
        if ptvb:len() ~= HELLO_BYTES then fail("a QP0 payload is not a " .. HELLO_BYTES .. "-byte hello") end
        pt:add(F.hello_type, ptvb(0, 1))
        pt:add(F.hello_guid, ptvb(1, 8))
        pt:add(F.hello_port, ptvb(9, 1))
        what = string.format("hello %s 0x%s port %d", NODE_TYPES[ptvb(0, 1):uint()] or "?", ptvb(1, 8):uint64():tohex(),
            ptvb(9, 1):uint())
    else
        what = ipoib(ptvb, pinfo, tree, pt)
    end
    return summary .. " " .. what, got ~= calc
end

function ib.dissector(tvb, pinfo, tree)
    local t = tree:add(ib, tvb())
    pinfo.cols.protocol = "IB UD"
    local ok, info, icrc_bad = pcall(ud, tvb, pinfo, tree, t)
    if ok then
        -- an upper layer (IP, ARP) may have set the columns: keep its Info, flag a bad ICRC
        if tostring(pinfo.cols.protocol) == "IB UD" then
            pinfo.cols.info = info
        elseif icrc_bad then
            pinfo.cols.info:prepend("[IB ICRC bad] ")
        end
    else
        local msg = message_of(info)
        t:add_proto_expert_info(E.bad, msg)
        pinfo.cols.protocol = "IB UD"
        pinfo.cols.info = "IB UD [malformed: " .. msg .. "]"
    end
    return tvb:len()
end

local function ud_heuristic(tvb, pinfo, tree)
    local n = tvb:len()
    if n < MIN_UD or n % 4 ~= 0 or band(tvb(0, 1):uint(), 0x0F) ~= 0 then return false end
    local lnh = band(tvb(1, 1):uint(), 0x03)
    if lnh ~= LNH_LOCAL and lnh ~= LNH_GLOBAL or tvb(4, 2):uint() * 4 ~= n then return false end
    local bth = LRH_BYTES + (lnh == LNH_GLOBAL and GRH_BYTES or 0)
    if n < bth + BTH_BYTES + DETH_BYTES + ICRC_BYTES or tvb(bth, 1):uint() ~= OPCODE_UD_SEND_ONLY then return false end
    ib.dissector(tvb, pinfo, tree)
    return true
end

-- management datagrams -------------------------------------------------------------------------

local function path_record(tvb, off, tree)
    local r = tree:add(M.pr, tvb(off, PATH_RECORD_BYTES))
    r:add(M.pr_sid, tvb(off, 8))
    r:add(M.pr_dgid, tvb(off + 8, 16))
    r:add(M.pr_sgid, tvb(off + 24, 16))
    r:add(M.pr_dlid, tvb(off + 40, 2))
    r:add(M.pr_slid, tvb(off + 42, 2))
    r:add(M.pr_flow, tvb(off + 44, 4))
    r:add(M.pr_hop, tvb(off + 44, 4))
    r:add(M.pr_tclass, tvb(off + 48, 1))
    r:add(M.pr_reversible, tvb(off + 49, 1))
    r:add(M.pr_numb, tvb(off + 49, 1))
    r:add(M.pr_pkey, tvb(off + 50, 2))
    r:add(M.pr_sl, tvb(off + 52, 2))
    r:add(M.pr_mtu, tvb(off + 54, 1))
    r:add(M.pr_rate, tvb(off + 55, 1))
    r:add(M.pr_life, tvb(off + 56, 1))
    r:add(M.pr_pref, tvb(off + 57, 1))
    return string.format(" DLID 0x%04x SLID 0x%04x P_Key 0x%04x", tvb(off + 40, 2):uint(), tvb(off + 42, 2):uint(),
        tvb(off + 50, 2):uint())
end

local function mcmember_record(tvb, off, tree)
    local r = tree:add(M.mc, tvb(off, MCMEMBER_RECORD_BYTES))
    r:add(M.mc_mgid, tvb(off, 16))
    r:add(M.mc_pgid, tvb(off + 16, 16))
    r:add(M.mc_qkey, tvb(off + 32, 4))
    r:add(M.mc_mlid, tvb(off + 36, 2))
    r:add(M.mc_mtu, tvb(off + 38, 1))
    r:add(M.mc_tclass, tvb(off + 39, 1))
    r:add(M.mc_pkey, tvb(off + 40, 2))
    r:add(M.mc_rate, tvb(off + 42, 1))
    r:add(M.mc_life, tvb(off + 43, 1))
    r:add(M.mc_sl, tvb(off + 44, 4))
    r:add(M.mc_flow, tvb(off + 44, 4))
    r:add(M.mc_hop, tvb(off + 44, 4))
    r:add(M.mc_scope, tvb(off + 48, 1))
    r:add(M.mc_join, tvb(off + 48, 1))
    r:add(M.mc_proxy, tvb(off + 49, 1))
    return string.format(" MGID %s MLID 0x%04x", tostring(tvb(off, 16):ipv6()), tvb(off + 36, 2):uint())
end

-- a body of exactly `size` bytes after an optional 8-byte component mask
local function record_body(tvb, tree, masked, size, decode, kind)
    local n = tvb:len() - MGMT_HEADER_BYTES
    local off = MGMT_HEADER_BYTES
    if masked then
        if n ~= 8 + size then fail(string.format("%s body of %d bytes is not mask + %d", kind, n, size)) end
        tree:add(M.mask, tvb(off, 8))
        off = off + 8
    elseif n ~= size then
        fail(string.format("%s body of %d bytes is not a %d-byte record", kind, n, size))
    end
    return decode(tvb, off, tree)
end

local function mgmt_body(tvb, tree, kind, status)
    local n = tvb:len() - MGMT_HEADER_BYTES
    local off = MGMT_HEADER_BYTES
    if n > 0 then tree:add(M.body, tvb(off, n)) end
    if kind == 1 then
        if n ~= 16 then fail("REGISTER body is not 16 bytes") end
        tree:add(M.port_guid, tvb(off, 8))
        tree:add(M.node_guid, tvb(off + 8, 8))
        return " port GUID 0x" .. tvb(off, 8):uint64():tohex()
    elseif kind == 2 and status == 0 then
        if n < 14 or n ~= 14 + 2 * tvb(off + 13, 1):uint() then fail("REGISTER_REPLY body does not fit its P_Keys") end
        tree:add(M.lid, tvb(off, 2))
        tree:add(M.sm_lid, tvb(off + 2, 2))
        tree:add(M.gid_prefix, tvb(off + 4, 8))
        tree:add(M.rereg, tvb(off + 12, 1))
        tree:add(M.npkeys, tvb(off + 13, 1))
        for i = 0, tvb(off + 13, 1):uint() - 1 do tree:add(M.pkey_entry, tvb(off + 14 + 2 * i, 2)) end
        return string.format(" LID 0x%04x", tvb(off, 2):uint())
    elseif kind == 3 then
        return record_body(tvb, tree, true, PATH_RECORD_BYTES, path_record, "PATH_GET")
    elseif kind == 4 and status == 0 then
        return record_body(tvb, tree, false, PATH_RECORD_BYTES, path_record, "PATH_REPLY")
    elseif kind == 5 or kind == 6 then
        return record_body(tvb, tree, true, MCMEMBER_RECORD_BYTES, mcmember_record, KINDS[kind])
    elseif kind == 7 and status == 0 then
        return record_body(tvb, tree, false, MCMEMBER_RECORD_BYTES, mcmember_record, "MC_REPLY")
    elseif kind == 8 then
        if n < 17 then fail("SWITCH_REPORT body shorter than 17 bytes") end
        tree:add(M.node_guid, tvb(off, 8))
        tree:add(M.report_ports, tvb(off + 16, 1))
        return string.format(" %d ports", tvb(off + 16, 1):uint())
    elseif kind == 9 or kind == 10 then
        if n < 6 then fail(KINDS[kind] .. " body shorter than 6 bytes") end
        tree:add(M.version_field, tvb(off, 4))
        tree:add(M.entries, tvb(off + 4, 2))
        return string.format(" version %d, %d entries", tvb(off, 4):uint(), tvb(off + 4, 2):uint())
    end
    return ""
end

local function dissect_mgmt(tvb, t)
    local n = tvb:len()
    if n < MGMT_HEADER_BYTES then fail(n .. " bytes is shorter than the 24-byte header") end
    t:add(M.magic, tvb(0, 2))
    t:add(M.version, tvb(2, 1))
    t:add(M.kind, tvb(3, 1))
    t:add(M.status, tvb(4, 2))
    t:add(M.reserved, tvb(6, 2))
    t:add(M.tid, tvb(8, 8))
    t:add(M.epoch, tvb(16, 8))
    if tvb(0, 2):uint() ~= MGMT_MAGIC then fail("magic is not 'IM'") end
    if tvb(2, 1):uint() ~= MGMT_VERSION then fail("version " .. tvb(2, 1):uint() .. " is not " .. MGMT_VERSION) end
    local kind, status = tvb(3, 1):uint(), tvb(4, 2):uint()
    if not KINDS[kind] then fail("unknown kind " .. kind) end
    if not STATUS[status] then fail("unknown status " .. status) end
    local info = KINDS[kind] .. (status ~= 0 and (" " .. STATUS[status]) or "") ..
        " tid 0x" .. tvb(8, 8):uint64():tohex()
    return info .. mgmt_body(tvb, t, kind, status)
end

function mgmt.dissector(tvb, pinfo, tree)
    local t = tree:add(mgmt, tvb())
    pinfo.cols.protocol = "IB SM"
    local ok, info = pcall(dissect_mgmt, tvb, t)
    if ok then
        pinfo.cols.info = info
        t:append_text(": " .. info)
    else
        local msg = message_of(info)
        t:add_proto_expert_info(ME, msg)
        pinfo.cols.info = "IB SM [malformed: " .. msg .. "]"
    end
    return tvb:len()
end

local function mgmt_heuristic(tvb, pinfo, tree)
    if tvb:len() < MGMT_HEADER_BYTES or tvb(0, 2):uint() ~= MGMT_MAGIC or tvb(2, 1):uint() ~= MGMT_VERSION or
        not KINDS[tvb(3, 1):uint()] then
        return false
    end
    mgmt.dissector(tvb, pinfo, tree)
    return true
end

ib:register_heuristic("udp", ud_heuristic)
mgmt:register_heuristic("udp", mgmt_heuristic)
local registered_ports, registered_sm
local function register_ports()
    local udp = DissectorTable.get("udp.port")
    if registered_ports and registered_ports ~= "" then udp:remove(registered_ports, ib) end
    registered_ports = ib.prefs.ports
    if registered_ports ~= "" then udp:add(registered_ports, ib) end
end
local function register_sm()
    local udp = DissectorTable.get("udp.port")
    if registered_sm and registered_sm ~= 0 then udp:remove(registered_sm, mgmt) end
    registered_sm = mgmt.prefs.port
    if registered_sm ~= 0 then udp:add(registered_sm, mgmt) end
end
ib.prefs_changed = register_ports
mgmt.prefs_changed = register_sm
register_ports()
register_sm()
