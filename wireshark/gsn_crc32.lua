-- CRC-32 as zlib computes it (reflected polynomial 0xEDB88320, init and final XOR
-- 0xFFFFFFFF) for the gsn-revival dissectors that check one (gsn_servernet.lua: the packet
-- CRC; gsn_ib.lua: the ICRC).  A module: they load it with require("gsn_crc32") (Wireshark
-- puts the folder of every Lua script it loads on require's path, plugin folders and
-- -X lua_script: alike).  Wireshark also runs this file as a plugin; it registers nothing.

local bit = require("gsn_bit") -- band, bor, bxor, lshift, rshift on any Lua Wireshark embeds
local band, bxor, rshift = bit.band, bit.bxor, bit.rshift

local TABLE = {}
for i = 0, 255 do
    local c = i
    for _ = 1, 8 do
        if band(c, 1) ~= 0 then c = bxor(rshift(c, 1), 0xEDB88320) else c = rshift(c, 1) end
    end
    TABLE[i] = c
end

local M = {}

-- the CRC-32 register after the bytes first..last of s (8 bytes per s:byte call, and
-- arithmetic for the shift and the low byte: fewer function calls per byte)
function M.update(crc, s, first, last)
    local floor, t = math.floor, TABLE
    local k = first
    while k + 7 <= last do
        local b1, b2, b3, b4, b5, b6, b7, b8 = s:byte(k, k + 7)
        crc = bxor(floor(crc / 256), t[bxor(crc % 256, b1)])
        crc = bxor(floor(crc / 256), t[bxor(crc % 256, b2)])
        crc = bxor(floor(crc / 256), t[bxor(crc % 256, b3)])
        crc = bxor(floor(crc / 256), t[bxor(crc % 256, b4)])
        crc = bxor(floor(crc / 256), t[bxor(crc % 256, b5)])
        crc = bxor(floor(crc / 256), t[bxor(crc % 256, b6)])
        crc = bxor(floor(crc / 256), t[bxor(crc % 256, b7)])
        crc = bxor(floor(crc / 256), t[bxor(crc % 256, b8)])
        k = k + 8
    end
    for j = k, last do
        crc = bxor(floor(crc / 256), t[bxor(crc % 256, s:byte(j))])
    end
    return crc
end

-- CRC-32 of the bytes first..last of s
function M.crc32(s, first, last)
    return bxor(M.update(0xFFFFFFFF, s, first, last), 0xFFFFFFFF)
end

return M
