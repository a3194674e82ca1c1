-- Everything stored for one lock, read in one atomic step, for inspection
-- (hilock_inspect, `hilock status`). Reads only; never fails on a key of an
-- unexpected type (it reports the type instead).
-- KEYS[1] lock hash, KEYS[2] fair queue (LIST), KEYS[3] fair deadlines
-- (ZSET), KEYS[4] fencing token counter, KEYS[5] a permit-expirable
-- semaphore's leases (ZSET "{N}:timeout")
-- Returns {lock key type, PTTL, HGETALL (flat, empty unless a hash),
--          queue key type, queue (LRANGE, empty unless a list),
--          deadline of each queued owner (ZSCORE, nil when missing),
--          deadlines key type, ZCARD of the deadlines (0 unless a zset), TIME,
--          counter key type, counter value (nil unless a string),
--          the lock key's value when it is a string of at most 20 bytes (a
--          semaphore's or latch's count; nil otherwise),
--          leases key type, ZCARD of the leases (0 unless a zset),
--          the first 1000 leases, soonest end first (flat member, score),
--          subscribers: {lock channel, read-write channel, semaphore channel,
--          latch channel, the fair waiters' own channels together}}
-- ARGV[1] 'numsub' or 'shardnumsub' (a cluster: sharded pub/sub), ARGV[2]
-- the lock channel (a fair waiter's own channel is it .. ':' .. owner),
-- ARGV[3] read-write channel, ARGV[4] semaphore channel, ARGV[5] latch channel
local kt = redis.call('type', KEYS[1])['ok']
local fields = {}
if kt == 'hash' then
    fields = redis.call('hgetall', KEYS[1])
end
local qt = redis.call('type', KEYS[2])['ok']
local queue = {}
if qt == 'list' then
    queue = redis.call('lrange', KEYS[2], 0, -1)
end
local zt = redis.call('type', KEYS[3])['ok']
local deadlines = {}
local zcard = 0
if zt == 'zset' then
    zcard = redis.call('zcard', KEYS[3])
end
for i, owner in ipairs(queue) do
    deadlines[i] = (zt == 'zset' and redis.call('zscore', KEYS[3], owner)) or false
end
local tt = redis.call('type', KEYS[4])['ok']
local token = false
if tt == 'string' then
    token = redis.call('get', KEYS[4])
end
local count = false
if kt == 'string' and redis.call('strlen', KEYS[1]) <= 20 then
    count = redis.call('get', KEYS[1])
end
local lt = redis.call('type', KEYS[5])['ok']
local nleases, leases = 0, {}
if lt == 'zset' then
    nleases = redis.call('zcard', KEYS[5])
    leases = redis.call('zrange', KEYS[5], 0, 999, 'withscores')
end
local subs = {0, 0, 0, 0, 0}
for i = 2, 5 do
    subs[i - 1] = redis.call('pubsub', ARGV[1], ARGV[i])[2]
end
for _, owner in ipairs(queue) do
    subs[5] = subs[5] + redis.call('pubsub', ARGV[1], ARGV[2] .. ':' .. owner)[2]
end
return {kt, redis.call('pttl', KEYS[1]), fields, qt, queue, deadlines, zt, zcard,
        redis.call('time'), tt, token, count, lt, nleases, leases, subs}
