-- (included) The count at a semaphore or latch key: false when the key is
-- missing, else an integer; anything else is refused before any change.
local function hl_count(key)
    local v = redis.call('get', key)
    if v == false then
        return false
    end
    if #v > 16 or not string.match(v, '^%-?%d+$') then
        return redis.error_reply('WRONGTYPE key holds a string that is not a permit count')
    end
    return tonumber(v)
end
-- Counts stay below 10^15 so that Lua's numbers hold them exactly.
local HL_COUNT_MAX = 999999999999999
