-- Read-write lock: release one read hold, idempotent per request.
-- KEYS[1] lock hash, KEYS[2] channel (redisson_rwlock:{N}), KEYS[3] unlock
-- latch (per request), KEYS[4] key prefix of the timeout keys ("{N}")
-- ARGV[1] message ("0": a writer may go), ARGV[2] owner, ARGV[3] latch
-- lifetime ms, ARGV[4] publish command
-- Returns the owner's read holds left (0 = none), or -1 = not a reader.
-- The lock lives as long as its longest remaining read hold; with none left
-- (and no writer) it is deleted and waiters are told.
local earlier = redis.call('get', KEYS[3])
if earlier then
    return tonumber(earlier)
end
local left = -1
local mode = redis.call('hget', KEYS[1], 'mode')
if mode ~= false and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    left = redis.call('hincrby', KEYS[1], ARGV[2], -1)
    if left <= 0 then
        left = 0
        redis.call('hdel', KEYS[1], ARGV[2])
    end
    redis.call('del', KEYS[4] .. ':' .. ARGV[2] .. ':rwlock_timeout:' .. (left + 1))
    local keep = false
    if redis.call('hlen', KEYS[1]) > 1 then
        local longest = -3
        for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
            local n = tonumber(redis.call('hget', KEYS[1], field))
            if n then
                for i = n, 1, -1 do
                    local t = redis.call('pttl', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. i)
                    if t > longest then
                        longest = t
                    end
                end
            end
        end
        if longest > 0 then
            redis.call('pexpire', KEYS[1], longest)
            keep = true
        elseif mode == 'write' then
            keep = true
        end
    end
    if not keep then
        redis.call('del', KEYS[1])
        redis.call(ARGV[4], KEYS[2], ARGV[1])
    end
end
redis.call('set', KEYS[3], left, 'px', ARGV[3])
return left
