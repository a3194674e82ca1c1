-- Read-write lock: delete it whoever holds it (readers and writer).
-- KEYS[1] lock hash, KEYS[2] channel; ARGV[1] message ("1": wake all),
-- ARGV[2] publish command
-- Returns 1 deleted, 0 there was no read-write lock. A key of another type
-- (or a plain lock hash) is left alone.
if redis.call('hget', KEYS[1], 'mode') then
    redis.call('del', KEYS[1])
    redis.call(ARGV[2], KEYS[2], ARGV[1])
    return 1
end
return 0
