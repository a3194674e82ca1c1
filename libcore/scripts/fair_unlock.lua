-- Fair release of one hold.
-- KEYS[1] lock hash, KEYS[2] waiter queue, KEYS[3] waiter deadlines,
-- KEYS[4] channel base (each waiter listens on "<base>:<owner>")
-- ARGV[1] message ("0"), ARGV[2] lease ms re-applied while holds remain,
-- ARGV[3] owner, ARGV[4] publish command
-- Returns the holds left (0 = released, also when the lock was already gone),
-- or -1 = not owner. Only the first live waiter is woken.
-- #include fair_evict.lua

local function wake_head()
    local head = redis.call('lindex', KEYS[2], 0)
    if head then
        redis.call(ARGV[4], KEYS[4] .. ':' .. head, ARGV[1])
    end
end

if redis.call('exists', KEYS[1]) == 0 then
    wake_head()
    return 0
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return -1
end
local left = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if left > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return left
end
redis.call('del', KEYS[1])
wake_head()
return 0
