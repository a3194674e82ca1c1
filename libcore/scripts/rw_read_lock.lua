-- Read-write lock: take (or re-enter) the read side.
-- KEYS[1] lock hash, KEYS[2] key prefix of the per-hold timeout keys ("{N}")
-- ARGV[1] lease ms, ARGV[2] owner ("<uuid>:<tid>")
-- Layout (Redisson's): field "mode" = "read" | "write"; one field per reader
-- owner holding its read count; the writer's field is "<owner>:write"; each
-- read hold k of an owner has a key "{N}:<owner>:rwlock_timeout:<k>" whose
-- PTTL is that hold's lease.
-- Returns {1, read holds of the owner} or {0, the lock's pttl}.
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false and redis.call('exists', KEYS[1]) == 1 then
    return redis.error_reply('WRONGTYPE key holds a lock that is not a read-write lock')
end
if mode == false or mode == 'read' or
   (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2] .. ':write') == 1) then
    if mode == false then
        redis.call('hset', KEYS[1], 'mode', 'read')
    end
    local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('set', KEYS[2] .. ':' .. ARGV[2] .. ':rwlock_timeout:' .. holds, 1,
               'px', ARGV[1])
    local left = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], math.max(left, tonumber(ARGV[1])))
    return {1, holds}
end
return {0, redis.call('pttl', KEYS[1])}
