-- Read-write lock: release one write hold, idempotent per request.
-- KEYS[1] lock hash, KEYS[2] channel (redisson_rwlock:{N}), KEYS[3] unlock
-- latch (per request)
-- ARGV[1] message ("1": wake every waiter, readers may all go), ARGV[2]
-- lease ms re-applied while write holds remain, ARGV[3] writer field,
-- ARGV[4] latch lifetime ms, ARGV[5] publish command
-- Returns the write holds left (0 = released), or -1 = not the writer.
-- The last write hold of a writer that also reads turns the lock back into
-- a read lock (readers may join: waiters are told).
local earlier = redis.call('get', KEYS[3])
if earlier then
    return tonumber(earlier)
end
local left = -1
if redis.call('hget', KEYS[1], 'mode') == 'write' and
   redis.call('hexists', KEYS[1], ARGV[3]) == 1 then
    left = redis.call('hincrby', KEYS[1], ARGV[3], -1)
    if left > 0 then
        redis.call('pexpire', KEYS[1], ARGV[2])
    else
        left = 0
        redis.call('hdel', KEYS[1], ARGV[3])
        if redis.call('hlen', KEYS[1]) == 1 then
            redis.call('del', KEYS[1])
        else
            redis.call('hset', KEYS[1], 'mode', 'read')
        end
        redis.call(ARGV[5], KEYS[2], ARGV[1])
    end
end
redis.call('set', KEYS[3], left, 'px', ARGV[4])
return left
