-- Every string the Lua module shows about a client, for tests/messages/run.sh
-- to search for passwords: for each URL given, the redacted URL, what
-- hilock.connect says (or raises), tostring(client) and failing calls.
-- Usage: lua surfaces.lua URL...
local hilock = require "hilock"
for _, url in ipairs(arg) do
    print("lua redact: " .. hilock.redact_url(url))
    local ok, c, err = pcall(hilock.connect, url, { connect_timeout = 0.5, command_timeout = 0.5 })
    if not ok then
        print("lua connect raised: " .. tostring(c))
    elseif not c then
        print("lua connect failed: " .. tostring(err))
    else
        print("lua client: " .. tostring(c))
        local lk = c:lock("secrets:x")
        print("lua lock: " .. tostring(lk))
        print("lua release unheld: " .. tostring(select(2, lk:release())))
        print("lua errmsg: " .. tostring(c:errmsg()))
        local ok2, e2 = pcall(c.lock, c, "")
        print("lua lock(''): " .. tostring(ok2) .. " " .. tostring(e2))
        ok2, e2 = pcall(c.lock, c, string.rep("n", 5000))
        print("lua lock(5000 bytes): " .. tostring(ok2) .. " " .. tostring(e2))
        c:close()
    end
end
print("lua done")
