-- 32-bit bit operations for the gsn-revival dissectors, whatever Lua Wireshark embeds:
-- bit32 (Lua 5.2, Wireshark <= 4.2), LuaBitOp's bit, else Lua 5.3+ operators.  A module:
-- require("gsn_bit") -> {band, bor, bxor, lshift, rshift}.  Wireshark also runs this file
-- as a plugin; it registers nothing.

local bit = bit32 or bit
if not bit then
    bit = load([[return {
        band = function(a, b) return a & b end, bor = function(a, b) return a | b end,
        bxor = function(a, b) return a ~ b end,
        lshift = function(a, n) return (a << n) & 0xFFFFFFFF end, rshift = function(a, n) return a >> n end }]])()
end

return { band = bit.band, bor = bit.bor, bxor = bit.bxor, lshift = bit.lshift, rshift = bit.rshift }
