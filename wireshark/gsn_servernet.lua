-- ServerNet packets in their UDP envelope: what snetd and snet-router send (servernet/codec.py
-- and servernet/constants.py are the reference; ../shared/spec/servernet-ipoib.md §1.3, §1.8).
--
--   envelope: magic 0x534E ('SN') | version 1 | flags (0x01 fabric Y, 0x02 TPB, 0x04 ServerNet II)
--   packet:   header (8: DID 20 | SID 20 | LEN 8 | TTYPE 4 | RSP 1 | TID 4 | PATH 1 | ACK 1 | rsvd 5)
--             | address (4, requests) | data (read responses, write and diag requests) | CRC-32
--
-- Registration: UDP ports preference (default the shipped configs' router and node ports,
-- 7500-7501,7510-7511,7520-7521) and a heuristic on every UDP datagram (magic 'SN', version 1).

local bit = require("gsn_bit") -- band, bor, bxor, lshift, rshift on any Lua Wireshark embeds
local band, bxor, rshift = bit.band, bit.bxor, bit.rshift

-- wire constants (servernet/constants.py)
local MAGIC, VERSION, ENVELOPE_BYTES = 0x534E, 1, 4
local FLAG_FABRIC, FLAG_TPB, FLAG_II, FLAGS_KNOWN = 0x01, 0x02, 0x04, 0x07
local HEADER_BYTES, ADDRESS_BYTES, CRC_BYTES = 8, 4, 4
local MAX_DATA, MAX_DATA_II, LEN_UNIT_II = 64, 512, 8
local MIN_PACKET = HEADER_BYTES + CRC_BYTES
local TT_READ, TT_WRITE, TT_BARRIER, TT_DIAG = 0x0, 0x1, 0x2, 0xE
local TTYPES = { [TT_READ] = "READ", [TT_WRITE] = "WRITE", [TT_BARRIER] = "BARRIER", [TT_DIAG] = "DIAG" }
local FABRICS = { [0] = "X", [1] = "Y" }
local DEFAULT_PORTS = "7500-7501,7510-7511,7520-7521"

local CRC32 = require("gsn_crc32") -- zlib's CRC-32, shared with gsn_ib.lua
local crc32 = CRC32.crc32

local snet = Proto("servernet", "ServerNet")
local F = {
    magic = ProtoField.uint16("servernet.env.magic", "Envelope magic", base.HEX),
    version = ProtoField.uint8("servernet.env.version", "Envelope version"),
    flags = ProtoField.uint8("servernet.env.flags", "Envelope flags", base.HEX),
    fabric = ProtoField.uint8("servernet.env.fabric", "Fabric", base.DEC, FABRICS, FLAG_FABRIC),
    tpb = ProtoField.bool("servernet.env.tpb", "TPB (a router saw a bad CRC)", 8, nil, FLAG_TPB),
    ii = ProtoField.bool("servernet.env.ii", "ServerNet II mode", 8, nil, FLAG_II),
    did = ProtoField.uint24("servernet.did", "DID", base.HEX),
    sid = ProtoField.uint24("servernet.sid", "SID", base.HEX),
    len = ProtoField.uint8("servernet.len", "LEN"),
    length = ProtoField.uint16("servernet.length", "Length (bytes)"),
    ttype = ProtoField.uint8("servernet.ttype", "TTYPE", base.HEX, TTYPES),
    rsp = ProtoField.bool("servernet.rsp", "Response"),
    tid = ProtoField.uint8("servernet.tid", "TID"),
    path = ProtoField.uint8("servernet.path", "PATH", base.DEC, FABRICS),
    ack = ProtoField.bool("servernet.ack", "ACK"),
    rsvd = ProtoField.uint8("servernet.rsvd", "Reserved", base.HEX),
    address = ProtoField.uint32("servernet.address", "Address", base.HEX),
    data = ProtoField.bytes("servernet.data", "Data"),
    crc = ProtoField.uint32("servernet.crc", "CRC-32", base.HEX),
    crc_ok = ProtoField.bool("servernet.crc_ok", "CRC correct"),
    crc_calc = ProtoField.uint32("servernet.crc_calc", "CRC-32 computed", base.HEX),
}
local list = {}
for _, f in pairs(F) do list[#list + 1] = f end
snet.fields = list
local E = {
    bad = ProtoExpert.new("servernet.malformed", "Malformed ServerNet datagram", expert.group.MALFORMED,
        expert.severity.ERROR),
    crc = ProtoExpert.new("servernet.crc_bad", "ServerNet CRC-32 mismatch", expert.group.CHECKSUM,
        expert.severity.ERROR),
    tpb = ProtoExpert.new("servernet.tpb_set", "Marked bad (TPB) by a router", expert.group.SEQUENCE,
        expert.severity.WARN),
}
snet.experts = { E.bad, E.crc, E.tpb }
snet.prefs.ports = Pref.range("ServerNet UDP ports", DEFAULT_PORTS, "UDP ports of snet-router and snetd", 65535)

-- the packet (after the envelope); returns the Info text
local function packet(tvb, tree, ii)
    local n = tvb:len()
    if n < MIN_PACKET then
        tree:add_proto_expert_info(E.bad, n .. " bytes is shorter than header + CRC (" .. MIN_PACKET .. ")")
        return "ServerNet (truncated)"
    end
    local raw = tvb:raw()
    local b = { raw:byte(1, 8) }
    local did = b[1] * 4096 + b[2] * 16 + rshift(b[3], 4)
    local sid = band(b[3], 0x0F) * 65536 + b[4] * 256 + b[5]
    local field_len, ttype = b[6], rshift(b[7], 4)
    local rsp, tid = band(b[7], 0x08) ~= 0, band(b[7], 0x07) * 2 + rshift(b[8], 7)
    local path, ack = band(rshift(b[8], 6), 1), band(b[8], 0x20) ~= 0
    local length = ii and field_len * LEN_UNIT_II or field_len
    local h = tree:add(snet, tvb(0, HEADER_BYTES), "Header")
    h:add(F.did, tvb(0, 3), did)
    h:add(F.sid, tvb(2, 3), sid)
    local li = h:add(F.len, tvb(5, 1))
    h:add(F.length, tvb(5, 1), length):set_generated()
    local ti = h:add(F.ttype, tvb(6, 1), ttype)
    h:add(F.rsp, tvb(6, 1), rsp)
    h:add(F.tid, tvb(6, 2), tid)
    h:add(F.path, tvb(7, 1), path)
    local ai = h:add(F.ack, tvb(7, 1), ack)
    h:add(F.rsvd, tvb(7, 1), band(b[8], 0x1F))

    local problem, where = nil, h
    local has_data = (rsp and ttype == TT_READ) or (not rsp and (ttype == TT_WRITE or ttype == TT_DIAG))
    local data_len = has_data and length or 0
    local want = MIN_PACKET + (rsp and 0 or ADDRESS_BYTES) + data_len
    if not TTYPES[ttype] then
        problem, where = string.format("transaction type 0x%x is not supported", ttype), ti
    elseif rsp and ttype == TT_DIAG then
        problem, where = "a DIAG has no response", ti
    elseif ack and not rsp then
        problem, where = "ACK set in a request", ai
    elseif length > (ii and MAX_DATA_II or MAX_DATA) then
        problem, where = string.format("length %d is not supported (max %d)", length, ii and MAX_DATA_II or MAX_DATA),
            li
    elseif ttype == TT_BARRIER and length ~= 0 then
        problem, where = "a BARRIER has LEN 0", li
    elseif ttype == TT_WRITE and rsp and length ~= 0 then
        problem, where = "a write response carries no data", li
    elseif n ~= want then
        problem = string.format("%d bytes, the header says %d", n, want)
    end
    local off = HEADER_BYTES
    if not rsp and off + ADDRESS_BYTES <= n - CRC_BYTES then
        tree:add(F.address, tvb(off, ADDRESS_BYTES))
        off = off + ADDRESS_BYTES
    end
    local stop = math.min(off + data_len, n - CRC_BYTES)
    if stop > off then tree:add(F.data, tvb(off, stop - off)) end

    local got, calc = tvb(n - CRC_BYTES, CRC_BYTES):uint(), crc32(raw, 1, n - CRC_BYTES)
    local ci = tree:add(F.crc, tvb(n - CRC_BYTES, CRC_BYTES))
    ci:add(F.crc_ok, tvb(n - CRC_BYTES, CRC_BYTES), got == calc):set_generated()
    if got ~= calc then
        ci:add(F.crc_calc, tvb(n - CRC_BYTES, CRC_BYTES), calc):set_generated()
        ci:add_proto_expert_info(E.crc, string.format("CRC-32 0x%08x, computed 0x%08x", got, calc))
    end
    if problem then where:add_proto_expert_info(E.bad, problem) end

    local info = string.format("%s %s 0x%05x > 0x%05x tid %d %s", TTYPES[ttype] or string.format("TTYPE 0x%x", ttype),
        rsp and (ack and "ACK" or "NAK") or "request", sid, did, tid, FABRICS[path])
    if not rsp then
        if n >= HEADER_BYTES + ADDRESS_BYTES then info = info .. string.format(" @0x%08x", tvb(8, 4):uint()) end
        if ttype == TT_READ then info = info .. " len " .. length end
    end
    if data_len > 0 then info = info .. " data " .. data_len end
    if got ~= calc then info = info .. " [CRC bad]" end
    if problem then info = info .. " [" .. problem .. "]" end
    return info
end

local function dissect(tvb, pinfo, tree)
    local len = tvb:len()
    pinfo.cols.protocol = "ServerNet"
    local t = tree:add(snet, tvb())
    if len < ENVELOPE_BYTES then
        t:add_proto_expert_info(E.bad, len .. " bytes is shorter than the 4-byte envelope")
        pinfo.cols.info = "ServerNet (truncated envelope)"
        return
    end
    local env = t:add(snet, tvb(0, ENVELOPE_BYTES), "Envelope")
    local mi = env:add(F.magic, tvb(0, 2))
    local vi = env:add(F.version, tvb(2, 1))
    local fi = env:add(F.flags, tvb(3, 1))
    fi:add(F.fabric, tvb(3, 1))
    fi:add(F.tpb, tvb(3, 1))
    fi:add(F.ii, tvb(3, 1))
    local magic, ver, flags = tvb(0, 2):uint(), tvb(2, 1):uint(), tvb(3, 1):uint()
    local ii = band(flags, FLAG_II) ~= 0
    local problem, where
    if magic ~= MAGIC then
        problem, where = string.format("magic 0x%04x is not 0x534e", magic), mi
    elseif ver ~= VERSION then
        problem, where = "version " .. ver .. " is not " .. VERSION, vi
    elseif band(flags, 0xFF - FLAGS_KNOWN) ~= 0 then
        problem, where = string.format("unknown flags 0x%02x", flags), fi
    elseif len - ENVELOPE_BYTES > MIN_PACKET + ADDRESS_BYTES + (ii and MAX_DATA_II or MAX_DATA) then
        problem, where = "a " .. len .. "-byte datagram is longer than any packet", t
    end
    if problem then
        where:add_proto_expert_info(E.bad, problem)
        pinfo.cols.info = "ServerNet [" .. problem .. "]"
        return
    end
    if band(flags, FLAG_TPB) ~= 0 then fi:add_proto_expert_info(E.tpb) end
    local info = packet(tvb(ENVELOPE_BYTES):tvb(), t, ii)
    if band(flags, FLAG_TPB) ~= 0 then info = info .. " [TPB]" end
    pinfo.cols.info = string.format("fabric %s: %s", FABRICS[band(flags, FLAG_FABRIC)], info)
    t:append_text(": " .. info)
end

function snet.dissector(tvb, pinfo, tree)
    local ok, err = pcall(dissect, tvb, pinfo, tree)
    if not ok then
        tree:add_proto_expert_info(E.bad, "dissector error: " .. tostring(err))
    end
    return tvb:len()
end

local function heuristic(tvb, pinfo, tree)
    if tvb:len() < ENVELOPE_BYTES + MIN_PACKET or tvb(0, 2):uint() ~= MAGIC or tvb(2, 1):uint() ~= VERSION then
        return false
    end
    snet.dissector(tvb, pinfo, tree)
    return true
end

snet:register_heuristic("udp", heuristic)
local registered
local function register_ports()
    local udp = DissectorTable.get("udp.port")
    if registered then udp:remove(registered, snet) end
    registered = snet.prefs.ports
    udp:add(registered, snet)
end
snet.prefs_changed = register_ports
register_ports()
