-- Extend a held lock's lease by some time (redis-py's Lock.extend).
-- KEYS[1] lock hash; ARGV[1] ms to add, ARGV[2] owner
-- Returns 1 extended, 0 the owner does not hold it, -1 the key has no
-- expiry (nothing to add to). The owner's unlock latch lives as long as the
-- hold (unlock_latch.lua).
-- #include unlock_latch.lua
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return 0
end
local t = redis.call('pttl', KEYS[1])
if t < 0 then
    return -1
end
redis.call('pexpire', KEYS[1], t + tonumber(ARGV[1]))
hl_unlock_latch_keep(KEYS[1], ARGV[2], t + tonumber(ARGV[1]))
return 1
