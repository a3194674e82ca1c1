-- Semaphore (both kinds): add ARGV[1] permits (may be negative), or with
-- ARGV[3] = "set" make the count exactly ARGV[1]. The new count is
-- published (waiters retry).
-- KEYS[1] permit count, KEYS[2] channel
-- ARGV[1] permits, ARGV[2] publish command, ARGV[3] "add" or "set"
-- Returns the new count.
-- #include sem_count.lua
local n = hl_count(KEYS[1])
if type(n) == 'table' then return n end
local v = tonumber(ARGV[1])
if ARGV[3] ~= 'set' then
    v = (n or 0) + v
end
if v > HL_COUNT_MAX or v < -HL_COUNT_MAX then
    return redis.error_reply('ERR hilock: permit count would overflow')
end
local s = string.format('%d', v)
redis.call(ARGV[2], KEYS[2], s)
redis.call('set', KEYS[1], s)
return v
