-- The OpenResty driver's side of tests/messages/run.sh: GET /s (the URL in
-- the X-Url header: nginx logs the request line with every message) makes
-- a client, shows tostring(client), acquires and releases a lock, and
-- writes every error (returned or raised) into the response and into
-- nginx's error log.
local _M = {}
function _M.run()
    local url = ngx.var.http_x_url
    local rh = require "resty.hilock"
    local ok, c = pcall(rh.new, { url = url, connect_timeout = 0.5, command_timeout = 0.5 })
    if not ok then
        ngx.say("resty new raised: ", tostring(c))
        ngx.log(ngx.ERR, "resty new raised: ", tostring(c))
        return
    end
    ngx.say("resty client: ", tostring(c))
    ngx.log(ngx.WARN, "resty client: ", tostring(c))
    local lk = c:lock("secrets:x")
    local got, err = lk:acquire(0.2)
    ngx.say("resty acquire: ", tostring(got), " ", tostring(err))
    ngx.log(ngx.ERR, "resty acquire: ", tostring(got), " ", tostring(err))
    local rel, rerr = lk:release()
    ngx.say("resty release: ", tostring(rel), " ", tostring(rerr))
    local ok2, e2 = pcall(c.lock, c, "")
    ngx.say("resty lock(''): ", tostring(ok2), " ", tostring(e2))
    ok2, e2 = pcall(c.lock, c, string.rep("n", 5000))
    ngx.say("resty lock(5000 bytes): ", tostring(ok2), " ", tostring(e2))
end
return _M
