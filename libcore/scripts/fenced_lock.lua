-- Fenced lock acquire: the reentrant lock plus a fencing token, idempotent
-- per request as lock.lua.
-- KEYS[1] lock hash, KEYS[2] token counter (redisson_lock_token:{N})
-- ARGV[1] lease ms, ARGV[2] owner, ARGV[3] latch lifetime ms, ARGV[4]
-- "<latch key>:<request seq>" (the owner's acquire latch, as in lock.lua;
-- absent: no latch)
-- Returns {1, hold count, token} when taken or re-entered (every grant,
-- re-entry included, takes the next value of the counter, as Redisson's
-- RFencedLock does, or the server's time in milliseconds when that is
-- higher), {0, holder pttl} otherwise.
-- A grant leaves "<seq>:<hold count>:<token>" in the latch: the same request
-- sent again returns that answer (the same token) instead of entering and
-- counting once more; "x<seq>:..." (given up, acquire_settle.lua) makes a
-- late copy take nothing.
-- #include acquire_latch.lua
-- #include unlock_latch.lua
local free = redis.call('exists', KEYS[1]) == 0
if free or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local latch, seq = hl_latch_arg(ARGV[3], ARGV[4])
    if latch then
        local earlier = hl_latch_get(latch)
        if earlier then
            local x, s, v, t = string.match(earlier, '^(x?)(%d+):(%d*):?(%d*)$')
            if s == seq then
                if x == 'x' or t == '' then
                    return {0, redis.call('pttl', KEYS[1])}
                end
                return {1, tonumber(v), tonumber(t)}
            end
        end
    end
    local token = redis.call('incr', KEYS[2])
    if token < 1 then -- a corrupt counter: refuse before taking anything
        return redis.error_reply('ERR fencing token counter ' .. KEYS[2] .. ' is not positive')
    end
    -- Never below the server's clock in milliseconds: a counter lost with
    -- the data (restart without persistence, FLUSHALL, a failover to a
    -- replica that missed the last INCRs) would start again below tokens
    -- already handed out. Milliseconds (13 digits) print exactly even where
    -- Lua turns numbers into text with "%.14g"; written as text all the same.
    local now = redis.call('time')
    local floor = now[1] .. string.format('%03d', math.floor(tonumber(now[2]) / 1000))
    if token < tonumber(floor) then
        redis.call('set', KEYS[2], floor)
        token = tonumber(floor)
    end
    local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    hl_unlock_latch_grant(KEYS[1], ARGV[2], seq, ARGV[1])
    if latch then
        hl_latch_set(latch, seq .. ':' .. holds .. ':' .. string.format('%.0f', token), ARGV[3])
    end
    return {1, holds, token}
end
return {0, redis.call('pttl', KEYS[1])}
