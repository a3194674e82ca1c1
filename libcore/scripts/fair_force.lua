#!lua flags=allow-oom
-- Fair force unlock, whoever holds it; wakes the first waiter, and tells
-- the holder on the lock's channel.
-- KEYS[1] lock hash, KEYS[2] waiter queue, KEYS[3] waiter deadlines,
-- KEYS[4] channel base; ARGV[1] message ("0"), ARGV[2] publish command
-- Returns 1 when a lock was deleted, 0 when there was none.
-- allow-oom and wake-up before delete: as unlock.lua.
local kind = redis.call('type', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE key is not a lock')
end
-- #include fair_evict.lua
if redis.call('exists', KEYS[1]) == 1 then
    -- the holder listens on the lock's own channel (hilock): it checks its
    -- hold at once instead of at its next renewal. Redisson's fair waiters
    -- listen on their own channels only, so nobody else is woken by it.
    redis.call(ARGV[2], KEYS[4], ARGV[1])
end
local head = redis.call('lindex', KEYS[2], 0)
if head then
    redis.call(ARGV[2], KEYS[4] .. ':' .. head, ARGV[1])
end
return redis.call('del', KEYS[1])
