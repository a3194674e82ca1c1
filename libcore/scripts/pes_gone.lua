-- (included) Permit-expirable semaphore: the ids given back lately
-- (hilock's own; Redisson has none and never reads it). A ZSET
-- "hilock_pes_gone:{N}" (the name's slot): member = a permit id's 16 raw
-- bytes, score = when the entry may go (server ms). pes_release.lua files
-- every id it is asked to give back, taken or not, and pes_acquire.lua
-- refuses ids filed there: a late copy of an acquire (its connection died
-- or timed out and the server ran it after the give-back or the settle)
-- takes nothing. An argument, not a KEY, read and written with redis.pcall
-- as acquire_latch.lua: while the slot migrates and the set is not on this
-- node, the script goes on without it instead of turning into TRYAGAIN.
local function hl_gone_arg(key, ttl)
    if key and key ~= '' and tonumber(ttl or 0) > 0 then
        return key, tonumber(ttl)
    end
    return nil
end
local function hl_gone_has(key, id, now)
    local s = redis.pcall('zscore', key, id)
    return type(s) == 'string' and tonumber(s) > now
end
local function hl_gone_add(key, id, ttl, now)
    if type(redis.pcall('zadd', key, now + ttl, id)) ~= 'number' then
        return -- not on this node (a migration), or not a ZSET: left alone
    end
    redis.pcall('zremrangebyscore', key, '-inf', now)
    redis.pcall('pexpire', key, ttl)
end
