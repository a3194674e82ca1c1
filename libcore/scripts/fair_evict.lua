-- Shared start of the fair scripts, pasted in at build time where a script
-- has an include line naming this file (cmake/embed_scripts.cmake).
-- KEYS[2] waiter queue (LIST), KEYS[3] waiter deadlines (ZSET).
-- Sets `now` (server clock, epoch ms) and drops from the head of the line the
-- waiters whose deadline has passed, or that have none.
local clock = redis.call('time')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
while true do
    local head = redis.call('lindex', KEYS[2], 0)
    if not head then
        break
    end
    local due = tonumber(redis.call('zscore', KEYS[3], head))
    if due and due > now then
        break
    end
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], head)
end
