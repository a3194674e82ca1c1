-- Read-write lock: take (or re-enter) the read side, idempotent per request.
-- KEYS[1] lock hash, KEYS[2] key prefix of the per-hold timeout keys ("{N}")
-- ARGV[1] lease ms, ARGV[2] owner ("<uuid>:<tid>"), ARGV[3] latch lifetime
-- ms, ARGV[4] "<acquire latch key>:<request seq>" (as in lock.lua; absent:
-- no latch)
-- Layout (Redisson's): field "mode" = "read" | "write"; one field per reader
-- owner holding its read count; the writer's field is "<owner>:write"; each
-- read hold k of an owner has a key "{N}:<owner>:rwlock_timeout:<k>" whose
-- PTTL is that hold's lease.
-- Returns {1, read holds of the owner} or {0, the lock's pttl}.
-- A grant leaves "<seq>:<holds>" in the latch: the same request sent again
-- (its reply lost with the connection) answers that instead of taking a
-- second read hold; "x<seq>:..." (given up, acquire_settle.lua) makes a late
-- copy take nothing. Read only on the paths that would change the lock.
-- #include acquire_latch.lua
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false and redis.call('exists', KEYS[1]) == 1 then
    return redis.error_reply('WRONGTYPE key holds a lock that is not a read-write lock')
end
if mode == false or mode == 'read' or
   (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2] .. ':write') == 1) then
    local latch, seq = hl_latch_arg(ARGV[3], ARGV[4])
    local replay = latch and hl_latch_replay(latch, seq, KEYS[1])
    if replay then
        return replay
    end
    if mode == false then
        redis.call('hset', KEYS[1], 'mode', 'read')
    end
    local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('set', KEYS[2] .. ':' .. ARGV[2] .. ':rwlock_timeout:' .. holds, 1,
               'px', ARGV[1])
    local left = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], math.max(left, tonumber(ARGV[1])))
    if latch then
        hl_latch_set(latch, seq .. ':' .. holds, ARGV[3])
    end
    return {1, holds}
end
return {0, redis.call('pttl', KEYS[1])}
