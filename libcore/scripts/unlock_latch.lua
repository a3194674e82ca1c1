-- (included) The owner's unlock latch "redisson_unlock_latch:{N}:<owner>:owner"
-- ("redisson_unlock_latch:N:<owner>:owner" when N has a '{'; the engine's
-- per-owner latch, proto_release.c; the suffix keeps it apart from a latch
-- per request, "...:<request id>", whose ids end in digits as owners do),
-- holding "<seq>:<answer>": the highest
-- call number of this owner that changed the lock (a release, or a grant
-- with its acquire call's number and the answer -1). A release whose number
-- is lower is a late copy and changes nothing (unlock.lua). The latch lives
-- at least as long as the owner's hold: every grant, renewal, extension and
-- partial release of the hold sets it too, so a late copy finds it however
-- late it comes; with no hold left, the copy finds no field and does
-- nothing. Read and written with redis.pcall, as the acquire latch
-- (acquire_latch.lua): during a cluster slot migration a latch not on this
-- node is skipped.
local function hl_unlock_latch(lock, owner)
    if string.find(lock, '{', 1, true) then
        return 'redisson_unlock_latch:' .. lock .. ':' .. owner .. ':owner'
    end
    return 'redisson_unlock_latch:{' .. lock .. '}:' .. owner .. ':owner'
end
-- A grant to owner by the acquire call numbered seq (nil: an acquire without
-- a latch, which has no number: the latch only follows the lease)
local function hl_unlock_latch_grant(lock, owner, seq, lease_ms)
    local latch = hl_unlock_latch(lock, owner)
    local v = redis.pcall('get', latch)
    local s = type(v) == 'string' and string.match(v, '^(%d+):') or nil
    if seq and not (s and tonumber(s) >= tonumber(seq)) then
        redis.pcall('set', latch, seq .. ':-1', 'px', lease_ms)
    elseif s then
        redis.pcall('pexpire', latch, lease_ms)
    end
end
-- The hold's lease set again (renewal, extension): the latch lives as long
local function hl_unlock_latch_keep(lock, owner, lease_ms)
    redis.pcall('pexpire', hl_unlock_latch(lock, owner), lease_ms)
end
