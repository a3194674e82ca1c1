-- (included) The acquire latch of one request: ARGV "<latch key>:<seq>"
-- (the owner's latch "hilock_acquire_latch:{N}:<owner>:<epoch>", in the
-- lock's slot) and its lifetime in ms. An argument, not a KEY: while a
-- cluster slot migrates, a declared key missing on the node would turn every
-- attempt into TRYAGAIN until the migration ends. It is read and written
-- with redis.pcall instead: a latch that is not on this node during a
-- migration (not created yet, or moved already) fails as a non-local key,
-- and the attempt then goes on as one without a latch (no earlier copy
-- known, no answer kept) rather than failing.
local function hl_latch_arg(ttl, arg)
    if arg and tonumber(ttl or 0) > 0 then
        return string.match(arg, '^(.+):(%d+)$')
    end
    return nil
end
local function hl_latch_get(latch)
    local v = redis.pcall('get', latch)
    if type(v) ~= 'string' then
        return nil -- missing, or not on this node
    end
    return v
end
local function hl_latch_set(latch, v, ttl)
    redis.pcall('set', latch, v, 'px', ttl)
end
-- This request's earlier answer when the latch holds one for seq: a
-- grant "<seq>:<holds>" answers {1, holds}; "x<seq>:..." (given up,
-- acquire_settle.lua) answers {0, the lock's pttl}; else nil.
local function hl_latch_replay(latch, seq, lock)
    local earlier = hl_latch_get(latch)
    if earlier then
        local x, s, v = string.match(earlier, '^(x?)(%d+):(%d*)$')
        if s == seq then
            if x == 'x' then
                return {0, redis.call('pttl', lock)}
            end
            return {1, tonumber(v)}
        end
    end
    return nil
end
