-- Reentrant release of one hold, idempotent per request.
-- KEYS[1] lock hash
-- ARGV[1] wake-up channel, ARGV[2] unlock latch, ARGV[3] message ("0"),
-- ARGV[4] lease ms re-applied while holds remain, ARGV[5] owner, ARGV[6]
-- latch lifetime ms, ARGV[7] publish command,
-- ARGV[8] (optional) the request's seq: then ARGV[2] is the owner's latch,
-- overwritten by each of its releases, holding "<seq>:<answer>", and only an
-- answer under the same seq replays (no key per release for the server to
-- expire); without it ARGV[2] is the request's own latch (Redisson's way).
-- A seq below the latch's is a late copy of an older call and answers -1
-- with nothing changed: the owner has released or been granted the lock
-- again since (unlock_latch.lua keeps the latch for as long as it holds).
-- The channel and the latch are arguments, not KEYS (both in the lock's
-- slot): while a cluster slot migrates, a declared key the node does not
-- have (a channel never is one; a latch rarely exists) turns the whole call
-- into TRYAGAIN until the migration ends. The latch is read and written
-- with redis.pcall instead, as acquire_latch.lua does: one that is not on
-- this node during a migration is not replayed or kept, and the release
-- goes on as one without a latch.
-- Returns the holds left (0 = released and waiters told), or -1 = not owner.
-- Out of memory (maxmemory with noeviction) a release must still work: the
-- server refuses a command that may grow memory only while the script has
-- written nothing yet, so each path writes first with a command that cannot
-- grow it (PEXPIRE, DEL) and the latch comes after. (A "#!lua flags=allow-oom"
-- line would do the same but costs the server about a tenth more per pair.)
-- With the owner's latch (a seq) it is written only when something changed:
-- "not owner" sent again answers the same without it, and a copy that comes
-- after a later grant is refused by the grant's number. A request's own
-- latch (no seq: a settle's undo) keeps every answer, "not owner" too: a
-- copy of the request that comes after the owner was granted again must
-- answer from it, not release that new hold.
-- The wake-up is published before anything changes: a PUBLISH refused by the
-- server's ACL aborts the script with nothing released, instead of deleting
-- the lock and then failing.
local seq = ARGV[8]
local earlier = redis.pcall('get', ARGV[2])
if type(earlier) == 'string' then
    if not seq then
        return tonumber(earlier)
    end
    local s, v = string.match(earlier, '^(%d+):(-?%d+)$')
    if s == seq then
        return tonumber(v)
    end
    if s and tonumber(s) > tonumber(seq) then
        -- a late copy: a later call of this owner (a release, or a grant:
        -- unlock_latch.lua) has run since it was sent. It changes nothing.
        return -1
    end
end
local holds = tonumber(redis.call('hget', KEYS[1], ARGV[5]))
if not holds then
    if not seq then
        redis.pcall('set', ARGV[2], -1, 'px', ARGV[6])
    end
    return -1
end
local left = holds - 1
if left > 0 then
    redis.call('pexpire', KEYS[1], ARGV[4])
    redis.call('hincrby', KEYS[1], ARGV[5], -1)
else
    left = 0
    redis.call(ARGV[7], ARGV[1], ARGV[3])
    redis.call('del', KEYS[1])
end
-- holds left: the latch lives as long as they do (unlock_latch.lua)
local ttl = tonumber(ARGV[6])
if left > 0 and seq and tonumber(ARGV[4]) > ttl then
    ttl = tonumber(ARGV[4])
end
redis.pcall('set', ARGV[2], seq and (seq .. ':' .. left) or left, 'px', ttl)
return left
