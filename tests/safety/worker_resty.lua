-- One safety client process on OpenResty (lua/resty/hilock.lua): the loop
-- and the JSON-lines history of worker.c (README.md here), run from an
-- ngx.timer of a single nginx process (master_process off) that
-- worker_resty.sh starts, so the process the harness pauses or watches is
-- the one that holds the lock and runs its watchdog. The arguments come in
-- the environment: HL_SAFETY_ARGS (URL LOCK FENCE_PORT PROC_ID SEED SECONDS
-- LOG, then KEY=VALUE words, separated by single spaces).
local ffi = require "ffi"
local hilock = require "resty.hilock"

ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } hl_timespec;
int clock_gettime(int clk, hl_timespec *ts);
int getpid(void);
]]
local ts = ffi.new("hl_timespec")
-- CLOCK_MONOTONIC in ns (the clock of every process of the run), as a
-- number: exact below 2^53 ns (104 days of uptime)
local function now_ns()
    ffi.C.clock_gettime(1, ts)
    return tonumber(ts.tv_sec) * 1e9 + tonumber(ts.tv_nsec)
end

local FENCE_LUA = [[
local function ge(a, b)
  if #a ~= #b then return #a > #b end
  return a >= b
end
local hi = redis.call('GET', KEYS[1])
local ok = 0
if (not hi) or ge(ARGV[1], hi) then
  redis.call('SET', KEYS[1], ARGV[1]); ok = 1
end
redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ok)
return ok
]]

local function resp(args)
    local out = { "*" .. #args .. "\r\n" }
    for _, a in ipairs(args) do
        out[#out + 1] = "$" .. #a .. "\r\n" .. a .. "\r\n"
    end
    return table.concat(out)
end

local W = {}

local function main(premature)
    if premature then
        return
    end
    local a = {}
    for w in (os.getenv("HL_SAFETY_ARGS") or ""):gmatch("%S+") do
        a[#a + 1] = w
    end
    local url, lock_name, fence_port, proc = a[1], a[2], tonumber(a[3]), tonumber(a[4])
    local seed, secs, path = tonumber(a[5]), tonumber(a[6]), a[7]
    local o = { lease_ms = 0, watchdog_lease_ms = 3000, command_timeout_ms = 500,
                connect_timeout_ms = 500, replica_ack = 0, wait_ms = 2000, writes = 3,
                hold_ms = 60 }
    for i = 8, #a do
        local k, v = a[i]:match("^([%w_]+)=(.*)$")
        if k then
            o[k] = tonumber(v) or v
        end
    end
    local f = assert(io.open(path, "a"))
    local next_id = 0
    local function line(s)
        f:write(s, ',"p":', proc, "}\n")
        f:flush()
    end
    local function inv(op, extra)
        next_id = next_id + 1
        line(string.format('{"ev":"inv","op":"%s","id":%d,"t":%.0f%s', op, next_id, now_ns(),
                           extra or ""))
        return next_id
    end
    local function ret(op, id, res, extra)
        line(string.format('{"ev":"ret","op":"%s","id":%d,"t":%.0f,"res":"%s"%s', op, id,
                           now_ns(), res, extra or ""))
    end
    local function errjson(err)
        local kind = err:match("^timeout") and "timeout" or err:match("^not owner") and
            "notowner" or err:match("^connection") and "ConnectionError" or "error"
        return string.format(',"err":"%s","msg":"%s"', kind,
                             (err:gsub('[%c"\\]', "")))
    end
    line(string.format('{"ev":"start","t":%.0f,"pid":%d,"driver":"openresty"', now_ns(),
                       ffi.C.getpid()))
    math.randomseed(seed * 1000 + proc)

    local fence = ngx.socket.tcp()
    fence:settimeouts(5000, 5000, 5000)
    assert(fence:connect("127.0.0.1", fence_port))
    local hi_key, log_key = "fence:hi:" .. lock_name, "fence:log:" .. lock_name
    -- 1 accepted, 0 refused, -1 error
    local function fence_write(token, grant)
        local ok = fence:send(resp({ "EVAL", FENCE_LUA, "2", hi_key, log_key,
                                     string.format("%d", token), grant }))
        if not ok then
            return -1
        end
        local r = fence:receive("*l")
        return r == ":1" and 1 or r == ":0" and 0 or -1
    end

    local ack = o.replica_ack == 1 and true or o.replica_ack == -1 and false or nil
    local client = hilock.new { url = url, watchdog_lease = o.watchdog_lease_ms / 1000,
                                command_timeout = o.command_timeout_ms / 1000,
                                connect_timeout = o.connect_timeout_ms / 1000,
                                replica_ack = ack }
    -- one owner: thread id 1 of this client, as the other workers' one thread
    local lk = client:fenced_lock(lock_name, 1)
    line(string.format('{"ev":"ready","t":%.0f', now_ns()))
    local deadline = now_ns() + secs * 1e9
    local lease = o.lease_ms > 0 and o.lease_ms / 1000 or nil
    local grants = 0
    local holding, told = false, false
    -- lk:lost() is how OpenResty tells a holder (no callback): a light
    -- thread asks it every 10 ms while a grant is held and logs the report
    -- when it first says true
    local function report_if_lost()
        if holding and not told then
            local lost, why = lk:lost()
            if lost then
                told = true
                line(string.format('{"ev":"report","op":"lost","t":%.0f,"doubt":%s,"why":"%s"',
                                   now_ns(), tostring(why ~= nil and why:find("doubt") ~= nil),
                                   (tostring(why):gsub('[%c"\\]', ""))))
            end
        end
        return told
    end
    local watcher = ngx.thread.spawn(function()
        while now_ns() < deadline + 60e9 do
            report_if_lost()
            ngx.sleep(0.01)
        end
    end)
    while now_ns() < deadline do
        local oid = inv("acq", string.format(',"lease_ms":%d', o.lease_ms))
        local acq_inv = now_ns()
        local token, err = lk:acquire_token(o.wait_ms / 1000, lease)
        if not token then
            if err:match("^timeout") then
                ret("acq", oid, "timeout")
            else
                ret("acq", oid, "error", errjson(err))
                ngx.sleep(0.05 + math.random() * 0.05)
            end
        else
            grants = grants + 1
            local grant = string.format("%d.%d", proc, grants)
            holding, told = true, false
            ret("acq", oid, "ok", string.format(',"token":%d,"grant":"%s"', token, grant))
            for _ = 1, o.writes do
                ngx.sleep((0.2 + 0.8 * math.random()) * o.hold_ms / 1000)
                if report_if_lost() then
                    break
                end
                if lease and now_ns() >= acq_inv + (o.lease_ms - o.lease_ms / 5) * 1e6 then
                    break
                end
                local wid = inv("write", string.format(',"token":%d,"grant":"%s"', token, grant))
                local ok = fence_write(token, grant)
                ret("write", wid, ok == 1 and "ok" or ok == 0 and "refused" or "error")
            end
            local rid = inv("rel", string.format(',"grant":"%s"', grant))
            local ok, rerr = lk:release()
            holding = false
            if ok then
                ret("rel", rid, "ok")
            elseif rerr:match("^not owner") then
                ret("rel", rid, "notowner")
            else
                ret("rel", rid, "error", errjson(rerr))
            end
            ngx.sleep(0.001 + math.random() * 0.05)
        end
    end
    line(string.format('{"ev":"end","t":%.0f', now_ns()))
    f:close()
    ngx.thread.kill(watcher)
    os.exit(0)
end

function W.start()
    assert(ngx.timer.at(0, main))
end

return W
