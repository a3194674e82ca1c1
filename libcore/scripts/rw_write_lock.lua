-- Read-write lock: take (or re-enter) the write side, idempotent per request.
-- KEYS[1] lock hash
-- ARGV[1] lease ms, ARGV[2] writer field ("<owner>:write"), ARGV[3] latch
-- lifetime ms, ARGV[4] "<acquire latch key>:<request seq>" (as in lock.lua;
-- absent: no latch)
-- Returns {1, write holds} or {0, the lock's pttl}. Readers (even the
-- caller's own read holds) exclude a new writer, as in Redisson.
-- A grant leaves "<seq>:<holds>" in the latch: the same request sent again
-- answers that instead of entering twice; "x<seq>:..." (given up,
-- acquire_settle.lua) makes a late copy take nothing.
-- #include acquire_latch.lua
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false and redis.call('exists', KEYS[1]) == 1 then
    return redis.error_reply('WRONGTYPE key holds a lock that is not a read-write lock')
end
local mine = mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1
if mode == false or mine then
    local latch, seq = hl_latch_arg(ARGV[3], ARGV[4])
    local replay = latch and hl_latch_replay(latch, seq, KEYS[1])
    if replay then
        return replay
    end
    local holds = 1
    if mode == false then
        redis.call('hset', KEYS[1], 'mode', 'write', ARGV[2], 1)
        redis.call('pexpire', KEYS[1], ARGV[1])
    else
        holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
        local left = redis.call('pttl', KEYS[1])
        redis.call('pexpire', KEYS[1], math.max(left, tonumber(ARGV[1])))
    end
    if latch then
        hl_latch_set(latch, seq .. ':' .. holds, ARGV[3])
    end
    return {1, holds}
end
return {0, redis.call('pttl', KEYS[1])}
