-- Read-write lock: watchdog renewal of a reader's holds.
-- KEYS[1] lock hash, KEYS[2] key prefix of the timeout keys ("{N}")
-- ARGV[1] lease ms, ARGV[2] owner
-- Returns 1 renewed (the lock and the owner's hold timeout keys), 0 the
-- owner no longer reads it (lost).
local n = tonumber(redis.call('hget', KEYS[1], ARGV[2]))
if n == nil or redis.call('hget', KEYS[1], 'mode') == false then
    return 0
end
redis.call('pexpire', KEYS[1], ARGV[1])
for i = n, 1, -1 do
    redis.call('pexpire', KEYS[2] .. ':' .. ARGV[2] .. ':rwlock_timeout:' .. i, ARGV[1])
end
return 1
