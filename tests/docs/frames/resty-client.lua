-- Frame "resty-client" (tests/docs): an OpenResty fragment of the docs runs
-- in a content handler of a real nginx, with `hilock` (resty.hilock) and a
-- `client` on the test's server.
local hilock = require "resty.hilock"
local client = hilock.new { url = "redis://127.0.0.1:6379" }
@BLOCK@
