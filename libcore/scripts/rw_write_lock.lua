-- Read-write lock: take (or re-enter) the write side.
-- KEYS[1] lock hash; ARGV[1] lease ms, ARGV[2] writer field ("<owner>:write")
-- Returns {1, write holds} or {0, the lock's pttl}. Readers (even the
-- caller's own read holds) exclude a new writer, as in Redisson.
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    if redis.call('exists', KEYS[1]) == 1 then
        return redis.error_reply('WRONGTYPE key holds a lock that is not a read-write lock')
    end
    redis.call('hset', KEYS[1], 'mode', 'write', ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1, 1}
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    local left = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], math.max(left, tonumber(ARGV[1])))
    return {1, holds}
end
return {0, redis.call('pttl', KEYS[1])}
