-- GSN UDP cable, micropackets, reassembled GSN Messages (LLC/SNAP) and Admin.
-- Layouts: ../shared/spec/gsn-harp.md §1-§4 and daemons/wire/{shim,micropacket,message,admin}.py
-- (the Python codecs are the reference; tests/netns/test_dissectors.py checks both agree).
--
-- Registration: UDP port preference "gsn.udp_port" (default 6400, the project's default cable
-- port) and a heuristic on every UDP datagram (magic 0x4753, version 1, room for a micropacket).
-- Messages are handed to Wireshark's "ethertype" table, so IPv4/IPv6/ARP decode; HIPARP
-- (EtherType 0x0806 with ar$hrd 28) goes to the "harp" dissector of gsn_harp.lua.

local bit = require("gsn_bit") -- band, bor, bxor, lshift, rshift on any Lua Wireshark embeds
local band, bxor, lshift, rshift = bit.band, bit.bxor, bit.lshift, bit.rshift

-- wire constants (daemons/constants.py)
local SHIM_MAGIC, SHIM_VERSION, SHIM_BYTES, SHIM_FLAG_SEQUENCED = 0x4753, 1, 32, 0x01
local MP_BYTES, MP_DATA = 40, 32
local MAX_DATAGRAM_MPS = 1600
local CRC_INIT = 0xFFFF
local VC_MAX_DATA_MPS = { [0] = 68, 4100, 4100, 134217728 }
local M_LEN_MAX = 4294967295
local LLC_SNAP = "\170\170\003\000\000\000"
local ETHERTYPE_ARP = 0x0806
local HRD_HIPARP = 28

local MP_TYPES = { [0] = "NULL", "DATA", "HEADER", "ADMIN", "CREDIT", "RESET", "RESET_ACK", "INIT", "INIT_ACK" }
local T_DATA, T_HEADER, T_ADMIN, T_CREDIT = 1, 2, 3, 4
local SEQUENCED = { [T_DATA] = true, [T_HEADER] = true, [T_ADMIN] = true, [T_CREDIT] = true }

local ADMIN_CMDS = {
    [0x01] = "ARE_YOU_THERE", [0x02] = "SET_ELEMENT_ADDRESS", [0x03] = "INITIALIZE", [0x04] = "WHAT_ARE_YOU",
    [0x05] = "ASSIGN_ULA", [0x06] = "READ_REGISTER", [0x07] = "WRITE_REGISTER", [0x08] = "LIST_ULAS",
    [0x09] = "CHANGE_ROUTE", [0x0A] = "GET_PORT", [0x81] = "I_AM_HERE", [0x82] = "ELEMENT_ADDRESS_STATUS",
    [0x83] = "INITIALIZE_DONE", [0x84] = "I_AM", [0x85] = "HERE_IS_ULA", [0x86] = "REGISTER_DATA",
    [0x87] = "WRITE_STATUS", [0x88] = "ULA_LIST", [0x89] = "ROUTE_STATUS", [0x8A] = "PORT_ID",
    [0xFF] = "INVALID_ADMIN",
}
local ADMIN_STATUS = { [0] = "OK", "NOT_SUPPORTED", "BAD_ARGUMENT", "NO_SUCH_ULA" }
local ELEMENT_TYPES = { [1] = "ENDPOINT", [2] = "SWITCH" }
local ETHERTYPES = { [0x0800] = "IPv4", [0x0806] = "ARP/HARP", [0x86DD] = "IPv6", [0x8181] = "ST",
    [0x88B6] = "PacketWay", [0x88B7] = "OUI extended (gsnd drop notice)" }

-- CRC-16/IBM-3740: poly 0x1021, init 0xFFFF, no reflection (daemons/wire/crc.py)
local CRC_TABLE = {}
for i = 0, 255 do
    local c = lshift(i, 8)
    for _ = 1, 8 do
        if band(c, 0x8000) ~= 0 then c = bxor(lshift(c, 1), 0x1021) else c = lshift(c, 1) end
        c = band(c, 0xFFFF)
    end
    CRC_TABLE[i] = c
end

-- CRC_TABLE16[c] = the register c after two zero bytes; feeding the bytes b1 b2 to a
-- register c is then CRC_TABLE16[c XOR (b1 b2)]: one step per 16 bits
local CRC_TABLE16 = {}
for c = 0, 65535 do
    local r = bxor(band(lshift(c, 8), 0xFFFF), CRC_TABLE[rshift(c, 8)])
    CRC_TABLE16[c] = bxor(band(lshift(r, 8), 0xFFFF), CRC_TABLE[rshift(r, 8)])
end

local function crc16(s, crc, first, last)
    local k = first
    while k < last do
        local b1, b2 = s:byte(k, k + 1)
        crc = CRC_TABLE16[bxor(crc, b1 * 256 + b2)]
        k = k + 2
    end
    if k == last then
        crc = bxor(band(lshift(crc, 8), 0xFFFF), CRC_TABLE[bxor(rshift(crc, 8), s:byte(k))])
    end
    return crc
end

-- ---------------------------------------------------------------------------------------------
local gsn = Proto("gsn", "GSN UDP cable")
local gmp = Proto("gsn_mp", "GSN micropacket")
local gmsg = Proto("gsn_msg", "GSN Message")
local gadm = Proto("gsn_admin", "GSN Admin")

local F = {
    magic = ProtoField.uint16("gsn.magic", "Magic", base.HEX),
    version = ProtoField.uint8("gsn.version", "Version"),
    flags = ProtoField.uint8("gsn.flags", "Flags", base.HEX),
    sequenced = ProtoField.bool("gsn.flags.sequenced", "Sequenced", 8, nil, SHIM_FLAG_SEQUENCED),
    cable_id = ProtoField.uint32("gsn.cable_id", "Cable id", base.DEC_HEX),
    src_nonce = ProtoField.uint32("gsn.src_nonce", "Source nonce", base.HEX),
    dst_nonce = ProtoField.uint32("gsn.dst_nonce", "Destination nonce", base.HEX),
    seq = ProtoField.uint64("gsn.seq", "Sequence (first micropacket)"),
    ack = ProtoField.uint64("gsn.ack", "Cumulative ack (next expected)"),
    count = ProtoField.uint32("gsn.micropackets", "Micropackets"),
    trailer = ProtoField.bytes("gsn.trailer", "Trailer"),
    -- the 32-byte trailer of an authenticated cable (daemons/wire/cableauth.py); the tag
    -- needs the cable's key to check, so it is shown, not verified
    auth_session = ProtoField.uint64("gsn.auth.session", "Auth session (sender's clock at cable open, ns)"),
    auth_counter = ProtoField.uint64("gsn.auth.counter", "Auth counter"),
    auth_tag = ProtoField.bytes("gsn.auth.tag", "Auth tag (HMAC-SHA256, first 16 bytes)"),
}
local M = {
    data = ProtoField.bytes("gsn.mp.data", "Data"),
    ctrl = ProtoField.uint64("gsn.mp.ctrl", "Control word", base.HEX),
    vc = ProtoField.uint32("gsn.mp.vc", "VC", base.DEC, nil, 0xC0000000),
    type = ProtoField.uint32("gsn.mp.type", "TYPE", base.DEC, MP_TYPES, 0x3C000000),
    tail = ProtoField.uint32("gsn.mp.tail", "TAIL", base.DEC, nil, 0x02000000),
    error = ProtoField.uint32("gsn.mp.error", "ERROR", base.DEC, nil, 0x01000000),
    vcr = ProtoField.uint32("gsn.mp.vcr", "VCR (credited VC)", base.DEC, nil, 0x00C00000),
    cr = ProtoField.uint32("gsn.mp.cr", "CR (credits)", base.DEC, nil, 0x003F0000),
    rseq = ProtoField.uint32("gsn.mp.rseq", "RSEQ", base.DEC, nil, 0x0000FF00),
    tseq = ProtoField.uint32("gsn.mp.tseq", "TSEQ", base.DEC, nil, 0x000000FF),
    ecrc = ProtoField.uint16("gsn.mp.ecrc", "ECRC", base.HEX),
    lcrc = ProtoField.uint16("gsn.mp.lcrc", "LCRC", base.HEX),
    lcrc_ok = ProtoField.bool("gsn.mp.lcrc_ok", "LCRC correct"),
    lcrc_calc = ProtoField.uint16("gsn.mp.lcrc_calc", "LCRC computed", base.HEX),
    wseq = ProtoField.uint32("gsn.mp.seq", "Wide sequence (low 32 bits)"),
    status = ProtoField.string("gsn.mp.status", "Receiver"),
    sack = ProtoField.bytes("gsn.mp.sack", "SACK (selective ack)"),
    sack_start = ProtoField.uint32("gsn.mp.sack.start", "Range start (offset from the shim's ack)"),
    sack_end = ProtoField.uint32("gsn.mp.sack.end", "Range end (exclusive, offset from the shim's ack)"),
}
local G = {
    vc = ProtoField.uint8("gsn.msg.vc", "VC"),
    d_ula = ProtoField.ether("gsn.msg.d_ula", "D_ULA"),
    s_ula = ProtoField.ether("gsn.msg.s_ula", "S_ULA"),
    m_len = ProtoField.uint32("gsn.msg.m_len", "M_len"),
    dsap = ProtoField.uint8("gsn.msg.llc.dsap", "DSAP", base.HEX),
    ssap = ProtoField.uint8("gsn.msg.llc.ssap", "SSAP", base.HEX),
    ctl = ProtoField.uint8("gsn.msg.llc.ctl", "Control", base.HEX),
    oui = ProtoField.uint24("gsn.msg.snap.oui", "OUI", base.HEX),
    ethertype = ProtoField.uint16("gsn.msg.ethertype", "EtherType", base.HEX, ETHERTYPES),
    payload = ProtoField.bytes("gsn.msg.payload", "Payload"),
    fill = ProtoField.bytes("gsn.msg.fill", "Fill"),
    mps = ProtoField.uint32("gsn.msg.micropackets", "Micropackets"),
    first = ProtoField.framenum("gsn.msg.first_frame", "First micropacket in frame"),
    ecrc_ok = ProtoField.bool("gsn.msg.ecrc_ok", "ECRC correct"),
    ecrc_calc = ProtoField.uint16("gsn.msg.ecrc_calc", "ECRC computed", base.HEX),
}
local A = {
    command = ProtoField.uint8("gsn.admin.command", "COMMAND", base.HEX, ADMIN_CMDS),
    hop = ProtoField.uint8("gsn.admin.hop_count", "HOP_COUNT"),
    init_hops = ProtoField.uint8("gsn.admin.init_hops", "INIT_HOPS"),
    route_idx = ProtoField.uint8("gsn.admin.route_idx", "ROUTE_IDX"),
    xid = ProtoField.uint32("gsn.admin.xid", "XID", base.HEX),
    route = ProtoField.bytes("gsn.admin.route", "ROUTE"),
    status = ProtoField.uint8("gsn.admin.status", "STATUS", base.DEC, ADMIN_STATUS),
    args = ProtoField.bytes("gsn.admin.args", "ARGS"),
    etype = ProtoField.uint8("gsn.admin.element_type", "Element type", base.DEC, ELEMENT_TYPES),
    ports = ProtoField.uint8("gsn.admin.ports", "Ports"),
    ula = ProtoField.ether("gsn.admin.ula", "ULA"),
    index = ProtoField.uint16("gsn.admin.index", "Index"),
    total = ProtoField.uint16("gsn.admin.total", "Total"),
    port = ProtoField.uint16("gsn.admin.port", "Port"),
    more = ProtoField.uint8("gsn.admin.more", "More"),
    address = ProtoField.uint32("gsn.admin.address", "Address", base.HEX),
    reg_data = ProtoField.uint64("gsn.admin.data", "Register data", base.HEX),
    offending = ProtoField.uint8("gsn.admin.offending", "Offending command", base.HEX, ADMIN_CMDS),
}
for _, t in ipairs({ F, M, G, A }) do
    local list = {}
    for _, f in pairs(t) do list[#list + 1] = f end
    if t == F then gsn.fields = list elseif t == M then gmp.fields = list
    elseif t == G then gmsg.fields = list else gadm.fields = list end
end

local CTRL_BITS = { M.vc, M.type, M.tail, M.error, M.vcr, M.cr, M.rseq, M.tseq } -- bit fields of bytes 32-35

local E = {
    shim = ProtoExpert.new("gsn.bad_shim", "Malformed cable shim", expert.group.MALFORMED, expert.severity.ERROR),
    lcrc = ProtoExpert.new("gsn.lcrc_bad", "LCRC mismatch", expert.group.CHECKSUM, expert.severity.ERROR),
    ecrc = ProtoExpert.new("gsn.ecrc_bad", "ECRC mismatch", expert.group.CHECKSUM, expert.severity.ERROR),
    seqn = ProtoExpert.new("gsn.sequence", "Sequence anomaly", expert.group.SEQUENCE, expert.severity.WARN),
    proto = ProtoExpert.new("gsn.protocol", "GSN protocol error", expert.group.PROTOCOL, expert.severity.WARN),
    msg = ProtoExpert.new("gsn.bad_message", "Malformed GSN Message", expert.group.MALFORMED, expert.severity.ERROR),
    trailer = ProtoExpert.new("gsn.trailer_present", "Bytes after the last micropacket", expert.group.PROTOCOL,
        expert.severity.NOTE),
}
gsn.experts = { E.shim, E.lcrc, E.ecrc, E.seqn, E.proto, E.msg, E.trailer }

local AUTH_TRAILER_BYTES = 32 -- session(8) counter(8) tag(16): 32 + 40k + 32 bytes

gsn.prefs.udp_port = Pref.uint("Cable UDP port", 6400, "UDP port decoded as a GSN cable (0: heuristic only)")
gsn.prefs.trailer_bytes = Pref.uint("Trailer bytes", 0,
    "Bytes at the end of every cable datagram that are a trailer (0: whatever follows the last whole micropacket)")

-- ---------------------------------------------------------------------------------------------
-- Reassembly state, built on the first pass and kept per frame for later passes.
local links -- direction key -> { src_nonce, dst_nonce, expected, open[vc], unseen (after a snap-length cut) }
local frames -- "frame/segment" -> analysis
local function reset()
    links, frames = {}, {}
end
gsn.init = reset
reset()

local TWO32 = 4294967296

local function direction_key(pinfo, cable)
    return tostring(pinfo.src) .. ":" .. pinfo.src_port .. ">" .. tostring(pinfo.dst) .. ":" .. pinfo.dst_port ..
        "#" .. cable
end

-- Walk one datagram's micropackets the way the receiving link and reassembler do
-- (daemons/link/link.py receive, daemons/link/reassembly.py).
local function analyse(raw, count, whole, sequenced, key, seq_lo, src_nonce, dst_nonce, frame)
    -- kept per frame for later passes, compact: a status string per micropacket (shared,
    -- interned), and sparse tables for what is rare
    local res = { status = {}, bad_lcrc = {}, note = {}, admin_ecrc_ok = {}, message = {}, notes = {},
        seq_lo = seq_lo }
    local link = links[key]
    if not link then
        link = { src_nonce = src_nonce, dst_nonce = dst_nonce, open = {} }
        links[key] = link
    elseif sequenced and (link.src_nonce ~= src_nonce or link.dst_nonce ~= dst_nonce) then
        -- a new link incarnation: the receiver starts afresh
        if next(link.open) then res.notes[#res.notes + 1] = "link reset (nonces changed): open Messages dropped" end
        link.src_nonce, link.dst_nonce, link.open, link.expected = src_nonce, dst_nonce, {}, nil
    end
    -- LCRC of every micropacket; in a sequenced batch those after the first bad one are dropped
    local first_bad
    for i = 0, count - 1 do
        local o = SHIM_BYTES + i * MP_BYTES
        local calc = crc16(raw, CRC_INIT, o + 1, o + 38)
        local stored = raw:byte(o + 39) * 256 + raw:byte(o + 40)
        if calc ~= stored then
            res.bad_lcrc[i] = calc
            first_bad = first_bad or i
        end
    end
    -- the link drops a whole sequenced batch whose TYPEs or TSEQs do not fit it
    local batch_drop
    if sequenced then
        for i = 0, (first_bad or count) - 1 do
            local o = SHIM_BYTES + i * MP_BYTES
            local typ = band(rshift(raw:byte(o + 33), 2), 0xF)
            if not SEQUENCED[typ] then
                batch_drop = "dropped (batch holds an unsequenced TYPE)"
            elseif raw:byte(o + 36) ~= (seq_lo + i) % 256 and not batch_drop then
                batch_drop = "dropped (batch's TSEQs do not follow the shim's sequence)"
            end
        end
    end
    if sequenced and link.expected then
        local ahead = (seq_lo - link.expected) % TWO32
        if ahead ~= 0 and ahead < TWO32 / 2 then
            res.notes[#res.notes + 1] = string.format("%d micropackets not captured before this one " ..
                "(or lost or reordered on the wire: the receiver keeps this datagram until the hole is filled); " ..
                "open Messages dropped, resynchronised", ahead)
            link.open = {}
            link.expected = seq_lo
        end
    elseif sequenced then
        link.expected = seq_lo
    end
    for i = 0, count - 1 do
        local lcrc_ok = res.bad_lcrc[i] == nil
        local o = SHIM_BYTES + i * MP_BYTES
        local hi = ((raw:byte(o + 33) * 256 + raw:byte(o + 34)) * 256 + raw:byte(o + 35)) * 256 + raw:byte(o + 36)
        local vc, typ = rshift(hi, 30), band(rshift(hi, 26), 0xF)
        local tail, err = band(rshift(hi, 25), 1), band(rshift(hi, 24), 1)
        local ecrc = raw:byte(o + 37) * 256 + raw:byte(o + 38)
        local status
        if first_bad and (i == first_bad or (sequenced and i > first_bad) or not lcrc_ok) then
            status = lcrc_ok and "dropped (after an LCRC error in this batch)" or "dropped (LCRC error)"
        elseif batch_drop then
            status = batch_drop
        elseif not sequenced and SEQUENCED[typ] then
            status = "protocol error: sequenced TYPE in an unsequenced batch"
        elseif sequenced and (seq_lo + i - link.expected) % TWO32 ~= 0 then
            status = "duplicate (retransmission)"
        elseif not sequenced then
            status = "control"
        else
            link.expected = (link.expected + 1) % TWO32
            status = "accepted"
            local open = link.open[vc]
            if typ == T_HEADER or typ == T_ADMIN then
                if open then
                    res.note[i] = MP_TYPES[typ] .. " while a Message is open on VC" .. vc ..
                        ": the open Message is discarded"
                    link.open[vc] = nil
                end
                if typ == T_ADMIN then
                    local calc = crc16(raw, CRC_INIT, o + 1, o + MP_DATA)
                    res.admin_ecrc_ok[i] = calc == ecrc
                else
                    link.unseen = nil -- a Message seen from its start again
                    open = { parts = {}, ecrc = CRC_INIT, first = frame, error = 0 }
                    link.open[vc] = open
                end
            elseif typ == T_DATA and not open and not link.unseen then
                res.note[i] = "DATA with no Message open on VC" .. vc .. ": discarded"
            end
            if typ == T_HEADER or typ == T_DATA then
                if open then
                    open.parts[#open.parts + 1] = raw:sub(o + 1, o + MP_DATA)
                    open.ecrc = crc16(raw, open.ecrc, o + 1, o + MP_DATA)
                    if err == 1 then open.error = 1 end
                    if tail == 1 then
                        res.message[i] = { data = table.concat(open.parts), vc = vc, mps = #open.parts,
                            first = open.first, ecrc_calc = open.ecrc, ecrc_ok = open.ecrc == ecrc, error = open.error }
                        link.open[vc] = nil
                    end
                end
            end
        end
        res.status[i] = status
    end
    if whole > count and sequenced and not first_bad and not batch_drop then
        -- cut by the capture's snap length: the receiver took micropackets not seen here
        link.expected, link.open, link.unseen = (seq_lo + whole) % TWO32, {}, true
    end
    local ctl0 = {}
    for i = 0, count - 1 do ctl0[i + 1] = raw:byte(SHIM_BYTES + i * MP_BYTES + 33) end
    res.ctl0 = string.char(table.unpack(ctl0)) -- first control byte (VC, TYPE, TAIL, ERROR) of each
    return res
end

-- ---------------------------------------------------------------------------------------------
local function dissect_admin(tvb, pinfo, tree)
    local t = tree:add(gadm, tvb)
    local cmd = tvb(0, 1):uint()
    t:add(A.command, tvb(0, 1))
    t:add(A.hop, tvb(1, 1))
    t:add(A.init_hops, tvb(2, 1))
    t:add(A.route_idx, tvb(3, 1))
    t:add(A.xid, tvb(4, 4))
    t:add(A.route, tvb(8, 7))
    t:add(A.status, tvb(15, 1))
    local at = t:add(A.args, tvb(16, 16))
    if cmd == 0x04 or cmd == 0x84 then
        if cmd == 0x84 then
            at:add(A.etype, tvb(16, 1))
            at:add(A.ports, tvb(17, 1))
            at:add(A.ula, tvb(18, 6))
        end
    elseif cmd == 0x05 or cmd == 0x85 or cmd == 0x0A then
        at:add(A.ula, tvb(16, 6))
    elseif cmd == 0x8A or cmd == 0x09 or cmd == 0x89 then
        at:add(A.ula, tvb(16, 6))
        at:add(A.port, tvb(22, 2))
    elseif cmd == 0x08 then
        at:add(A.index, tvb(16, 2))
    elseif cmd == 0x88 then
        at:add(A.index, tvb(16, 2))
        at:add(A.total, tvb(18, 2))
        at:add(A.ula, tvb(20, 6))
        at:add(A.port, tvb(26, 2))
        at:add(A.more, tvb(28, 1))
    elseif cmd == 0x02 or cmd == 0x82 then
        at:add(A.address, tvb(16, 4))
    elseif cmd == 0x06 or cmd == 0x07 or cmd == 0x86 or cmd == 0x87 then
        at:add(A.address, tvb(16, 4))
        at:add(A.reg_data, tvb(20, 8))
    elseif cmd == 0xFF then
        at:add(A.offending, tvb(16, 1))
    end
    if tvb(3, 1):uint() > 7 then
        t:add_proto_expert_info(E.proto, "ROUTE_IDX beyond the 7 route slots")
    end
    t:append_text(": " .. (ADMIN_CMDS[cmd] or string.format("unknown command 0x%02x", cmd)))
    return ADMIN_CMDS[cmd] or "Admin ?"
end

local ethertype_table
local function dissect_message(m, pinfo, tree)
    local mtvb = ByteArray.new(m.data, true):tvb("GSN Message")
    local t = tree:add(gmsg, mtvb())
    t:add(G.vc, m.vc):set_generated()
    t:add(G.mps, m.mps):set_generated()
    t:add(G.first, m.first):set_generated()
    local et = t:add(G.ecrc_ok, m.ecrc_ok)
    et:set_generated()
    t:add(G.ecrc_calc, m.ecrc_calc):set_generated()
    if not m.ecrc_ok then et:add_proto_expert_info(E.ecrc, "ECRC mismatch: the destination discards this Message") end
    if m.error == 1 then t:add_proto_expert_info(E.proto, "ERROR bit set: the destination discards this Message") end
    local len = mtvb:len()
    if len < 24 then
        t:add_proto_expert_info(E.msg, "shorter than MAC header + LLC/SNAP")
        return "GSN Message (short)"
    end
    t:add(G.d_ula, mtvb(0, 6))
    t:add(G.s_ula, mtvb(6, 6))
    local ml = t:add(G.m_len, mtvb(12, 4))
    t:add(G.dsap, mtvb(16, 1))
    t:add(G.ssap, mtvb(17, 1))
    t:add(G.ctl, mtvb(18, 1))
    t:add(G.oui, mtvb(19, 3))
    t:add(G.ethertype, mtvb(22, 2))
    local m_len = mtvb(12, 4):uint()
    local ethertype = mtvb(22, 2):uint()
    local info = string.format("VC%d %s > %s %s", m.vc, tostring(mtvb(6, 6):ether()), tostring(mtvb(0, 6):ether()),
        ETHERTYPES[ethertype] or string.format("0x%04x", ethertype))
    local bad
    if m.data:sub(17, 22) ~= LLC_SNAP then
        bad = "LLC/SNAP is not AA-AA-03-00-00-00"
    elseif m_len < 8 then
        bad = "M_len " .. m_len .. " is shorter than the LLC/SNAP header"
    elseif math.ceil((16 + m_len) / 32) ~= m.mps then
        bad = string.format("M_len %d does not match %d micropackets", m_len, m.mps)
    elseif m_len > math.min(16 + 32 * VC_MAX_DATA_MPS[m.vc], M_LEN_MAX) then
        bad = string.format("M_len %d exceeds the VC%d limit", m_len, m.vc)
    end
    if bad then
        ml:add_proto_expert_info(E.msg, bad)
        return info .. " [malformed]"
    end
    local plen = m_len - 8
    local ptvb = mtvb(24, plen):tvb()
    if 16 + m_len < len then t:add(G.fill, mtvb(16 + m_len)) end
    if not m.ecrc_ok or m.error == 1 then
        t:add(G.payload, mtvb(24, plen))
        return info .. " [discarded]"
    end
    pinfo.cols.info = ""
    local ok, err = pcall(function()
        local harp = ethertype == ETHERTYPE_ARP and plen >= 2 and ptvb(0, 2):uint() == HRD_HIPARP and
            Dissector.get("harp")
        if harp then
            harp:call(ptvb, pinfo, tree)
        else
            ethertype_table = ethertype_table or DissectorTable.get("ethertype")
            if ethertype_table:try(ethertype, ptvb, pinfo, tree) == 0 then
                Dissector.get("data"):call(ptvb, pinfo, tree)
            end
        end
    end)
    if not ok then
        t:add_proto_expert_info(E.msg, string.format("the 0x%04x payload is malformed (%s)", ethertype, tostring(err)))
    end
    local upper = tostring(pinfo.cols.info)
    if upper ~= "" then info = string.format("VC%d %s", m.vc, upper) end
    return info
end

-- one cable datagram; returns the text for the Info column
local function dissect_datagram(tvb, pinfo, tree, segment)
    local len = tvb:len()
    local t = tree:add(gsn, tvb())
    if len < SHIM_BYTES then
        t:add_proto_expert_info(E.shim, "datagram of " .. len .. " bytes is shorter than the 32-byte shim")
        return "GSN cable: short datagram"
    end
    t:add(F.magic, tvb(0, 2))
    t:add(F.version, tvb(2, 1))
    local ft = t:add(F.flags, tvb(3, 1))
    ft:add(F.sequenced, tvb(3, 1))
    t:add(F.cable_id, tvb(4, 4))
    t:add(F.src_nonce, tvb(8, 4))
    t:add(F.dst_nonce, tvb(12, 4))
    t:add(F.seq, tvb(16, 8))
    t:add(F.ack, tvb(24, 8))
    local magic, version, flags = tvb(0, 2):uint(), tvb(2, 1):uint(), tvb(3, 1):uint()
    local problem
    if magic ~= SHIM_MAGIC then
        problem = string.format("magic 0x%04x is not 0x%04x", magic, SHIM_MAGIC)
    elseif version ~= SHIM_VERSION then
        problem = "unsupported version " .. version
    elseif band(flags, 0xFE) ~= 0 then
        problem = string.format("unknown flag bits 0x%02x", flags)
    end
    local trailer = gsn.prefs.trailer_bytes
    local full = tvb:reported_len()
    if trailer == 0 or trailer > full - SHIM_BYTES then trailer = (full - SHIM_BYTES) % MP_BYTES end
    local whole = math.floor((full - SHIM_BYTES - trailer) / MP_BYTES) -- micropackets sent
    local count = math.min(whole, math.floor((len - SHIM_BYTES) / MP_BYTES)) -- and captured
    if full > len then
        t:add_proto_expert_info(E.trailer, string.format("the capture kept %d of %d bytes: %d of %d micropackets",
            len, full, count, whole))
        trailer = math.max(0, len - SHIM_BYTES - whole * MP_BYTES)
    end
    if not problem and (whole == 0 or whole > MAX_DATAGRAM_MPS) then
        problem = whole .. " micropackets (1.." .. MAX_DATAGRAM_MPS .. " allowed)"
    end
    t:add(F.count, whole):set_generated()
    if trailer == AUTH_TRAILER_BYTES and full == len then
        local a = t:add(F.trailer, tvb(len - trailer, trailer))
        a:append_text(" (authenticated cable)")
        a:add(F.auth_session, tvb(len - 32, 8))
        a:add(F.auth_counter, tvb(len - 24, 8))
        a:add(F.auth_tag, tvb(len - 16, 16))
    elseif trailer > 0 then
        t:add(F.trailer, tvb(len - trailer, trailer)):add_proto_expert_info(E.trailer,
            trailer .. " bytes after the last micropacket")
    end
    if problem then
        t:add_proto_expert_info(E.shim, problem)
        return "GSN cable: " .. problem
    end
    local sequenced = band(flags, SHIM_FLAG_SEQUENCED) ~= 0
    local res = frames[pinfo.number .. "/" .. segment]
    if not res then
        local raw = tvb:raw(0, SHIM_BYTES + count * MP_BYTES)
        res = analyse(raw, count, whole, sequenced, direction_key(pinfo, tvb(4, 4):uint()), tvb(20, 4):uint(),
            tvb(8, 4):uint(), tvb(12, 4):uint(), pinfo.number)
        frames[pinfo.number .. "/" .. segment] = res
    end
    for _, note in ipairs(res.notes) do t:add_proto_expert_info(E.seqn, note) end
    t:append_text(string.format(", cable %d, %d micropackets", tvb(4, 4):uint(), count))
    local infos, types = {}, {}
    for i = 0, count - 1 do
        local o = SHIM_BYTES + i * MP_BYTES
        local b = res.ctl0:byte(i + 1)
        local bad = res.bad_lcrc[i]
        local typ, status = band(rshift(b, 2), 0xF), res.status[i]
        types[MP_TYPES[typ] or "reserved"] = true
        local mt = t:add(gmp, tvb(o, MP_BYTES), string.format("GSN micropacket %d: %s VC%d", i,
            MP_TYPES[typ] or string.format("reserved 0x%x", typ), rshift(b, 6)))
        local dt = mt:add(M.data, tvb(o, MP_DATA))
        if typ == 0 and not sequenced and tvb(o, MP_DATA):bytes():tohex() ~= string.rep("00", MP_DATA) then
            -- a SACK NULL: 4 x (u32 start, u32 end) offsets from the shim's ack, (0, 0) unused
            local sk = dt:add(M.sack, tvb(o, MP_DATA))
            for k = 0, 3 do
                if tvb(o + 8 * k, 8):bytes():tohex() ~= string.rep("00", 8) then
                    sk:add(M.sack_start, tvb(o + 8 * k, 4))
                    sk:add(M.sack_end, tvb(o + 8 * k + 4, 4))
                end
            end
            infos[#infos + 1] = "SACK"
        end
        local ct = mt:add(M.ctrl, tvb(o + 32, 8))
        local cw = tvb(o + 32, 4)
        for k = 1, #CTRL_BITS do ct:add(CTRL_BITS[k], cw) end
        ct:add(M.ecrc, tvb(o + 36, 2))
        ct:add(M.lcrc, tvb(o + 38, 2))
        local lt = mt:add(M.lcrc_ok, bad == nil)
        lt:set_generated()
        if bad then
            mt:add(M.lcrc_calc, bad):set_generated()
            lt:add_proto_expert_info(E.lcrc, string.format("LCRC mismatch (computed 0x%04x)", bad))
            infos[#infos + 1] = "LCRC ERROR"
        end
        if not MP_TYPES[typ] then mt:add_proto_expert_info(E.proto, string.format("reserved TYPE 0x%x", typ)) end
        if sequenced then mt:add(M.wseq, (res.seq_lo + i) % TWO32):set_generated() end
        local st = mt:add(M.status, status)
        st:set_generated()
        if status ~= "accepted" and status ~= "control" then
            if status:find("^protocol") or status:find("^dropped %(batch") then
                st:add_proto_expert_info(E.proto, status)
            elseif status:find("^duplicate") then st:add_proto_expert_info(E.seqn, status) end
        end
        if res.note[i] then mt:add_proto_expert_info(E.proto, res.note[i]) end
        if typ == T_ADMIN then
            local atvb = tvb(o, MP_DATA):tvb()
            local ok, name = pcall(dissect_admin, atvb, pinfo, mt)
            if ok then
                infos[#infos + 1] = "Admin " .. name
            else
                mt:add_proto_expert_info(E.msg, "dissector error: " .. tostring(name))
            end
            local admin_ok = res.admin_ecrc_ok[i]
            if admin_ok ~= nil then
                local et = mt:add(G.ecrc_ok, admin_ok)
                et:set_generated()
                if not admin_ok then et:add_proto_expert_info(E.ecrc, "ADMIN ECRC mismatch") end
            end
        end
        if res.message[i] then
            local ok, info = pcall(dissect_message, res.message[i], pinfo, tree)
            if not ok then
                t:add_proto_expert_info(E.msg, "dissector error: " .. tostring(info))
            else
                infos[#infos + 1] = info
            end
        end
    end
    local names = {}
    for name in pairs(types) do names[#names + 1] = name end
    table.sort(names)
    return string.format("cable %d seq %s ack %s [%s] %s", tvb(4, 4):uint(), tostring(tvb(16, 8):uint64()),
        tostring(tvb(24, 8):uint64()), table.concat(names, ","), table.concat(infos, "; "))
end

-- A capture taken where the kernel coalesces UDP (GRO) holds several cable datagrams of
-- one size (the last shorter) in one UDP payload.  The next datagram starts where a shim
-- with the same magic, version, cable id and nonces sits on a micropacket boundary.
local function segment_size(tvb)
    local len = tvb:len()
    if len < 2 * SHIM_BYTES + MP_BYTES then return len end
    local raw = tvb:raw(0, len)
    local head = raw:sub(5, 16)
    local o = SHIM_BYTES + MP_BYTES
    while o + SHIM_BYTES <= len do
        local m1, m2, v, f = raw:byte(o + 1, o + 4)
        if m1 * 256 + m2 == SHIM_MAGIC and v == SHIM_VERSION and f <= SHIM_FLAG_SEQUENCED and
            raw:sub(o + 5, o + 16) == head then
            return o
        end
        o = o + MP_BYTES
    end
    return len
end

function gsn.dissector(tvb, pinfo, tree)
    local len = tvb:len()
    pinfo.cols.protocol = "GSN"
    local size = segment_size(tvb)
    local infos, off, segment = {}, 0, 0
    while off < len do
        local n = math.min(size, len - off)
        local sub = n == len and tvb or tvb(off, n):tvb() -- the whole tvb keeps its length before any snap
        local ok, info = pcall(dissect_datagram, sub, pinfo, tree, segment)
        if not ok then -- a bug here must not hide the packet: say so as expert info
            tree:add(gsn, tvb(off, n)):add_proto_expert_info(E.shim, "dissector error: " .. tostring(info))
            info = "GSN cable: dissector error"
        end
        infos[#infos + 1] = info
        off, segment = off + n, segment + 1
    end
    pinfo.cols.info = table.concat(infos, " | ")
    return len
end

local function heuristic(tvb, pinfo, tree)
    local len = tvb:len()
    if len < SHIM_BYTES + MP_BYTES then return false end
    if tvb(0, 2):uint() ~= SHIM_MAGIC or tvb(2, 1):uint() ~= SHIM_VERSION then return false end
    gsn.dissector(tvb, pinfo, tree)
    return true
end

local registered_port
local function register_port()
    local udp = DissectorTable.get("udp.port")
    if registered_port and registered_port ~= 0 then udp:remove(registered_port, gsn) end
    registered_port = gsn.prefs.udp_port
    if registered_port ~= 0 then udp:add(registered_port, gsn) end
end
gsn.prefs_changed = register_port
register_port()
gsn:register_heuristic("udp", heuristic)
