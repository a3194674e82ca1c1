-- Reentrant acquire.
-- KEYS[1] lock hash
-- ARGV[1] lease ms, ARGV[2] owner
-- Returns {1, hold count} when taken or re-entered, {0, holder pttl} otherwise.
-- A key of another type makes HEXISTS fail with WRONGTYPE and nothing changes.
local free = redis.call('exists', KEYS[1]) == 0
if free or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1, holds}
end
return {0, redis.call('pttl', KEYS[1])}
