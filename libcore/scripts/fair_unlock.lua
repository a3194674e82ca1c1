-- Fair release of one hold, idempotent per request.
-- KEYS[1] lock hash
-- ARGV[1] waiter queue (LIST), ARGV[2] waiter deadlines (ZSET), ARGV[3]
-- channel base (each waiter listens on "<base>:<owner>"), ARGV[4] unlock
-- latch, ARGV[5] message ("0"), ARGV[6] lease ms re-applied while holds
-- remain, ARGV[7] owner, ARGV[8] publish command, ARGV[9] latch lifetime ms,
-- ARGV[10] (optional) the request's seq: the owner's latch, as unlock.lua
-- Returns the holds left (0 = released, also when the lock was already gone),
-- or -1 = not owner. Only the first live waiter is woken. The answer stays in
-- the latch when the release changed something: a retried release (its first
-- reply was lost) returns it again ("not owner" and "already gone" answer the
-- same without it under the owner's latch). A request's own latch (no seq: a
-- settle's undo) keeps those answers too, as unlock.lua. Wake-up before delete, and the order of writes that keeps
-- a release working out of memory (no memory-growing write first): as
-- unlock.lua.
-- Only the lock is a KEY, as in unlock.lua: during a cluster slot migration
-- a declared key the node does not have turns the whole call into TRYAGAIN
-- until the migration ends. The queue, the deadlines and the latch (same
-- slot) are read with redis.pcall: on the old master one that already moved
-- is an error, on the new master (ASK) one not moved yet reads as absent.
-- So the line is trimmed only when both its keys are seen here (a non-empty
-- queue without its deadlines is half of a migration, never a state the fair
-- scripts leave: its entries are not dropped as "no deadline"), and a head
-- that is not seen is not woken (it takes the lock on its next try, when its
-- wait runs out). The hold count itself lives in the lock hash only, so it is
-- never lost or doubled.
local seq = ARGV[10]
local earlier = redis.pcall('get', ARGV[4])
if type(earlier) == 'string' then
    if not seq then
        return tonumber(earlier)
    end
    local s, v = string.match(earlier, '^(%d+):(-?%d+)$')
    if s == seq then
        return tonumber(v)
    end
    if s and tonumber(s) > tonumber(seq) then
        return -1 -- a late copy of an older call: nothing changes (unlock.lua)
    end
end

local head = redis.pcall('lindex', ARGV[1], 0)
if type(head) ~= 'string' then
    head = nil
else
    local line = redis.pcall('exists', ARGV[2])
    if line == 1 then
        local clock = redis.call('time')
        local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
        while head do
            local due = tonumber(redis.call('zscore', ARGV[2], head))
            if due and due > now then
                break
            end
            redis.call('lpop', ARGV[1])
            redis.call('zrem', ARGV[2], head)
            head = redis.call('lindex', ARGV[1], 0)
            if not head then
                head = nil
            end
        end
    end
end

local function wake_head()
    if head then
        redis.call(ARGV[8], ARGV[3] .. ':' .. head, ARGV[5])
    end
end

local function answer(left)
    local ttl = tonumber(ARGV[9])
    if left > 0 and seq and tonumber(ARGV[6]) > ttl then
        ttl = tonumber(ARGV[6]) -- holds left: as long as they live (unlock.lua)
    end
    redis.pcall('set', ARGV[4], seq and (seq .. ':' .. left) or left, 'px', ttl)
    return left
end

if redis.call('exists', KEYS[1]) == 0 then
    wake_head()
    if not seq then
        redis.pcall('set', ARGV[4], 0, 'px', ARGV[9])
    end
    return 0
end
local holds = tonumber(redis.call('hget', KEYS[1], ARGV[7]))
if not holds then
    if not seq then
        redis.pcall('set', ARGV[4], -1, 'px', ARGV[9])
    end
    return -1
end
if holds > 1 then
    redis.call('pexpire', KEYS[1], ARGV[6])
    redis.call('hincrby', KEYS[1], ARGV[7], -1)
    return answer(holds - 1)
end
wake_head()
redis.call('del', KEYS[1])
return answer(0)
