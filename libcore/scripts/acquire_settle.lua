-- Give up an acquire request whose reply was lost with its connection.
-- KEYS[1] the request's acquire latch; ARGV[1] latch lifetime ms
-- Returns the hold count the request had taken, or "" when it took nothing.
-- The latch then holds "x" followed by that answer: a late copy of the
-- request takes nothing (lock.lua, fair_lock.lua), and this settle sent
-- again (its own reply lost) answers the same.
local v = redis.call('get', KEYS[1])
if v and string.sub(v, 1, 1) == 'x' then
    return string.sub(v, 2)
end
redis.call('set', KEYS[1], 'x' .. (v or ''), 'px', ARGV[1])
return v or ''
