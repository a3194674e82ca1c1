-- Fair (FIFO) acquire, idempotent per request.
-- KEYS[1] lock hash, KEYS[2] waiter queue (LIST), KEYS[3] waiter deadlines (ZSET)
-- ARGV[1] lease ms, ARGV[2] owner, ARGV[3] wait window ms, ARGV[4] "1" to queue
-- up when the lock cannot be taken now, "0" for a single try that leaves no trace,
-- ARGV[5] latch lifetime ms, ARGV[6] "<acquire latch key>:<request seq>" (one
-- latch per owner, same slot, as in lock.lua; absent: no latch). A grant leaves "<seq>:<hold count>" in the latch: the same
-- request sent again returns that answer instead of entering twice;
-- "x<seq>:..." (the caller gave the request up) makes a late copy take
-- nothing and queue nowhere. The owner's next call overwrites it (lock.lua).
-- Deadlines are epoch ms of the server clock.
-- Returns {1, hold count} when taken or re-entered; {0, ms} otherwise, where
-- ms is how long this waiter can expect to wait before its next try.
-- #include fair_evict.lua
-- #include acquire_latch.lua
-- #include unlock_latch.lua
local window = tonumber(ARGV[3])
local latch, seq = hl_latch_arg(ARGV[5], ARGV[6])
-- this request's earlier outcome: nil (none), 'x' (given up) or a hold count;
-- read only on the paths that would change something
local function earlier()
    if not latch then
        return nil
    end
    local v = hl_latch_get(latch)
    if not v then
        return nil
    end
    local x, s, holds = string.match(v, '^(x?)(%d+):(%d*)$')
    if s ~= seq then
        return nil -- the latch of another request of this owner
    end
    return x == 'x' and 'x' or holds
end
local function granted(holds)
    hl_unlock_latch_grant(KEYS[1], ARGV[2], seq, ARGV[1])
    if latch then
        hl_latch_set(latch, seq .. ':' .. holds, ARGV[5])
    end
    return {1, holds}
end
local function replay(e)
    if e == 'x' then
        return {0, redis.call('pttl', KEYS[1])}
    end
    return {1, tonumber(e)}
end

if redis.call('exists', KEYS[1]) == 0 then
    local head = redis.call('lindex', KEYS[2], 0)
    if not head or head == ARGV[2] then
        local e = earlier()
        if e then
            return replay(e)
        end
        if head then
            redis.call('lpop', KEYS[2])
            redis.call('zrem', KEYS[3], ARGV[2])
            -- everyone behind moved up one place
            local behind = redis.call('zrange', KEYS[3], 0, -1)
            for i = 1, #behind do
                redis.call('zincrby', KEYS[3], -window, behind[i])
            end
        end
        redis.call('hset', KEYS[1], ARGV[2], 1)
        redis.call('pexpire', KEYS[1], ARGV[1])
        return granted(1)
    end
elseif redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local e = earlier()
    if e then
        return replay(e)
    end
    local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return granted(holds)
end

local pttl = redis.call('pttl', KEYS[1])
local mine = redis.call('zscore', KEYS[3], ARGV[2])
if mine then
    -- already in line: nothing can change before the one ahead is due
    -- (my deadline - window) and before the holder's lease ends
    return {0, math.max(tonumber(mine) - window - now, pttl)}
end
local e = earlier()
if ARGV[4] ~= '1' or e == 'x' then
    return {0, pttl}
end
local last = redis.call('lindex', KEYS[2], -1)
local base = now + math.max(pttl, 0)
if last then
    base = tonumber(redis.call('zscore', KEYS[3], last)) or base
end
redis.call('zadd', KEYS[3], base + window, ARGV[2])
redis.call('rpush', KEYS[2], ARGV[2])
return {0, math.max(base - now, pttl)}
