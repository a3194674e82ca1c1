-- Permit-expirable semaphore: a new lease for a taken permit (Redisson's
-- updateLeaseTime), after giving back expired permits.
-- KEYS[1] permit count, KEYS[2] leases ZSET, KEYS[3] channel
-- ARGV[1] permit id (16 raw bytes), ARGV[2] lease ms (> 0), ARGV[3] publish command
-- Returns 1 renewed, 0 no such permit (released, or its lease had ended).
-- #include sem_count.lua
-- #include pes_evict.lua
local n = hl_count(KEYS[1])
if type(n) == 'table' then return n end
redis.call('zcard', KEYS[2])
local now = hl_now_ms()
hl_pes_evict(KEYS[1], KEYS[2], KEYS[3], ARGV[3], now)
if redis.call('zscore', KEYS[2], ARGV[1]) == false then
    return 0
end
redis.call('zadd', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
return 1
