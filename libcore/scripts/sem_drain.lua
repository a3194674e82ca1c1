-- Semaphore: take every free permit. KEYS[1] permit count.
-- Returns how many were taken (0 when none or no semaphore).
-- #include sem_count.lua
local n = hl_count(KEYS[1])
if type(n) == 'table' then return n end
if n == false or n <= 0 then
    return 0
end
redis.call('set', KEYS[1], 0)
return n
