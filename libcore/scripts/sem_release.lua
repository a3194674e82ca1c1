#!lua flags=allow-oom
-- Semaphore: give back ARGV[1] permits and tell the waiters how many are free
-- (the message is the new count, as Redisson's). Published first: a refused
-- PUBLISH changes nothing.
-- KEYS[1] permit count, KEYS[2] channel redisson_sc:{N}
-- ARGV[1] permits (>= 1), ARGV[2] publish command
-- Returns the new count.
-- #include sem_count.lua
local n = hl_count(KEYS[1])
if type(n) == 'table' then return n end
local v = (n or 0) + tonumber(ARGV[1])
if v > HL_COUNT_MAX then
    return redis.error_reply('ERR hilock: permit count would overflow')
end
redis.call(ARGV[2], KEYS[2], string.format('%d', v))
redis.call('incrby', KEYS[1], ARGV[1])
return v
