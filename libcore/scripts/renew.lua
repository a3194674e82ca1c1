-- Watchdog renewal, guarded by the owner's field.
-- KEYS[1] lock hash; ARGV[1] lease ms, ARGV[2] owner
-- Returns 1 renewed, 0 the owner no longer holds it (lock lost).
-- The owner's unlock latch lives as long as the hold (unlock_latch.lua).
-- #include unlock_latch.lua
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('pexpire', KEYS[1], ARGV[1])
    hl_unlock_latch_keep(KEYS[1], ARGV[2], ARGV[1])
    return 1
end
return 0
