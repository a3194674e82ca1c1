#!lua flags=allow-oom
-- Permit-expirable semaphore: give back the permit ARGV[1] (16 raw bytes).
-- KEYS[1] permit count, KEYS[2] channel, KEYS[3] leases ZSET
-- ARGV[1] permit id, ARGV[2] publish command, ARGV[3] (optional) the
-- given-back ids' set "hilock_pes_gone:{N}", ARGV[4] its entries' lifetime ms
-- Returns 1 released, 0 no such permit (released before, or never taken),
-- -1 its lease had ended (it is given back all the same, as Redisson does).
-- Every id asked for is filed in the given-back set (pes_gone.lua), taken
-- or not: a settle may run before the lost acquire it gives up.
-- #include sem_count.lua
-- #include pes_evict.lua
-- #include pes_gone.lua
local n = hl_count(KEYS[1])
if type(n) == 'table' then return n end
local score = redis.call('zscore', KEYS[3], ARGV[1])
local now = hl_now_ms()
local gone, gone_ttl = hl_gone_arg(ARGV[3], ARGV[4])
if score == false then
    if gone then
        hl_gone_add(gone, ARGV[1], gone_ttl, now)
    end
    return 0
end
local v = (n or 0) + 1
redis.call(ARGV[2], KEYS[2], string.format('%d', v))
redis.call('zrem', KEYS[3], ARGV[1])
redis.call('incrby', KEYS[1], 1)
if gone then
    hl_gone_add(gone, ARGV[1], gone_ttl, now)
end
if tonumber(score) <= now then
    return -1
end
return 1
