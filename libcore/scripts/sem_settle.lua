#!lua flags=allow-oom
-- Semaphore: give up an acquire request whose reply was lost with its
-- connection (the server may or may not have run it).
-- KEYS[1] permit count, KEYS[2] channel redisson_sc:{N}, KEYS[3] the
-- request's latch (sem_acquire.lua's KEYS[2])
-- ARGV[1] the request's seq, ARGV[2] latch lifetime ms, ARGV[3] publish command
-- Returns the permits given back (the request had taken them), or 0 when it
-- took nothing. The latch then holds "x<seq>:<permits given back>" (or
-- "x<seq>:"): a late copy of the request takes nothing, and this settle
-- sent again answers the same without giving back twice. Published first,
-- as sem_release.lua: a refused PUBLISH changes nothing.
-- #include sem_count.lua
local v = redis.call('get', KEYS[3])
local x, s, k
if v then
    x, s, k = string.match(v, '^(x?)(%d+):(%d*)$')
end
if s == ARGV[1] then
    if x == 'x' then
        return tonumber(k) or 0
    end
    local n = hl_count(KEYS[1])
    if type(n) == 'table' then return n end
    local total = (n or 0) + tonumber(k)
    if total > HL_COUNT_MAX then
        return redis.error_reply('ERR hilock: permit count would overflow')
    end
    redis.call(ARGV[3], KEYS[2], string.format('%d', total))
    redis.call('incrby', KEYS[1], k)
    redis.call('set', KEYS[3], 'x' .. s .. ':' .. k, 'px', ARGV[2])
    return tonumber(k)
end
redis.call('set', KEYS[3], 'x' .. ARGV[1] .. ':', 'px', ARGV[2])
return 0
