-- (included) Permit-expirable semaphore: give the permits whose lease ended
-- back to the count and publish the new count. now: server time in ms.
local function hl_pes_evict(count_key, timeout_key, channel, publish, now)
    local expired = redis.call('zrangebyscore', timeout_key, 0, now, 'limit', 0, 1000)
    if #expired > 0 then
        redis.call('zrem', timeout_key, unpack(expired))
        local v = redis.call('incrby', count_key, #expired)
        if v > 0 then
            redis.call(publish, channel, v)
        end
    end
end
local function hl_now_ms()
    local t = redis.call('time')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- Redisson's score of a permit without lease
local HL_NO_LEASE = 922337203685477
