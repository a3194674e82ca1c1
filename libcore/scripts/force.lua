#!lua flags=allow-oom
-- Force unlock, whoever holds it.
-- KEYS[1] lock hash, KEYS[2] wake-up channel
-- ARGV[1] message ("0"), ARGV[2] publish command
-- Returns 1 when a lock was deleted, 0 when there was none.
-- A key that is not a hash is left alone and reported as WRONGTYPE.
-- allow-oom and wake-up before delete: as unlock.lua.
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
    return 0
end
if kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE key is not a lock')
end
redis.call(ARGV[2], KEYS[2], ARGV[1])
redis.call('del', KEYS[1])
return 1
