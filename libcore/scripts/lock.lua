-- Reentrant acquire, idempotent per request.
-- KEYS[1] lock hash
-- ARGV[1] lease ms, ARGV[2] owner, ARGV[3] latch lifetime ms (0 or absent = no latch),
-- ARGV[4] acquire latch key (per acquire call, same hash slot as KEYS[1]; an
-- argument, not a KEY: while a cluster slot migrates, a second key that does
-- not exist yet would turn every attempt into TRYAGAIN)
-- Returns {1, hold count} when taken or re-entered, {0, holder pttl} otherwise.
-- A grant leaves its hold count in the latch, so the same request sent again
-- (its first reply was lost with the connection) returns that answer instead
-- of entering once more; a latch starting with "x" (the caller gave the
-- request up, acquire_settle.lua)
-- makes a late copy of the request take nothing. The latch is only read when
-- the lock is free or ours (a lock held by another answers as before).
-- A key of another type makes HEXISTS fail with WRONGTYPE and nothing changes.
local free = redis.call('exists', KEYS[1]) == 0
if free or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local latched = tonumber(ARGV[3] or 0) > 0 -- (benchmarks call it without a latch)
    if latched then
        local earlier = redis.call('get', ARGV[4])
        if earlier and string.sub(earlier, 1, 1) == 'x' then
            return {0, redis.call('pttl', KEYS[1])}
        elseif earlier then
            return {1, tonumber(earlier)}
        end
    end
    local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    if latched then
        redis.call('set', ARGV[4], holds, 'px', ARGV[3])
    end
    return {1, holds}
end
return {0, redis.call('pttl', KEYS[1])}
