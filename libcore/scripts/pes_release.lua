#!lua flags=allow-oom
-- Permit-expirable semaphore: give back the permit ARGV[1] (16 raw bytes).
-- KEYS[1] permit count, KEYS[2] channel, KEYS[3] leases ZSET
-- ARGV[1] permit id, ARGV[2] publish command
-- Returns 1 released, 0 no such permit (released before, or never taken),
-- -1 its lease had ended (it is given back all the same, as Redisson does).
-- #include sem_count.lua
-- #include pes_evict.lua
local n = hl_count(KEYS[1])
if type(n) == 'table' then return n end
local score = redis.call('zscore', KEYS[3], ARGV[1])
if score == false then
    return 0
end
local v = (n or 0) + 1
redis.call(ARGV[2], KEYS[2], string.format('%d', v))
redis.call('zrem', KEYS[3], ARGV[1])
redis.call('incrby', KEYS[1], 1)
if tonumber(score) <= hl_now_ms() then
    return -1
end
return 1
