-- PacketWay EEP and MessageWay v5 packets with their L2RH/symbol prefix, optional header
-- fields, data block, trailer and TAIL, and the RRP records of RRP and ERR messages
-- (../shared/spec/pktway.md §1, §2, §5; pktwayd/eep.py and pktwayd/rrp.py are the reference).
--
-- Carriers: GSN Messages with EtherType 0x88B6 (pktwayd's GSN half-routers and the twin
-- link, through gsn_cable.lua and the "ethertype" table), and the emulated SANs of
-- pktway-san: UDP datagrams "[port] 03 00" + packet, found by a heuristic (and a UDP port
-- preference, default off).  The dialect (EEP or MessageWay v5) is a preference; "auto"
-- picks the one whose header accounts for the whole packet.

local bit = require("gsn_bit") -- band, bor, bxor, lshift, rshift on any Lua Wireshark embeds
local band, rshift = bit.band, bit.rshift

local W = 8
local PTS = { [1] = "ERR", [2] = "RRP", [3] = "EMBEDDED", [4] = "MEMORY_READ", [5] = "MEMORY_WRITE", [6] = "USER" }
local RRP_TES = { [1] = "GVL2", [2] = "L2SR", [3] = "RDRC", [4] = "TELL", [5] = "INFO", [6] = "HRTO", [7] = "WRU",
    [8] = "GVRT", [9] = "RTBL" }
local ERR_TES = { [1] = "UNK", [2] = "HRDOWN", [3] = "LINKDOWN", [4] = "GENERAL" }
local RTYPS = { [1] = "ADDR", [2] = "NAME", [3] = "CAPA", [4] = "LADR", [5] = "SRQR", [6] = "MTUR", [7] = "RCVF",
    [8] = "RTHD" }
local PT_ERR, PT_RRP, ERR_GENERAL = 1, 2, 4
local MW_VERSION, MW_L2RH_LIMIT = 5, 0x0040
local DIALECTS = { { 1, "auto", 0 }, { 2, "pw0", 1 }, { 3, "mw5", 2 } }

local pw = Proto("pktway", "PacketWay")
local P = {
    dialect = ProtoField.string("pktway.dialect", "Dialect"),
    san_port = ProtoField.uint8("pktway.san.port", "Emulated SAN port (route)"),
    san_type = ProtoField.uint16("pktway.san.type", "Emulated SAN type", base.HEX),
    l2rh = ProtoField.bytes("pktway.l2rh", "L2RH route"),
    l2rh_len = ProtoField.uint8("pktway.l2rh.length", "Route bytes"),
    symbol = ProtoField.uint24("pktway.symbol", "Symbol type", base.HEX),
    symbol_data = ProtoField.bytes("pktway.symbol.data", "Symbol data"),
    v = ProtoField.uint8("pktway.v", "V"),
    p = ProtoField.uint8("pktway.p", "P (priority)"),
    dt = ProtoField.uint24("pktway.dt", "DT (destination)", base.HEX),
    te = ProtoField.uint16("pktway.te", "TE"),
    te_rrp = ProtoField.uint16("pktway.te.rrp", "TE", base.DEC, RRP_TES),
    te_err = ProtoField.uint16("pktway.te.err", "TE", base.DEC, ERR_TES),
    pt = ProtoField.uint16("pktway.pt", "PT", base.HEX, PTS),
    e = ProtoField.uint8("pktway.e", "E"),
    pl = ProtoField.uint8("pktway.pl", "PL (pad bytes)"),
    dl = ProtoField.uint32("pktway.dl", "DL (data words)"),
    h = ProtoField.uint8("pktway.h", "h (optional header present)"),
    rz = ProtoField.uint8("pktway.rz", "RZ"),
    sa = ProtoField.uint24("pktway.sa", "SA (source)", base.HEX),
    mw_version = ProtoField.uint8("pktway.mw.version", "MessageWay version"),
    mw_free = ProtoField.uint16("pktway.mw.free", "MessageWay free bits", base.HEX),
    oh = ProtoField.uint8("pktway.oh.type", "Optional header field type"),
    oh_mandatory = ProtoField.bool("pktway.oh.mandatory", "Mandatory"),
    oh_data = ProtoField.bytes("pktway.oh.data", "Optional header data"),
    data = ProtoField.bytes("pktway.data", "Data"),
    pad = ProtoField.bytes("pktway.pad", "Pad"),
    trailer = ProtoField.bytes("pktway.trailer", "Trailer"),
    tail = ProtoField.uint64("pktway.tail", "TAIL (EI)", base.HEX),
    rtyp = ProtoField.uint8("pktway.rrp.rtyp", "Record", base.DEC, RTYPS),
    rpl = ProtoField.uint8("pktway.rrp.pl", "PL"),
    rl = ProtoField.uint16("pktway.rrp.rl", "RL (words)"),
    addr = ProtoField.uint24("pktway.rrp.addr", "Address", base.HEX),
    name = ProtoField.string("pktway.rrp.name", "Name"),
    cc = ProtoField.uint8("pktway.rrp.capability", "Capability code"),
    params = ProtoField.bytes("pktway.rrp.params", "Parameters"),
    mtu = ProtoField.uint24("pktway.rrp.mtu", "MTU (words, 0 unlimited)"),
    q = ProtoField.uint16("pktway.rrp.q", "Q"),
    san_id = ProtoField.uint24("pktway.rrp.san_id", "SAN id", base.HEX),
    sn = ProtoField.uint32("pktway.rrp.sn", "SN"),
    copy = ProtoField.bytes("pktway.err.copy", "Offending packet (from its EEP header)"),
}
local list = {}
for _, f in pairs(P) do list[#list + 1] = f end
pw.fields = list
local bad = ProtoExpert.new("pktway.malformed", "Malformed PacketWay packet", expert.group.MALFORMED,
    expert.severity.ERROR)
pw.experts = { bad }
pw.prefs.dialect = Pref.enum("Dialect", 0, "PacketWay EEP (pw0) or MessageWay v5 (mw5); auto guesses", DIALECTS,
    false)
pw.prefs.san_port = Pref.uint("Emulated SAN UDP port", 0, "UDP port of a pktway-san switch (0: heuristic only)")

-- a malformed packet raises this (caught by the dissector, shown as expert info)
local function fail(tree, msg)
    error({ msg = msg, tree = tree }, 0)
end

local function u24(tvb, off) return tvb(off, 3):uint() end

local function first_word_kind(tvb, off, dialect)
    if dialect == "mw5" then
        return tvb(off, 2):uint() < MW_L2RH_LIMIT and "l2rh" or "header"
    end
    local b1 = tvb(off + 1, 1):uint()
    if band(b1, 0x80) == 0 or band(b1, 0xF0) == 0xE0 then return "header" end
    if band(b1, 0xC0) == 0x80 then return "l2rh" end
    if band(b1, 0xF0) == 0xF0 then return "symbol" end
    return "reserved"
end

-- one L2RH or symbol at off (end: the first byte it may not reach); returns its size
local function route_record(tvb, off, stop, kind, tree)
    if kind == "l2rh" then
        local n = band(tvb(off + 1, 1):uint(), 0x3F)
        local size = W * math.floor((n + 9) / W)
        if n == 0 then fail(tree, "L2RH with zero route bytes") end
        if off + size > stop then fail(tree, "L2RH of " .. n .. " route bytes runs past its room") end
        if tree then
            local t = tree:add(P.l2rh, tvb(off + 2, n))
            t:add(P.l2rh_len, tvb(off + 1, 1), n)
        end
        return size
    end
    local n = tvb(off + 4, 1):uint()
    local size = W * math.floor((n + 12) / W)
    if off + size > stop then fail(tree, "symbol of " .. n .. " data bytes runs past its room") end
    if tree then
        local t = tree:add(P.symbol, tvb(off + 1, 3), band(u24(tvb, off + 1), 0xFFFFF))
        if n > 0 then t:add(P.symbol_data, tvb(off + 5, n)) end
    end
    return size
end

local records -- forward

local function record(tvb, off, stop, tree, in_rt)
    if off + 4 > stop then fail(tree, "record header runs past the body") end
    local rtyp, pl, rl = tvb(off, 1):uint(), tvb(off + 1, 1):uint(), tvb(off + 2, 2):uint()
    if rl == 0 or off + W * rl > stop then fail(tree, "record length " .. rl .. " words does not fit") end
    if pl > 7 then fail(tree, "record pad length " .. pl .. " > 7") end
    if not RTYPS[rtyp] then fail(tree, "unknown record type " .. rtyp) end
    if in_rt and rtyp == 8 then fail(tree, "an RTHD inside a routing table") end
    local size = W * rl
    local t = tree and tree:add(P.rtyp, tvb(off, size), rtyp)
    if t then
        t:add(P.rpl, tvb(off + 1, 1))
        t:add(P.rl, tvb(off + 2, 2))
    end
    local body, blen = off + 4, size - 4
    if rtyp == 1 or rtyp == 6 then
        if rl ~= 1 or pl ~= 1 then fail(t, RTYPS[rtyp] .. " must be one word with PL=1") end
        if t then t:add(rtyp == 1 and P.addr or P.mtu, tvb(off + 5, 3)) end
    elseif rtyp == 2 or rtyp == 3 or rtyp == 4 then
        local n = blen - pl
        if n < 0 then fail(t, "pad longer than the record") end
        if rtyp == 2 and t and n > 0 then t:add(P.name, tvb(body, n)) end
        if rtyp == 3 then
            if n < 1 then fail(t, "CAPA without a capability code") end
            if t then
                t:add(P.cc, tvb(body, 1))
                if n > 1 then t:add(P.params, tvb(body + 1, n - 1)) end
            end
        end
        if rtyp == 4 then
            if n % 3 ~= 0 then fail(t, "LADR is not whole 3-byte addresses") end
            for i = 0, n / 3 - 1 do if t then t:add(P.addr, tvb(body + 3 * i, 3)) end end
        end
    elseif rtyp == 7 then
        local n = blen - pl
        if n < 0 or n % 3 ~= 0 then fail(t, "RCVF is not whole 3-byte addresses") end
        for i = 0, n / 3 - 1 do if t then t:add(P.addr, tvb(body + pl + 3 * i, 3)) end end
    elseif rtyp == 5 then
        if t then t:add(P.q, tvb(off + 6, 2)) end
        local pos, stop2, mtu = off + W, off + size, false
        while pos < stop2 do
            local kind = first_word_kind(tvb, pos, "pw0")
            if kind == "l2rh" or kind == "symbol" then
                pos = pos + route_record(tvb, pos, stop2, kind, t)
            else
                if tvb(pos, 1):uint() ~= 6 or mtu then fail(t, "only one nested MTUR is allowed in an SRQR") end
                mtu = true
                pos = pos + record(tvb, pos, stop2, t, true)
            end
        end
    else -- RTHD: 16-byte fixed part, RL covers its whole routing table
        if rl < 2 then fail(t, "RTHD shorter than its 16-byte fixed part") end
        if t then
            t:add(P.san_id, tvb(off + 5, 3))
            t:add(P.sn, tvb(off + 8, 4))
        end
        records(tvb, off + 16, off + size, t, true)
    end
    return size
end

records = function(tvb, off, stop, tree, in_rt)
    if (stop - off) % W ~= 0 then fail(tree, "RRP body is not whole words") end
    while off < stop do
        off = off + record(tvb, off, stop, tree, in_rt)
    end
end

-- Walk (and with a tree, show) one packet in a dialect.  Returns a summary table.
local function walk(tvb, dialect, tree)
    local n = tvb:len()
    if n % W ~= 0 then fail(tree, "length " .. n .. " is not a multiple of 8") end
    if n < 3 * W then fail(tree, "shorter than header + TAIL") end
    local off = 0
    while true do
        if off + 3 * W > n then fail(tree, "no room for the header and TAIL") end
        local kind = first_word_kind(tvb, off, dialect)
        if kind == "header" then break end
        if kind == "reserved" then fail(tree, "reserved DT prefix 110x") end
        if kind == "symbol" and dialect == "mw5" then fail(tree, "MessageWay has no symbols") end
        off = off + route_record(tvb, off, n - 3 * W, kind, tree)
    end
    local s = { dialect = dialect }
    local hi0, lo0 = tvb(off, 4):uint(), tvb(off + 4, 4):uint()
    local hi1, lo1 = tvb(off + 8, 4):uint(), tvb(off + 12, 4):uint()
    local h
    if dialect == "mw5" then
        if tvb(off + 3, 1):uint() ~= MW_VERSION then fail(tree, "MessageWay version is not 5") end
        s.dt, s.pt, s.te = tvb(off, 2):uint(), tvb(off + 4, 2):uint(), tvb(off + 6, 2):uint()
        s.pl, s.dl, s.sa = band(rshift(hi1, 24), 0xF), band(hi1, 0xFFFFFF), rshift(lo1, 16)
        h = 0
        if tree then
            tree:add(P.dt, tvb(off, 2), s.dt)
            tree:add(P.p, tvb(off + 2, 1), rshift(tvb(off + 2, 1):uint(), 2))
            tree:add(P.mw_version, tvb(off + 3, 1))
            tree:add(P.pt, tvb(off + 4, 2))
            tree:add(s.pt == PT_RRP and P.te_rrp or s.pt == PT_ERR and P.te_err or P.te, tvb(off + 6, 2))
            tree:add(P.e, tvb(off + 8, 1), rshift(hi1, 28))
            tree:add(P.pl, tvb(off + 8, 1), s.pl)
            tree:add(P.dl, tvb(off + 8, 4), s.dl)
            tree:add(P.sa, tvb(off + 12, 2), s.sa)
            tree:add(P.mw_free, tvb(off + 14, 2))
        end
    else
        if rshift(hi0, 30) ~= 0 then fail(tree, "version " .. rshift(hi0, 30) .. " is not 0") end
        s.dt, s.te, s.pt = band(hi0, 0xFFFFFF), rshift(lo0, 16), band(lo0, 0xFFFF)
        s.pl, s.dl, s.sa = band(rshift(hi1, 25), 7), band(hi1, 0x1FFFFFF), band(lo1, 0xFFFFFF)
        h = rshift(lo1, 31)
        if tree then
            tree:add(P.v, tvb(off, 1), 0)
            tree:add(P.p, tvb(off, 1), band(rshift(hi0, 24), 0x3F))
            tree:add(P.dt, tvb(off + 1, 3))
            tree:add(s.pt == PT_RRP and P.te_rrp or s.pt == PT_ERR and P.te_err or P.te, tvb(off + 4, 2))
            tree:add(P.pt, tvb(off + 6, 2))
            tree:add(P.e, tvb(off + 8, 1), rshift(hi1, 28))
            tree:add(P.pl, tvb(off + 8, 1), s.pl)
            tree:add(P.dl, tvb(off + 8, 4), s.dl)
            tree:add(P.h, tvb(off + 12, 1), h)
            tree:add(P.rz, tvb(off + 12, 1), band(rshift(lo1, 24), 0x7F))
            tree:add(P.sa, tvb(off + 13, 3))
        end
    end
    off = off + 2 * W
    if h == 1 then
        while true do
            if off + W > n - W then fail(tree, "optional header runs into the TAIL") end
            local b0, len = tvb(off, 1):uint(), tvb(off + 1, 1):uint()
            local size = W * math.floor((len + 9) / W)
            if off + size > n - W then fail(tree, "optional header field runs into the TAIL") end
            if tree then
                local t = tree:add(P.oh, tvb(off, size), band(b0, 0x3F))
                t:add(P.oh_mandatory, tvb(off, 1), band(b0, 0x80) ~= 0)
                if len > 0 then t:add(P.oh_data, tvb(off + 2, len)) end
            end
            off = off + size
            if band(b0, 0x40) ~= 0 then break end
        end
    end
    if s.pl > 7 or (s.pl > 0 and s.dl == 0) then
        fail(tree, "pad length " .. s.pl .. " with " .. s.dl .. " data words")
    end
    local stop = off + W * s.dl
    if stop > n - W then fail(tree, s.dl .. " data words run past the packet (" .. n .. " bytes)") end
    s.data_off, s.data_len, s.trailer = off, W * s.dl - s.pl, n - W - stop
    if tree then
        if s.data_len > 0 then
            local dt = tree:add(P.data, tvb(off, s.data_len))
            if s.pt == PT_ERR and s.te == ERR_GENERAL then
                dt:add(P.copy, tvb(off, s.data_len))
            elseif s.pt == PT_RRP or s.pt == PT_ERR then
                records(tvb, off, stop, dt, false)
            end
        end
        if s.pl > 0 then tree:add(P.pad, tvb(off + s.data_len, s.pl)) end
        if s.trailer > 0 then tree:add(P.trailer, tvb(stop, s.trailer)) end
        tree:add(P.tail, tvb(n - W, W))
    end
    return s
end

local function known_pt(pt)
    return PTS[pt] ~= nil or pt >= 0x0600 -- a PacketWay type, or an EtherType
end

local function probe(tvb, dialect)
    local ok, s = pcall(walk, tvb, dialect, nil)
    return ok and s or nil
end

local function pick_dialect(tvb)
    local pref = pw.prefs.dialect
    if pref == 1 then return "pw0" elseif pref == 2 then return "mw5" end
    local a, b = probe(tvb, "pw0"), probe(tvb, "mw5")
    if a and b then -- both parse: the one whose PT means something and that needs no trailer
        local function score(x) return (known_pt(x.pt) and 2 or 0) + (x.trailer == 0 and 1 or 0) end
        return score(b) > score(a) and "mw5" or "pw0"
    end
    return b and "mw5" or "pw0"
end

local function describe(s)
    local pt = PTS[s.pt] or string.format("PT 0x%04x", s.pt)
    local te = s.pt == PT_RRP and RRP_TES[s.te] or s.pt == PT_ERR and ERR_TES[s.te]
    return string.format("%s %s%s 0x%06x > 0x%06x", s.dialect == "mw5" and "MessageWay" or "PacketWay", pt,
        te and ("/" .. te) or "", s.sa, s.dt)
end

local function dissect_packet(tvb, pinfo, tree, t)
    local dialect = pick_dialect(tvb)
    t:add(P.dialect, dialect):set_generated()
    pinfo.cols.protocol = dialect == "mw5" and "MessageWay" or "PacketWay"
    local ok, s = pcall(walk, tvb, dialect, t)
    if ok then
        pinfo.cols.info = describe(s)
        t:append_text(": " .. describe(s))
    else
        local msg = type(s) == "table" and s.msg or tostring(s)
        t:add_proto_expert_info(bad, msg)
        pinfo.cols.info = "PacketWay [malformed: " .. msg .. "]"
    end
end

function pw.dissector(tvb, pinfo, tree)
    local t = tree:add(pw, tvb())
    dissect_packet(tvb, pinfo, tree, t)
    return tvb:len()
end

-- the emulated SAN: [port] 03 00, then a packet
local san = Proto("pktway_san", "PacketWay emulated SAN")
function san.dissector(tvb, pinfo, tree)
    local t = tree:add(pw, tvb())
    if tvb:len() < 3 then
        t:add_proto_expert_info(bad, "shorter than the 3-byte native header")
        return tvb:len()
    end
    t:add(P.san_port, tvb(0, 1))
    t:add(P.san_type, tvb(1, 2))
    if tvb(1, 2):uint() ~= 0x0300 then
        t:add_proto_expert_info(bad, string.format("type 0x%04x is not 0x0300", tvb(1, 2):uint()))
        return tvb:len()
    end
    dissect_packet(tvb(3):tvb(), pinfo, tree, t)
    return tvb:len()
end

local function san_heuristic(tvb, pinfo, tree)
    local len = tvb:len()
    if len < 3 + 3 * W or (len - 3) % W ~= 0 or tvb(1, 2):uint() ~= 0x0300 then return false end
    local inner = tvb(3):tvb()
    local a, b = probe(inner, "pw0"), probe(inner, "mw5")
    if not ((a and a.trailer == 0 and known_pt(a.pt)) or (b and b.trailer == 0 and known_pt(b.pt))) then
        return false
    end
    san.dissector(tvb, pinfo, tree)
    return true
end

DissectorTable.get("ethertype"):add(0x88B6, pw)
san:register_heuristic("udp", san_heuristic)
local registered_port
local function register_port()
    local udp = DissectorTable.get("udp.port")
    if registered_port and registered_port ~= 0 then udp:remove(registered_port, san) end
    registered_port = pw.prefs.san_port
    if registered_port ~= 0 then udp:add(registered_port, san) end
end
pw.prefs_changed = register_port
register_port()
