-- Scheduled Transfer (EtherType 0x8181): the 40-byte Schedule Header, its flags, the
-- option TLVs of control operations and the checksum (../shared/spec/st.md §1, §3.10;
-- stpd/wire.py and stpd/constants.py are the reference).  Registered in the "ethertype"
-- table, so gsn_cable.lua hands ST Messages to it.

local bit = require("gsn_bit") -- band, bor, bxor, lshift, rshift on any Lua Wireshark embeds
local band, rshift = bit.band, bit.rshift

local OPS = { [0x01] = "RC", [0x02] = "CA", [0x03] = "RD", [0x04] = "DA", [0x05] = "DC", [0x10] = "NOP",
    [0x13] = "RMR", [0x14] = "MRA", [0x15] = "GET", [0x16] = "RTS", [0x17] = "RA", [0x18] = "RTR", [0x1A] = "CTS",
    [0x1B] = "DATA", [0x1C] = "RS", [0x1D] = "RSR", [0x1E] = "END", [0x1F] = "END_ACK" }
local FUNCTIONS = { [0] = "GET", [1] = "FETCHOP increment", [2] = "FETCHOP decrement", [3] = "FETCHOP clear",
    [7] = "FetchOp_Complete (FOC)" }
local OPTIONS = { [0x00] = "END", [0x01] = "NOOP", [0x04] = "Error text", [0x05] = "Error code", [0x90] = "IP pair" }
local REASONS = { [1] = "NO_LISTENER", [2] = "NO_RESOURCES", [3] = "PARAMETER", [4] = "TOO_LONG", [5] = "UNKNOWN_ID",
    [6] = "OUT_OF_BOUNDS", [7] = "FETCHOP_BUSY", [8] = "ULP_REFUSED", [9] = "DUPLICATE", [0xFFFF] = "OTHER" }
local OP_DATA, OP_GET = 0x1B, 0x15
local HEADER_BYTES, MAX_OPTION_BYTES = 40, 32

local st = Proto("st", "Scheduled Transfer")
local S = {
    opflags = ProtoField.uint16("st.opflags", "Op/Flags", base.HEX),
    op = ProtoField.uint16("st.op", "Op", base.HEX, OPS, 0xF800),
    func = ProtoField.uint16("st.function", "Function", base.DEC, FUNCTIONS, 0x0700),
    silent = ProtoField.bool("st.flags.silent", "Silent", 16, nil, 0x0080),
    interrupt = ProtoField.bool("st.flags.interrupt", "Interrupt", 16, nil, 0x0040),
    send_state = ProtoField.bool("st.flags.send_state", "Send_State", 16, nil, 0x0020),
    ooo = ProtoField.bool("st.flags.out_of_order", "Out_of_Order", 16, nil, 0x0010),
    last = ProtoField.bool("st.flags.last", "Last", 16, nil, 0x0008),
    reject = ProtoField.bool("st.flags.reject", "Reject", 16, nil, 0x0004),
    dc = ProtoField.uint16("st.dc", "Data channel", base.DEC, nil, 0x0003),
    param = ProtoField.uint16("st.param", "Param"),
    d_port = ProtoField.uint16("st.d_port", "D_Port"),
    s_port = ProtoField.uint16("st.s_port", "S_Port"),
    d_key = ProtoField.uint32("st.d_key", "D_Key", base.HEX),
    checksum = ProtoField.uint16("st.checksum", "Checksum", base.HEX),
    checksum_ok = ProtoField.bool("st.checksum_ok", "Checksum correct"),
    mx = ProtoField.uint16("st.mx", "B_id/Mx (EtherType in RC, Max_Block in RTS)", base.HEX),
    bufx = ProtoField.uint32("st.bufx", "Bufx", base.HEX),
    offset = ProtoField.uint32("st.offset", "Offset", base.HEX),
    sync = ProtoField.uint32("st.sync", "Sync (T_len high)", base.HEX),
    b_num = ProtoField.uint32("st.b_num", "B_num (T_len low)", base.HEX),
    d_id = ProtoField.uint32("st.d_id", "D_id", base.HEX),
    s_id = ProtoField.uint32("st.s_id", "S_id", base.HEX),
    t_len = ProtoField.uint64("st.t_len", "T_len (Sync:B_num)"),
    opt = ProtoField.uint8("st.option", "Option", base.HEX, OPTIONS),
    opt_len = ProtoField.uint8("st.option.length", "Length"),
    opt_value = ProtoField.bytes("st.option.value", "Value"),
    reason = ProtoField.uint16("st.option.reason", "Reason", base.DEC, REASONS),
    text = ProtoField.string("st.option.text", "Text"),
    payload = ProtoField.bytes("st.payload", "STU payload"),
}
local list = {}
for _, f in pairs(S) do list[#list + 1] = f end
st.fields = list
local E = {
    bad = ProtoExpert.new("st.malformed", "Malformed ST packet", expert.group.MALFORMED, expert.severity.ERROR),
    sum = ProtoExpert.new("st.checksum_bad", "ST checksum mismatch", expert.group.CHECKSUM, expert.severity.ERROR),
}
st.experts = { E.bad, E.sum }

-- RFC 1071 one's-complement sum of the packet with the checksum field taken as zero;
-- 0 is sent as 0xFFFF (0 on the wire means "not computed")
local function checksum(tvb)
    local len = tvb:len()
    local raw = tvb:raw(0, len)
    local total = 0
    for i = 1, len - 1, 2 do
        if i ~= 13 then total = total + raw:byte(i) * 256 + raw:byte(i + 1) end
    end
    if len % 2 == 1 then total = total + raw:byte(len) * 256 end
    while total > 0xFFFF do total = band(total, 0xFFFF) + rshift(total, 16) end
    local value = 0xFFFF - total
    if value == 0 then value = 0xFFFF end
    return value
end

local function options(tvb, t)
    local len = tvb:len()
    if len > MAX_OPTION_BYTES then
        t:add_proto_expert_info(E.bad, len .. " bytes of options, more than " .. MAX_OPTION_BYTES)
        return
    end
    local i = 0
    while i < len do
        local typ = tvb(i, 1):uint()
        if typ == 0 then
            t:add(S.opt, tvb(i, 1))
            return
        end
        if i + 1 >= len then
            t:add(S.opt, tvb(i, 1)):add_proto_expert_info(E.bad, "truncated option")
            return
        end
        local olen = tvb(i + 1, 1):uint()
        if olen < 2 or i + olen > len then
            t:add(S.opt, tvb(i, len - i)):add_proto_expert_info(E.bad, "option length " .. olen .. " does not fit")
            return
        end
        local ot = t:add(S.opt, tvb(i, olen), typ)
        ot:add(S.opt_len, tvb(i + 1, 1))
        if olen > 2 then
            local v = tvb(i + 2, olen - 2)
            if typ == 0x05 and olen == 4 then ot:add(S.reason, v)
            elseif typ == 0x04 then ot:add(S.text, v)
            else ot:add(S.opt_value, v) end
        end
        i = i + olen
    end
end

function st.dissector(tvb, pinfo, tree)
    local len = tvb:len()
    pinfo.cols.protocol = "ST"
    local t = tree:add(st, tvb())
    if len < HEADER_BYTES then
        t:add_proto_expert_info(E.bad, len .. " bytes is shorter than the 40-byte header")
        pinfo.cols.info = "ST (truncated)"
        return len
    end
    local of = t:add(S.opflags, tvb(0, 2))
    for _, name in ipairs({ "op", "func", "silent", "interrupt", "send_state", "ooo", "last", "reject", "dc" }) do
        of:add(S[name], tvb(0, 2))
    end
    local opflags = tvb(0, 2):uint()
    local op, func = rshift(opflags, 11), band(rshift(opflags, 8), 7)
    t:add(S.param, tvb(2, 2))
    t:add(S.d_port, tvb(4, 2))
    t:add(S.s_port, tvb(6, 2))
    t:add(S.d_key, tvb(8, 4))
    local ck = t:add(S.checksum, tvb(12, 2))
    t:add(S.mx, tvb(14, 2))
    t:add(S.bufx, tvb(16, 4))
    t:add(S.offset, tvb(20, 4))
    t:add(S.sync, tvb(24, 4))
    t:add(S.b_num, tvb(28, 4))
    t:add(S.d_id, tvb(32, 4))
    t:add(S.s_id, tvb(36, 4))
    t:add(S.t_len, tvb(24, 8)):set_generated()
    local stored = tvb(12, 2):uint()
    if stored ~= 0 then
        local calc = checksum(tvb)
        local ok = t:add(S.checksum_ok, calc == stored)
        ok:set_generated()
        if calc ~= stored then
            ck:add_proto_expert_info(E.sum, string.format("checksum 0x%04x, computed 0x%04x", stored, calc))
        end
    end
    if not OPS[op] then
        of:add_proto_expert_info(E.bad, string.format("undefined opcode 0x%02x", op))
    elseif op == OP_GET and not FUNCTIONS[func] then
        of:add_proto_expert_info(E.bad, "reserved GET function " .. func)
    elseif op ~= OP_GET and func ~= 0 then
        of:add_proto_expert_info(E.bad, "function bits set on " .. OPS[op])
    end
    if len > HEADER_BYTES then
        if op == OP_DATA then
            t:add(S.payload, tvb(HEADER_BYTES))
        else
            options(tvb(HEADER_BYTES):tvb(), t)
        end
    end
    local name = OPS[op] or string.format("op 0x%02x", op)
    if op == OP_GET then name = FUNCTIONS[func] or name end
    t:append_text(": " .. name)
    pinfo.cols.info = string.format("ST %s DC%d port %d>%d S_id 0x%08x D_id 0x%08x", name, band(opflags, 3),
        tvb(6, 2):uint(), tvb(4, 2):uint(), tvb(36, 4):uint(), tvb(32, 4):uint())
    return len
end

DissectorTable.get("ethertype"):add(0x8181, st)
