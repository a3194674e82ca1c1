-- Permit-expirable semaphore: free permits, after giving back expired ones.
-- KEYS[1] permit count, KEYS[2] leases ZSET, KEYS[3] channel
-- ARGV[1] publish command. Returns the count (0 when none).
-- #include sem_count.lua
-- #include pes_evict.lua
local n = hl_count(KEYS[1])
if type(n) == 'table' then return n end
redis.call('zcard', KEYS[2])
hl_pes_evict(KEYS[1], KEYS[2], KEYS[3], ARGV[1], hl_now_ms())
return hl_count(KEYS[1]) or 0
