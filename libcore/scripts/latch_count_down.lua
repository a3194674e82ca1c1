#!lua flags=allow-oom
-- Count-down latch (Redisson's RCountDownLatch): count down by one; at zero
-- the key goes and "0" is published (every waiter goes), first, so that a
-- refused PUBLISH changes nothing.
-- KEYS[1] count, KEYS[2] channel redisson_countdownlatch__channel__{N}
-- ARGV[1] publish command
-- Returns the count left (0 also when there was no latch).
-- #include sem_count.lua
local n = hl_count(KEYS[1])
if type(n) == 'table' then return n end
if n == false then
    return 0
end
if n <= 1 then
    if n == 1 then
        redis.call(ARGV[1], KEYS[2], '0')
    end
    redis.call('del', KEYS[1])
    return 0
end
return redis.call('decr', KEYS[1])
