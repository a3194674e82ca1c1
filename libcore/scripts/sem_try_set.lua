-- Semaphore (both kinds) or count-down latch: set the count when there is none.
-- KEYS[1] count, KEYS[2] channel
-- ARGV[1] count (>= 1), ARGV[2] publish command, ARGV[3] message (the count
-- for a semaphore, "1" for a latch, as Redisson's)
-- Returns 1 set, 0 it existed (unchanged).
if redis.call('exists', KEYS[1]) == 1 then
    redis.call('get', KEYS[1]) -- WRONGTYPE for a key that is not a string
    return 0
end
redis.call(ARGV[2], KEYS[2], ARGV[3])
redis.call('set', KEYS[1], ARGV[1])
return 1
