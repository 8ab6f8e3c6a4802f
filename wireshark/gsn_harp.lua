-- HARP (RFC 2835 §6) in the HIPARP format, ar$hrd 28: what harpd sends (harpd/wire.py).
-- IPv6 is the project's extension (README "IPv6 over HARP"): ar$pro 0x86DD, ar$pln 16.
-- Called by gsn_cable.lua for EtherType 0x0806 Messages whose first two bytes are 28; the
-- generic RFC 826 layout (ar$hrd 1 or 6) is left to Wireshark's own ARP dissector.

local HRD_HIPARP = 28
local OPS = { [1] = "HARP_REQUEST", [2] = "HARP_REPLY", [8] = "InHARP_REQUEST", [9] = "InHARP_REPLY",
    [10] = "HARP_NAK" }
local PROS = { [0x0800] = "IPv4", [0x86DD] = "IPv6" }
local PLN = { [0x0800] = 4, [0x86DD] = 16 }

local harp = Proto("harp", "HIPPI ARP (HARP)")
local H = {
    hrd = ProtoField.uint16("harp.hrd", "ar$hrd"),
    pro = ProtoField.uint16("harp.pro", "ar$pro", base.HEX, PROS),
    op = ProtoField.uint16("harp.op", "ar$op", base.DEC, OPS),
    pln = ProtoField.uint8("harp.pln", "ar$pln"),
    rhl = ProtoField.uint8("harp.rhl", "ar$rhl"),
    thl = ProtoField.uint8("harp.thl", "ar$thl"),
    rpa4 = ProtoField.ipv4("harp.rpa", "ar$rpa (requester protocol address)"),
    tpa4 = ProtoField.ipv4("harp.tpa", "ar$tpa (target protocol address)"),
    rpa6 = ProtoField.ipv6("harp.rpa6", "ar$rpa (requester protocol address)"),
    tpa6 = ProtoField.ipv6("harp.tpa6", "ar$tpa (target protocol address)"),
    rha = ProtoField.ether("harp.rha", "ar$rha (requester ULA)"),
    tha = ProtoField.ether("harp.tha", "ar$tha (target ULA)"),
    rha_long = ProtoField.bytes("harp.rha_bytes", "ar$rha (requester hardware address)"),
    tha_long = ProtoField.bytes("harp.tha_bytes", "ar$tha (target hardware address)"),
    extra = ProtoField.bytes("harp.extra", "Bytes after the message"),
}
harp.fields = { H.hrd, H.pro, H.op, H.pln, H.rhl, H.thl, H.rpa4, H.tpa4, H.rpa6, H.tpa6, H.rha, H.tha, H.rha_long,
    H.tha_long, H.extra }
local bad = ProtoExpert.new("harp.malformed", "Malformed HARP message", expert.group.MALFORMED, expert.severity.ERROR)
harp.experts = { bad }

local function addr_fields(pro)
    if pro == 0x86DD then return H.rpa6, H.tpa6 end
    return H.rpa4, H.tpa4
end

function harp.dissector(tvb, pinfo, tree)
    local len = tvb:len()
    local t = tree:add(harp, tvb())
    pinfo.cols.protocol = "HARP"
    if len < 9 then
        t:add_proto_expert_info(bad, len .. " bytes is too short for the HIPARP header")
        pinfo.cols.info = "HARP (truncated)"
        return len
    end
    t:add(H.hrd, tvb(0, 2))
    t:add(H.pro, tvb(2, 2))
    local opi = t:add(H.op, tvb(4, 2))
    local pli = t:add(H.pln, tvb(6, 1))
    local rhi = t:add(H.rhl, tvb(7, 1))
    t:add(H.thl, tvb(8, 1))
    local hrd, pro, op = tvb(0, 2):uint(), tvb(2, 2):uint(), tvb(4, 2):uint()
    local pln, rhl, thl = tvb(6, 1):uint(), tvb(7, 1):uint(), tvb(8, 1):uint()
    local problem, where = nil, t
    if hrd ~= HRD_HIPARP then
        problem = "ar$hrd " .. hrd .. " is not 28 (HIPARP)"
    elseif not PLN[pro] then
        problem = string.format("ar$pro 0x%04x is not IPv4 or IPv6", pro)
    elseif pln ~= PLN[pro] then
        problem, where = string.format("ar$pln %d is not %d for ar$pro 0x%04x", pln, PLN[pro], pro), pli
    elseif (rhl ~= 6 and rhl ~= 10) or (thl ~= 6 and thl ~= 10) then
        problem, where = "hardware address lengths " .. rhl .. "/" .. thl .. " are not 6 (or 10)", rhi
    elseif len < 9 + 2 * pln + rhl + thl then
        problem = string.format("truncated: %d of %d bytes", len, 9 + 2 * pln + rhl + thl)
    elseif not OPS[op] then
        problem, where = "unknown operation " .. op, opi
    end
    if problem then where:add_proto_expert_info(bad, problem) end
    local info = OPS[op] or ("op " .. op)
    if PLN[pro] == pln and (rhl == 6 or rhl == 10) and (thl == 6 or thl == 10) and len >= 9 + 2 * pln + rhl + thl then
        local frpa, ftpa = addr_fields(pro)
        local p = 9 + 2 * pln
        t:add(frpa, tvb(9, pln))
        t:add(ftpa, tvb(9 + pln, pln))
        t:add(rhl == 6 and H.rha or H.rha_long, tvb(p, rhl))
        t:add(thl == 6 and H.tha or H.tha_long, tvb(p + rhl, thl))
        local rpa = pro == 0x86DD and tostring(tvb(9, pln):ipv6()) or tostring(tvb(9, pln):ipv4())
        local tpa = pro == 0x86DD and tostring(tvb(9 + pln, pln):ipv6()) or tostring(tvb(9 + pln, pln):ipv4())
        local rula, tula = tostring(tvb(p + rhl - 6, 6):ether()), tostring(tvb(p + rhl + thl - 6, 6):ether())
        if op == 1 then info = string.format("%s who has %s? Tell %s (%s)", info, tpa, rpa, rula)
        elseif op == 2 or op == 9 then info = string.format("%s %s is at %s", info, rpa, rula)
        elseif op == 8 then info = string.format("%s who is at %s? Tell %s (%s)", info, tula, rpa, rula)
        elseif op == 10 then info = string.format("%s %s is unknown (asked by %s)", info, tpa, rpa) end
        if len > p + rhl + thl then t:add(H.extra, tvb(p + rhl + thl)) end
    end
    t:append_text(": " .. (OPS[op] or "?"))
    pinfo.cols.info = info .. (problem and (" [" .. problem .. "]") or "")
    return len
end
