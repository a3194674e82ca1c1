-- Permit-expirable semaphore (Redisson's RPermitExpirableSemaphore): take
-- one permit per id, each with its own lease.
-- KEYS[1] permit count, KEYS[2] leases ZSET "{N}:timeout" (member: the
-- permit id's 16 raw bytes, score: lease end in epoch ms of the server's
-- clock), KEYS[3] channel redisson_sc:{N}
-- ARGV[1] permits k, ARGV[2] lease ms (<= 0: none), ARGV[3] publish command,
-- ARGV[4] the k ids, 16 bytes each, concatenated, ARGV[5] (optional) the
-- given-back ids' set "hilock_pes_gone:{N}", ARGV[6] its entries' lifetime ms
-- Returns {1} taken (also when the ids were taken by this same request
-- before), or {0, ms until the nearest lease ends (-1 none)}; {0, -1} also
-- for a late copy of a request whose ids were given back since (pes_gone.lua).
-- #include sem_count.lua
-- #include pes_evict.lua
-- #include pes_gone.lua
local k = tonumber(ARGV[1])
if #ARGV[4] ~= 16 * k then
    return redis.error_reply('ERR hilock: permit ids do not match the count')
end
local n = hl_count(KEYS[1])
if type(n) == 'table' then return n end
redis.call('zcard', KEYS[2]) -- WRONGTYPE before any change
-- The ids are this request's own (random per acquire call): if the first is
-- taken, this is the same request again (its reply was lost and the
-- transport sent it once more on a new connection): it took its permits.
if redis.call('zscore', KEYS[2], string.sub(ARGV[4], 1, 16)) then
    return {1}
end
local now = hl_now_ms()
-- ... and if its first id was given back (released, or the request settled
-- as lost), this is a late copy of a request that is over: it takes nothing
local gone = hl_gone_arg(ARGV[5], ARGV[6])
if gone and hl_gone_has(gone, string.sub(ARGV[4], 1, 16), now) then
    return {0, -1}
end
hl_pes_evict(KEYS[1], KEYS[2], KEYS[3], ARGV[3], now)
n = hl_count(KEYS[1])
if n ~= false and n >= k then
    redis.call('decrby', KEYS[1], k)
    local lease = tonumber(ARGV[2])
    local score = lease > 0 and now + lease or HL_NO_LEASE
    for i = 0, k - 1 do
        redis.call('zadd', KEYS[2], score, string.sub(ARGV[4], 16 * i + 1, 16 * i + 16))
    end
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then
        redis.call('pexpire', KEYS[2], ttl)
    end
    return {1}
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')
if first[1] ~= nil and tonumber(first[2]) ~= HL_NO_LEASE then
    return {0, math.max(tonumber(first[2]) - now, 0)}
end
return {0, -1}
