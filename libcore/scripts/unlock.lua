-- Reentrant release of one hold, idempotent per request.
-- KEYS[1] lock hash, KEYS[2] wake-up channel, KEYS[3] unlock latch (per request)
-- ARGV[1] message ("0"), ARGV[2] lease ms re-applied while holds remain,
-- ARGV[3] owner, ARGV[4] latch lifetime ms, ARGV[5] publish command
-- Returns the holds left (0 = released and waiters told), or -1 = not owner.
-- Out of memory (maxmemory with noeviction) a release must still work: the
-- server refuses a command that may grow memory only while the script has
-- written nothing yet, so each path writes first with a command that cannot
-- grow it (PEXPIRE, DEL) and the latch comes after. (A "#!lua flags=allow-oom"
-- line would do the same but costs the server about a tenth more per pair.)
-- The latch is written only when something changed: "not owner" sent again
-- answers the same without it.
-- The wake-up is published before anything changes: a PUBLISH refused by the
-- server's ACL aborts the script with nothing released, instead of deleting
-- the lock and then failing.
local earlier = redis.call('get', KEYS[3])
if earlier then
    return tonumber(earlier)
end
local holds = tonumber(redis.call('hget', KEYS[1], ARGV[3]))
if not holds then
    return -1
end
local left = holds - 1
if left > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('hincrby', KEYS[1], ARGV[3], -1)
else
    left = 0
    redis.call(ARGV[5], KEYS[2], ARGV[1])
    redis.call('del', KEYS[1])
end
redis.call('set', KEYS[3], left, 'px', ARGV[4])
return left
