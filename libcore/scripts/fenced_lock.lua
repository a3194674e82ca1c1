-- Fenced lock acquire: the reentrant lock plus a fencing token.
-- KEYS[1] lock hash, KEYS[2] token counter (redisson_lock_token:{N})
-- ARGV[1] lease ms, ARGV[2] owner
-- Returns {1, hold count, token} when taken or re-entered (every grant,
-- re-entry included, takes the next value of the counter, as Redisson's
-- RFencedLock does), {0, holder pttl} otherwise.
local free = redis.call('exists', KEYS[1]) == 0
if free or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local token = redis.call('incr', KEYS[2])
    if token < 1 then -- a corrupt counter: refuse before taking anything
        return redis.error_reply('ERR fencing token counter ' .. KEYS[2] .. ' is not positive')
    end
    local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1, holds, token}
end
return {0, redis.call('pttl', KEYS[1])}
