-- Give up an acquire request whose reply was lost with its connection.
-- KEYS[1] the owner's acquire latch (as lock.lua, fair_lock.lua,
-- fenced_lock.lua and the read-write scripts get it); ARGV[1] latch lifetime
-- ms, ARGV[2] the request's seq
-- Returns the hold count the request had taken, or "" when it took nothing.
-- The latch then holds "x<seq>:" followed by that answer: a late copy of the
-- request takes nothing (lock.lua, fair_lock.lua), and this settle sent
-- again (its own reply lost) answers the same. The client moves the owner to
-- a new latch key afterwards, so the owner's next request does not
-- overwrite the mark.
local latch, seq = KEYS[1], ARGV[2]
if not seq or not string.match(seq, '^%d+$') then
    return redis.error_reply('ERR bad acquire latch argument')
end
local v = redis.call('get', latch)
if v then
    -- "<seq>:<holds>", or "<seq>:<holds>:<token>" (fenced_lock.lua); the
    -- read-write scripts keep "<seq>:<holds>" too
    local x, s, holds = string.match(v, '^(x?)(%d+):(%d*)')
    if s == seq then
        if x == 'x' then
            return holds
        end
        redis.call('set', latch, 'x' .. seq .. ':' .. holds, 'px', ARGV[1])
        return holds
    end
end
redis.call('set', latch, 'x' .. seq .. ':', 'px', ARGV[1])
return ''
