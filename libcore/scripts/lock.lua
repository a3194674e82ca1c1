-- Reentrant acquire, idempotent per request.
-- KEYS[1] lock hash
-- ARGV[1] lease ms, ARGV[2] owner, ARGV[3] latch lifetime ms, ARGV[4]
-- "<latch key>:<request seq>": the owner's acquire latch (same hash slot as
-- KEYS[1]; see acquire_latch.lua for why it is an argument) and this acquire
-- call's number. ARGV[3..4] absent: no latch.
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
-- A grant also marks the owner's unlock latch with this call's seq
-- (unlock_latch.lua): a late copy of an earlier release changes nothing.
-- A key of another type makes HEXISTS fail with WRONGTYPE and nothing changes.
-- #include acquire_latch.lua
-- #include unlock_latch.lua
local free = redis.call('exists', KEYS[1]) == 0
if free or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local latch, seq = hl_latch_arg(ARGV[3], ARGV[4])
    local replay = latch and hl_latch_replay(latch, seq, KEYS[1])
    if replay then
        return replay
    end
    local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    hl_unlock_latch_grant(KEYS[1], ARGV[2], seq, ARGV[1])
    if latch then
        hl_latch_set(latch, seq .. ':' .. holds, ARGV[3])
    end
    return {1, holds}
end
return {0, redis.call('pttl', KEYS[1])}
