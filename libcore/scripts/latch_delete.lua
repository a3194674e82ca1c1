#!lua flags=allow-oom
-- Count-down latch or semaphore: delete it (force) and publish ARGV[1] so
-- that waiters look again. KEYS[1] count, KEYS[2] channel, KEYS[3] leases
-- ZSET (permit-expirable semaphore; else the count key again)
-- ARGV[1] message, ARGV[2] publish command. Returns 1 deleted, 0 none.
if redis.call('exists', KEYS[1]) == 0 then
    return 0
end
redis.call('get', KEYS[1]) -- WRONGTYPE: not ours to delete
redis.call(ARGV[2], KEYS[2], ARGV[1])
redis.call('del', KEYS[1], KEYS[3])
return 1
