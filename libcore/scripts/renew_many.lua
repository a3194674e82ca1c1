-- Watchdog renewal of many holds in one call (one per node, or per slot on
-- Redis Cluster, per tick), each guarded by its owner's field as renew.lua.
-- KEYS[i] lock hash; ARGV[1] lease ms; ARGV[i + 1] the hold's field in KEYS[i].
-- Returns one integer per key: 1 renewed, 0 the owner no longer holds it.
-- The owners' unlock latches live as long as their holds (unlock_latch.lua).
-- #include unlock_latch.lua
local out = {}
for i = 1, #KEYS do
    if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
        redis.call('pexpire', KEYS[i], ARGV[1])
        hl_unlock_latch_keep(KEYS[i], ARGV[i + 1], ARGV[1])
        out[i] = 1
    else
        out[i] = 0
    end
end
return out
