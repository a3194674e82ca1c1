-- Semaphore (Redisson's RSemaphore): take ARGV[1] permits if that many are free,
-- idempotent per request when a request latch is given.
-- KEYS[1] permit count (string), KEYS[2] (optional) the caller's request
-- latch "hilock_sem_latch:{N}:<owner>:<epoch>" (hilock's own; same slot)
-- ARGV[1] permits (>= 1), ARGV[2] latch lifetime ms, ARGV[3] this request's seq
-- Returns 1 taken, 0 not enough permits (or no semaphore).
-- A grant leaves "<seq>:<permits>" in the latch, so the same request sent
-- again (its first reply was lost with the connection) answers 1 without
-- taking more; "x<seq>:..." (given up, sem_settle.lua) makes a late copy
-- take nothing. The owner's next request overwrites the latch (one key per
-- owner, not per request). The latch is read before the count is judged: a
-- resend after the first copy took the last permits must still answer 1.
-- #include sem_count.lua
local n = hl_count(KEYS[1])
if type(n) == 'table' then return n end
local latch = KEYS[2]
if latch then
    local earlier = redis.call('get', latch)
    if earlier then
        local x, s = string.match(earlier, '^(x?)(%d+):')
        if s == ARGV[3] then
            if x == 'x' then
                return 0
            end
            return 1
        end
    end
end
if n ~= false and n >= tonumber(ARGV[1]) then
    redis.call('decrby', KEYS[1], ARGV[1])
    if latch then
        redis.call('set', latch, ARGV[3] .. ':' .. ARGV[1], 'px', ARGV[2])
    end
    return 1
end
return 0
