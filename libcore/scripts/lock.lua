-- Reentrant acquire, idempotent per request.
-- KEYS[1] lock hash
-- ARGV[1] lease ms, ARGV[2] owner, ARGV[3] latch lifetime ms (0 or absent = no latch),
-- ARGV[4] "<latch key>:<request seq>": the acquire latch (one per owner, same
-- hash slot as KEYS[1]; an argument, not a KEY: while a cluster slot
-- migrates, a second key that does not exist yet would turn every attempt
-- into TRYAGAIN) and this acquire call's number
-- Returns {1, hold count} when taken or re-entered, {0, holder pttl} otherwise.
-- A grant leaves "<seq>:<hold count>" in the latch, so the same request sent
-- again (its first reply was lost with the connection) returns that answer
-- instead of entering once more; "x<seq>:..." (the caller gave the request
-- up, acquire_settle.lua) makes a late copy of it take nothing. The owner's
-- next call overwrites the latch: one key per owner, not one per call, so a
-- pair creates no key for the server to expire (the client moves its owners
-- to a new latch key after a lost reply, so a late copy still finds its own
-- answer). The latch is only read when the lock is free or ours (a lock held
-- by another answers as before).
-- A key of another type makes HEXISTS fail with WRONGTYPE and nothing changes.
local free = redis.call('exists', KEYS[1]) == 0
if free or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local latch, seq
    if tonumber(ARGV[3] or 0) > 0 then -- (benchmarks call it without a latch)
        latch, seq = string.match(ARGV[4], '^(.+):(%d+)$')
    end
    if latch then
        local earlier = redis.call('get', latch)
        if earlier then
            local x, s, v = string.match(earlier, '^(x?)(%d+):(%d*)$')
            if s == seq then
                if x == 'x' then
                    return {0, redis.call('pttl', KEYS[1])}
                end
                return {1, tonumber(v)}
            end
        end
    end
    local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    if latch then
        redis.call('set', latch, seq .. ':' .. holds, 'px', ARGV[3])
    end
    return {1, holds}
end
return {0, redis.call('pttl', KEYS[1])}
