-- A fair waiter gives up: it leaves the line and those behind it move up.
-- KEYS[1] lock hash, KEYS[2] waiter queue, KEYS[3] waiter deadlines,
-- KEYS[4] channel base
-- ARGV[1] owner, ARGV[2] the leaving waiter's window ms, ARGV[3] message ("0"),
-- ARGV[4] publish command
-- Returns 1 when the waiter was in line, 0 otherwise.
local line = redis.call('lrange', KEYS[2], 0, -1)
local pos
for i = 1, #line do
    if line[i] == ARGV[1] then
        pos = i
        break
    end
end
if not pos then
    redis.call('zrem', KEYS[3], ARGV[1])
    return 0
end
local window = tonumber(ARGV[2])
for i = pos + 1, #line do
    redis.call('zincrby', KEYS[3], -window, line[i])
end
redis.call('zrem', KEYS[3], ARGV[1])
redis.call('lrem', KEYS[2], 0, ARGV[1])
-- the new first waiter may take a free lock now
if pos == 1 and #line > 1 and redis.call('exists', KEYS[1]) == 0 then
    redis.call(ARGV[4], KEYS[4] .. ':' .. line[2], ARGV[3])
end
return 1
