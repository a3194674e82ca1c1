-- Fair release of one hold, idempotent per request.
-- KEYS[1] lock hash, KEYS[2] waiter queue, KEYS[3] waiter deadlines,
-- KEYS[4] channel base (each waiter listens on "<base>:<owner>"),
-- KEYS[5] unlock latch
-- ARGV[1] message ("0"), ARGV[2] lease ms re-applied while holds remain,
-- ARGV[3] owner, ARGV[4] publish command, ARGV[5] latch lifetime ms,
-- ARGV[6] (optional) the request's seq: the owner's latch, as unlock.lua
-- Returns the holds left (0 = released, also when the lock was already gone),
-- or -1 = not owner. Only the first live waiter is woken. The answer stays in
-- the latch when the release changed something: a retried release (its first
-- reply was lost) returns it again ("not owner" and "already gone" answer the
-- same without it). Wake-up before delete, and the order of writes that keeps
-- a release working out of memory (no memory-growing write first): as
-- unlock.lua.
local seq = ARGV[6]
local earlier = redis.call('get', KEYS[5])
if earlier then
    if not seq then
        return tonumber(earlier)
    end
    local s, v = string.match(earlier, '^(%d+):(-?%d+)$')
    if s == seq then
        return tonumber(v)
    end
end
-- #include fair_evict.lua

local function wake_head()
    local head = redis.call('lindex', KEYS[2], 0)
    if head then
        redis.call(ARGV[4], KEYS[4] .. ':' .. head, ARGV[1])
    end
end

local function answer(left)
    redis.call('set', KEYS[5], seq and (seq .. ':' .. left) or left, 'px', ARGV[5])
    return left
end

if redis.call('exists', KEYS[1]) == 0 then
    wake_head()
    return 0
end
local holds = tonumber(redis.call('hget', KEYS[1], ARGV[3]))
if not holds then
    return -1
end
if holds > 1 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('hincrby', KEYS[1], ARGV[3], -1)
    return answer(holds - 1)
end
wake_head()
redis.call('del', KEYS[1])
return answer(0)
