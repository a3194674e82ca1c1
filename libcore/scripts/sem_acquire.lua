-- Semaphore (Redisson's RSemaphore): take ARGV[1] permits if that many are free.
-- KEYS[1] permit count (string)
-- ARGV[1] permits (>= 1)
-- Returns 1 taken, 0 not enough permits (or no semaphore).
-- #include sem_count.lua
local n = hl_count(KEYS[1])
if type(n) == 'table' then return n end
if n ~= false and n >= tonumber(ARGV[1]) then
    redis.call('decrby', KEYS[1], ARGV[1])
    return 1
end
return 0
