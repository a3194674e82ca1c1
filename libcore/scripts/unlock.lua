-- Reentrant release of one hold, idempotent per request.
-- KEYS[1] lock hash, KEYS[2] wake-up channel, KEYS[3] unlock latch
-- ARGV[1] message ("0"), ARGV[2] lease ms re-applied while holds remain,
-- ARGV[3] owner, ARGV[4] latch lifetime ms, ARGV[5] publish command,
-- ARGV[6] (optional) the request's seq: then KEYS[3] is the owner's latch,
-- overwritten by each of its releases, holding "<seq>:<answer>", and only an
-- answer under the same seq replays (no key per release for the server to
-- expire); without it KEYS[3] is the request's own latch (Redisson's way).
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
local seq = ARGV[6]
local earlier = redis.call('get', KEYS[3])
if earlier then
    if not seq then
        return tonumber(earlier)
    end
    local s, v = string.match(earlier, '^(%d+):(-?%d+)$')
    if s == seq then
        return tonumber(v)
    end
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
redis.call('set', KEYS[3], seq and (seq .. ':' .. left) or left, 'px', ARGV[4])
return left
