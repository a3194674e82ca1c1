-- Conformance agent for the OpenResty driver (resty.hilock), served by the
-- location /agent of nginx.conf.in. One HTTP request runs one request line:
--   GET /agent?url=URL&opts=k=v,k=v&tid=N&line=ACTOR+CMD+KIND+NAME+ARGS
-- and answers "ok ..." / "err ERRKIND ..." (tests/conformance/README.md).
-- With busy_ms=MS the request first keeps the worker busy for MS (no yield:
-- nginx's loop is blocked, its timers wait), then runs the line. With
-- then_line=LINE the same request then runs LINE too (answers "A | B").
-- An actor is the explicit thread id `tid` (one owner across its requests);
-- clients are made once per worker for each (url, opts).
local hilock = require "resty.hilock"
local lib = require "agent_lib"

local _M = {}
local clients = {}

function _M.serve()
    local args = ngx.req.get_uri_args()
    local url, opts = args.url, args.opts or ""
    local tid, line = tonumber(args.tid), args.line
    if type(url) ~= "string" or not tid or type(line) ~= "string" then
        ngx.say("err usage url, tid and line are required")
        return
    end
    local key = url .. " " .. opts
    local c = clients[key]
    if not c then
        local words = {}
        for kv in opts:gmatch("[^,]+") do words[#words + 1] = kv end
        local o = lib.options(words)
        o.url = url
        c = hilock.new(o)
        clients[key] = c
    end
    local busy = tonumber(args.busy_ms)
    if busy then
        local until_s = ngx.now() + busy / 1000
        repeat
            ngx.update_time()
        until ngx.now() >= until_s
    end
    local function lock_of(kind, name)
        return lib.make(c, kind, name, tid)
    end
    local answer = lib.handle(lock_of, line)
    if type(args.then_line) == "string" then
        -- a second line run by the same request at once (no yield in
        -- between but the second line's own I/O): "ANSWER1 | ANSWER2"
        answer = answer .. " | " .. lib.handle(lock_of, args.then_line)
    end
    ngx.say(answer)
    -- end the response now: an acquire whose reply timed out is settled by
    -- a light thread of this request, which may outlive the answer
    ngx.eof()
end

return _M
