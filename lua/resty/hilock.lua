-- resty.hilock: hilock locks for OpenResty, without blocking the worker.
--
--   local hilock = require "resty.hilock"
--   local client = hilock.new { url = "redis://127.0.0.1:6379" }  -- once per worker
--   local lk = client:lock("orders:42")
--   local ok, err = lk:acquire(5)         -- wait up to 5 s; watchdog lease
--   ...
--   lk:release()
--
-- Every byte goes through ngx.socket.tcp cosockets (commands, the pub/sub wait,
-- the watchdog's renewals from an ngx.timer). The lock logic is libcore's
-- engine, through the hilock C module's proto layer: it builds each command,
-- parses each reply and runs the machines (acquire, release, settling an
-- attempt whose reply never came, routing, replica acknowledgement, renewal
-- outcomes); this file only moves bytes, sleeps and schedules, and names no
-- command, script, key, channel or Redis error (tests/lint checks). The
-- blocking C client (hilock.connect) is never used here.
--
-- An acquire whose reply timed out is settled by a light thread of the
-- calling request on that same connection (docs/lua.md): call ngx.eof()
-- after the response so the client is not kept waiting for it.
--
-- URLs: redis://..., redis+cluster://h1:p1,h2:p2 (slot map from CLUSTER
-- SLOTS, cached per worker; MOVED/ASK followed; SSUBSCRIBE on the slot's
-- master; scripts publish with SPUBLISH; watchdog pipelines per master) and
-- redis+sentinel://s1:p1,s2:p2/master[/db] (master asked of the sentinels,
-- checked with ROLE, cached 1 s per worker; READONLY/MASTERDOWN: ask again
-- and retry once). Replica acknowledgement (WAIT 1 <timeout> after acquire
-- and release) is on by default for cluster and sentinel clients.
--
-- Owner identity: "<client-uuid>:<thread-id>" with thread-id = worker pid *
-- 2^20 + a per-worker request counter, assigned on first use in a request
-- (kept in ngx.ctx), so two requests of one worker never share a hold.
local hilock = require "hilock"

local proto = hilock.proto
local ngx = ngx
local tcp = ngx.socket.tcp
local ngx_sleep = ngx.sleep
local ngx_now = ngx.now
local timer_at = ngx.timer.at
local worker_pid = ngx.worker.pid
local now_ms = proto.now_ms
local decode_pubsub = proto.decode_pubsub
local ceil = math.ceil
local co_running = coroutine.running
local semaphore = require "ngx.semaphore"
local type, tostring, tonumber, setmetatable, error, pairs, next =
    type, tostring, tonumber, setmetatable, error, pairs, next
local str_format = string.format

local _M = { _VERSION = hilock.version }

local MAX_SECONDS = 3153600000 -- HILOCK_MAX_TIME_MS / 1000
local TID_SPAN = 1048576       -- 2^20 request ids per worker pid
local LONG_WAIT_MS = 60000     -- "until a message": re-check at least this often
local LISTEN_POLL_MS = 1000    -- a shared listener checks this often if anyone waits
local CANCEL_POLL_MS = 50      -- a wait on its own socket looks for lk:cancel() this often
local WEAK_KEYS = { __mode = "k" }

-- ---------------------------------------------------------------- helpers

local tid_counter = 0

-- ---------------------------------------------------------------- statistics

-- The client's counters: the blocking client's (hilock_client_stats) names,
-- shape and meanings (docs/observability.md), counted by this driver.
local STATS_BUCKETS = 24 -- HILOCK_STATS_BUCKETS: log2 ms buckets
local STATS_KINDS = { "reentrant", "fair", "read", "write", "fenced" }
local STATS_EDGES = {}   -- STATS_EDGES[b]: bucket b + 1 holds times under it
for b = 1, STATS_BUCKETS - 2 do
    STATS_EDGES[b] = 2 ^ b
end

local function new_stats()
    local kinds = {}
    for _, k in ipairs(STATS_KINDS) do
        local w, h = {}, {}
        for i = 1, STATS_BUCKETS do
            w[i], h[i] = 0, 0
        end
        kinds[k] = { granted = 0, timed_out = 0, cancelled = 0, busy = 0, granted_first_try = 0,
                     granted_woken = 0, granted_retried = 0, wait_ms = w, hold_ms = h,
                     lost_expired = 0, lost_gone = 0, lost_in_doubt = 0 }
    end
    return { version = 1, kinds = kinds, renewals = 0, renewal_commands = 0,
             renewal_failures = 0, settles = 0, reconnects = 0, redirects = 0,
             replica_ack_failures = 0 }
end

-- The (1-based) bucket of ms, as libcore's hl_stats_bucket.
local function stats_bucket(ms)
    if ms < 1 then
        return 1
    end
    local b = 1
    while b < STATS_BUCKETS - 1 and ms >= STATS_EDGES[b] do
        b = b + 1
    end
    return b + 1
end

local STATS_NAMES_MAX = 65536 -- HILOCK_STATS_NAMES_MAX

-- One kind's figures, all 0.
local function new_figures()
    local w, h = {}, {}
    for i = 1, STATS_BUCKETS do
        w[i], h[i] = 0, 0
    end
    return { granted = 0, timed_out = 0, cancelled = 0, busy = 0, granted_first_try = 0,
             granted_woken = 0, granted_retried = 0, wait_ms = w, hold_ms = h,
             lost_expired = 0, lost_gone = 0, lost_in_doubt = 0 }
end

-- The per-name counters (opt-in, stats_names), as libcore's stats.c keeps
-- them: the first stats_names (kind, name) pairs counted get their own
-- figures, in that order; the later ones count in their kind's "other"
-- entry. Returns the figures the counts of (kind, name) go to besides the
-- kind's, or nil when off.
local function name_slot(self, kind, name)
    local max = self.stats_names
    if max == 0 or not name then
        return nil
    end
    local byname = self.st_names[kind]
    local f = byname and byname[name]
    if f then
        return f
    end
    if #self.st_order >= max then
        local o = self.st_other[kind]
        if not o then
            o = new_figures()
            self.st_other[kind] = o
        end
        return o
    end
    f = new_figures()
    if not byname then
        byname = {}
        self.st_names[kind] = byname
    end
    byname[name] = f
    self.st_order[#self.st_order + 1] = { kind, name, f }
    return f
end

local function copy_stats(t)
    local out = {}
    for k, v in pairs(t) do
        out[k] = type(v) == "table" and copy_stats(v) or v
    end
    return out
end

-- The thread id of the current request (or timer): pid * 2^20 + counter.
local function request_tid()
    local ctx = ngx.ctx
    local tid = ctx.hilock_tid
    if not tid then
        tid_counter = tid_counter + 1
        if tid_counter >= TID_SPAN then
            tid_counter = 1
        end
        tid = worker_pid() * TID_SPAN + tid_counter
        ctx.hilock_tid = tid
    end
    return tid
end
_M.thread_id = request_tid

-- level: where the error points, as error()'s (default 3: the caller of
-- the function that checks)
local function argerr(what, msg, level)
    error("bad argument '" .. what .. "' (" .. msg .. ")", level or 3)
end

-- Float seconds -> ms. nil -> if_nil; 0 only when allow_zero.
local function seconds(v, if_nil, allow_zero, what)
    if v == nil then
        return if_nil
    end
    if type(v) ~= "number" or v ~= v or v < 0 or v > MAX_SECONDS then
        argerr(what, "expected a non-negative number of seconds")
    end
    if v == 0 then
        if not allow_zero then
            argerr(what, "expected a positive number of seconds")
        end
        return 0
    end
    local ms = ceil(v * 1000 - 1e-6)
    return ms < 1 and 1 or ms
end

-- A small free list of reply readers (one per connection in use).
local readers, nreaders = {}, 0

local function get_reader()
    if nreaders > 0 then
        local rd = readers[nreaders]
        readers[nreaders] = nil
        nreaders = nreaders - 1
        return rd
    end
    return proto.reader()
end

local function put_reader(rd)
    if rd and nreaders < 64 and rd:pending() == 0 then
        nreaders = nreaders + 1
        readers[nreaders] = rd
    end
end

-- One complete reply from sock (feeding rd as bytes arrive): reply, nil,
-- is_error | nil, err. fresh: rd holds no reply yet (it was empty when the
-- command was sent), so the socket is read first.
local function read_reply(sock, rd, fresh)
    local r, err, is_error
    if not fresh then
        r, err, is_error = rd:get()
    end
    while not r do
        if err then
            return nil, err
        end
        local data, rerr = sock:receiveany(65536)
        if not data then
            return nil, "connection: " .. tostring(rerr)
        end
        r, err, is_error = rd:feed_get(data)
    end
    return r, nil, is_error
end

local function send_read(sock, rd, bytes)
    local ok, err = sock:send(bytes)
    if not ok then
        return nil, "connection: " .. tostring(err)
    end
    return read_reply(sock, rd)
end

-- ---------------------------------------------------------------- client

local Client = {}
Client.__index = Client
Client.__tostring = function(self)
    return "resty.hilock client " .. self.uuid .. " " .. self.shown_url
end

local Lock = {}
Lock.__index = Lock

-- URLs are read by the engine's parser (hilock.proto.parse_url, the same
-- one the C library uses; forms in docs/urls.md). Its fields become the
-- options below; unix:///path sockets become the host "unix:/path".
local function parse_url(url)
    local u, err = proto.parse_url(url)
    if not u then
        return nil, err
    end
    if u.tls_ca_file or u.tls_ca_dir then
        return nil, "invalid argument: in OpenResty the trusted CAs come from nginx's "
                    .. "lua_ssl_trusted_certificate"
    end
    local o = {
        mode = u.mode == "unix" and "single" or u.mode,
        host = u.mode == "unix" and ("unix:" .. u.path) or u.host,
        port = u.mode == "unix" and 0 or u.port,
        seeds = u.seeds, master_name = u.master_name,
        user = u.user, password = u.password, db = u.db,
        sentinel_user = u.sentinel_user, sentinel_password = u.sentinel_password,
        tls = u.tls or nil, tls_server_name = u.tls_server_name,
        tls_insecure = u.tls_insecure or nil,
        tls_cert_file = u.tls_cert_file, tls_key_file = u.tls_key_file,
    }
    if u.connect_timeout_ms then
        o.connect_timeout = u.connect_timeout_ms / 1000
    end
    if u.command_timeout_ms then
        o.command_timeout = u.command_timeout_ms / 1000
    end
    return o
end

local known_options = {
    url = true, host = true, port = true, user = true, password = true, db = true,
    connect_timeout = true, command_timeout = true, watchdog_lease = true,
    fair_wait_window = true, pool_size = true, keepalive_timeout = true,
    replica_ack = true, replica_ack_timeout = true, lost_memory = true, stats_names = true,
    tls = true, tls_server_name = true, tls_insecure = true,
    tls_cert_file = true, tls_key_file = true,
    sentinel_user = true, sentinel_password = true,
}

local MASTER_CACHE_MS = 1000   -- sentinel: how long a looked-up master is trusted

-- The data nodes a client talks to: one table per host:port (per
-- credentials), carrying its cosocket pool name.
local function node_of(self, host, port)
    local k = host .. ":" .. port
    local n = self.nodes[k]
    if not n then
        -- TLS settings are part of the pool's name: a plain client must
        -- never be handed a TLS connection, nor one verified for another name
        local pool = str_format("hilock:%s:%d:%d:%s:%s:%s", host, port, self.db, self.user or "",
                                self.password and ngx.md5(self.password) or "",
                                self.tls_tag)
        n = { host = host, port = port, key = k, pool = pool,
              pool_opts = { pool = pool, pool_size = self.pool_size } }
        self.nodes[k] = n
    end
    return n
end

-- Mutual TLS: the client certificate (PEM, the chain may follow it) and
-- its private key (PEM, unencrypted) are read and parsed once, when the
-- client is made (once per worker), and handed to every TLS handshake
-- (tcpsock:setclientcert, lua-nginx-module >= 0.10.22 with lua-resty-core).
local function read_pem(path, what)
    if type(path) ~= "string" or path == "" then
        argerr(what, "expected a file name")
    end
    local f, err = io.open(path, "rb")
    if not f then
        argerr(what, "cannot read: " .. tostring(err))
    end
    local pem = f:read("*a")
    f:close()
    return pem
end

local function load_client_cert(self, o)
    if o.tls_cert_file == nil and o.tls_key_file == nil then
        return
    end
    if not o.tls_cert_file or not o.tls_key_file then
        argerr("opts", "tls_cert_file and tls_key_file go together")
    end
    if not self.tls then
        argerr("opts", "a client certificate needs TLS (rediss:// or tls = true)")
    end
    local ssl = require "ngx.ssl"
    local cert_pem = read_pem(o.tls_cert_file, "tls_cert_file")
    local key_pem = read_pem(o.tls_key_file, "tls_key_file")
    local cert, err = ssl.parse_pem_cert(cert_pem)
    if not cert then
        argerr("tls_cert_file", "not a PEM certificate: " .. tostring(err))
    end
    local key
    key, err = ssl.parse_pem_priv_key(key_pem)
    if not key then
        argerr("tls_key_file", "not a PEM private key: " .. tostring(err))
    end
    self.tls_cert, self.tls_key = cert, key
    self.tls_cert_id = ngx.md5(cert_pem)
end

-- hilock.new(opts) -> client. Create it once per worker (module level or
-- init_worker); it keeps the client id and the watchdog's table.
function _M.new(opts)
    opts = opts or {}
    if type(opts) ~= "table" then
        argerr("opts", "expected a table")
    end
    for k in pairs(opts) do
        if not known_options[k] then
            argerr("opts", "unknown option '" .. tostring(k) .. "'")
        end
    end
    local o = opts
    if opts.url then
        if type(opts.url) ~= "string" then
            argerr("url", "expected a string")
        end
        local perr
        o, perr = parse_url(opts.url)
        if not o then
            argerr("url", perr)
        end
        for k, v in pairs(opts) do
            if k ~= "url" and o[k] == nil then
                o[k] = v
            end
        end
    end
    local mode = o.mode or "single"
    local self = setmetatable({
        mode = mode,
        host = o.host or "127.0.0.1",
        port = o.port or 6379,
        seeds = o.seeds,
        master_name = o.master_name,
        user = o.user,
        password = o.password,
        sentinel_user = o.sentinel_user,
        sentinel_password = o.sentinel_password,
        tls = o.tls and true or false,
        tls_server_name = o.tls_server_name,
        tls_verify = not o.tls_insecure,
        db = o.db or 0,
        connect_timeout_ms = seconds(o.connect_timeout, 1000, false, "connect_timeout"),
        command_timeout_ms = seconds(o.command_timeout, 1000, false, "command_timeout"),
        watchdog_lease_ms = seconds(o.watchdog_lease, 30000, false, "watchdog_lease"),
        fair_wait_window_ms = seconds(o.fair_wait_window, 300000, false, "fair_wait_window"),
        keepalive_ms = seconds(o.keepalive_timeout, 60000, false, "keepalive_timeout"),
        replica_ack_ms = seconds(o.replica_ack_timeout, 1000, false, "replica_ack_timeout"),
        pool_size = o.pool_size or 64,
        uuid = proto.uuid(),
        seq = 0,
        latch_epoch = 0,  -- bumped when a command's reply was lost (latch keys)
        nodes = {},       -- "host:port" -> node
        wd = {},          -- key -> {p = proto lock, owner = ...}
        held = {},        -- key -> every hold of this worker, listening (hold_start)
        wd_running = false,
        lost = {},        -- key -> true once the watchdog found it gone
        lost_old = {},    -- the previous generation of lost (see mark_lost)
        lost_n = 0,
        lost_max = o.lost_memory or 1024,
        leases = {},      -- key -> lease_ms: explicit leases of holds
        lease_ends = {},  -- key -> when that lease ends (now_ms)
        nleases = 0,
        st = new_stats(), -- counters (client:stats())
        stats_names = o.stats_names or 0, -- per-name counters (name_slot)
        st_names = {},    -- kind -> name -> figures
        st_order = {},    -- {kind, name, figures}, in the order first counted
        st_other = {},    -- kind -> figures of the pairs beyond stats_names
        since = {},       -- key -> when its hold was first granted (now_ms)
        settles = {},     -- settles running in light threads (settle_later)
    }, Client)
    -- the session's hold table (the engine's): which holds to check after a
    -- frame on their lock's channel (its renewals are not used here)
    self.holds = proto.holds(self.watchdog_lease_ms, self.command_timeout_ms)
    -- the session's acquire attempts not settled and releases that got no
    -- answer: settled or sent again before their owner's next acquire of
    -- the lock (acquire_run)
    self.unsettled_acq = proto.unsettled()
    if o.replica_ack == nil then
        self.replica_ack = mode ~= "single" -- Redisson's default outside one server
    else
        self.replica_ack = o.replica_ack and true or false
    end
    if type(self.host) ~= "string" or type(self.port) ~= "number" or type(self.db) ~= "number"
        or type(self.pool_size) ~= "number" or self.pool_size < 1
        or type(self.lost_max) ~= "number" or self.lost_max < 1 then
        argerr("opts", "bad host, port, db, pool_size or lost_memory")
    end
    local sn = self.stats_names
    if type(sn) ~= "number" or sn ~= math.floor(sn) or sn < 0 or sn > STATS_NAMES_MAX then
        argerr("opts", "stats_names must be an integer in 0.." .. STATS_NAMES_MAX)
    end
    if mode == "cluster" and self.db ~= 0 then
        argerr("opts", "a cluster has no databases")
    end
    -- what tostring(client) shows: the URL with its passwords as ***
    if opts.url then
        self.shown_url = hilock.redact_url(opts.url)
    else
        local who = (self.user or "") .. (self.password and ":***" or "")
        self.shown_url = str_format("%s://%s%s:%d/%d", self.tls and "rediss" or "redis",
                                    who ~= "" and (who .. "@") or "", self.host, self.port,
                                    self.db)
    end
    load_client_cert(self, o)
    -- TLS settings are part of every pool's name: a plain client must never
    -- be handed a TLS connection, nor one verified for another name or made
    -- with another client certificate
    self.tls_tag = self.tls and ("tls:" .. (self.tls_server_name or "") .. ":"
                                 .. tostring(self.tls_verify) .. ":"
                                 .. (self.tls_cert_id or "")) or ""
    if mode == "single" then
        self.node = node_of(self, self.host, self.port)
        self.pool = self.node.pool
    else
        local hosts = {}
        for i, sd in ipairs(self.seeds) do
            hosts[i] = sd.host .. ":" .. sd.port
        end
        -- the key of the worker-wide caches (slot map, master address)
        self.pool = str_format("hilock-%s:%s/%s:%d:%s:%s:%s", mode, table.concat(hosts, ","),
                               self.master_name or "", self.db, self.user or "",
                               self.password and ngx.md5(self.password) or "",
                               self.tls_tag)
    end
    -- how long an acquire latch answers a request sent again (the engine's rule)
    self.latch_ttl_ms = proto.acquire_latch_ttl(self.command_timeout_ms, self.connect_timeout_ms)
    local hs = proto.handshake_cmds(self.user, self.password, self.db)
    self.handshake = #hs > 0 and hs or nil
    return self
end

-- A connected cosocket (TLS when the client is): host:port, or the unix
-- socket "unix:/path" (port 0). A fresh TLS connection is verified against
-- nginx's lua_ssl_trusted_certificate and the server name (tls_server_name,
-- else the host).
local function open_socket(self, host, port, pool_opts)
    -- a cosocket object this request put back after keepalive (making one
    -- costs more than the rest of a pooled checkout); objects are bound to
    -- their request, so the spare one lives in ngx.ctx. Plain connections
    -- only: an object keeps its TLS client certificate across connects.
    local sock
    if not self.tls then
        local ctx = ngx.ctx
        sock = ctx.hilock_sock
        if sock then
            ctx.hilock_sock = nil
        end
    end
    sock = sock or tcp()
    sock:settimeouts(self.connect_timeout_ms, self.command_timeout_ms,
                     self.command_timeout_ms)
    local ok, err
    if port == 0 then
        ok, err = sock:connect(host, pool_opts)
    else
        ok, err = sock:connect(host, port, pool_opts)
    end
    if not ok then
        return nil, "connection: " .. tostring(err)
    end
    if self.tls and sock:getreusedtimes() == 0 then
        if self.tls_cert then
            ok, err = sock:setclientcert(self.tls_cert, self.tls_key)
            if not ok then
                sock:close()
                return nil, "tls: " .. tostring(err)
            end
        end
        ok, err = sock:sslhandshake(false, self.tls_server_name or host, self.tls_verify)
        if not ok then
            sock:close()
            return nil, "tls: " .. tostring(err)
        end
    end
    return sock
end

-- "no reply within N ms from host:port": the engine's words for a server
-- that took the connection and stays silent (every binding says the same).
local function no_reply(self, node)
    local where = node.port == 0 and (node.host:gsub("^unix:", "")) or (node.host .. ":" .. node.port)
    return proto.no_reply_msg(self.command_timeout_ms, where)
end

-- A connected cosocket to node (from its pool when possible), authenticated.
local function connect(self, node)
    local sock, err = open_socket(self, node.host, node.port, node.pool_opts)
    if not sock then
        return nil, err
    end
    if self.handshake and sock:getreusedtimes() == 0 then
        local rd = get_reader()
        for i = 1, #self.handshake do
            local r, rerr = send_read(sock, rd, self.handshake[i])
            if not r then
                sock:close()
                if rerr == "connection: timeout" then
                    rerr = "connection: " .. no_reply(self, node)
                end
                return nil, rerr
            end
            local ok, msg = proto.handshake_reply(r)
            if not ok then
                sock:close()
                return nil, "auth: " .. msg
            end
        end
        put_reader(rd)
    end
    return sock
end

local function keepalive(self, sock)
    local ok = sock:setkeepalive(self.keepalive_ms, self.pool_size)
    if not ok then
        sock:close()
        return
    end
    if not self.tls then
        local ctx = ngx.ctx -- the object may connect again (open_socket)
        if not ctx.hilock_sock then
            ctx.hilock_sock = sock
        end
    end
end

-- ---------------------------------------------------------------- routing

-- Worker-wide caches shared by clients with the same seeds (client.pool):
local slot_maps = {} -- cluster: key -> {map = {slot -> node}, at, loading, stale}
local masters = {}   -- sentinel: key -> {node, at}

-- One plain command to host:port on a pooled socket (seeds, masters): the
-- reply, or nil, err.
local function ask(self, node, bytes)
    local sock, err = connect(self, node)
    if not sock then
        return nil, err
    end
    local rd = get_reader()
    local r
    r, err = send_read(sock, rd, bytes)
    if not r then
        sock:close()
        return nil, err
    end
    put_reader(rd)
    keepalive(self, sock)
    return r
end

local slots_cmd = proto.cluster_slots_cmd()
local role_cmd = proto.role_cmd()
local asking_cmd = proto.asking_cmd()

-- Load the cluster's slot map from any known node.
local function load_slots(self, sm)
    local tried, candidates = {}, {}
    for _, sd in ipairs(self.seeds) do
        candidates[#candidates + 1] = node_of(self, sd.host, sd.port)
    end
    if sm and sm.map then
        for _, n in pairs(sm.map) do
            candidates[#candidates + 1] = n
        end
    end
    local last = "connection: no cluster node reachable"
    for _, n in ipairs(candidates) do
        if not tried[n] then
            tried[n] = true
            local r, err = ask(self, n, slots_cmd)
            local v = r and proto.decode_slots(r)
            if v and #v > 0 then
                local map = {}
                for _, g in ipairs(v) do
                    local node = node_of(self, g[3] or n.host, g[4])
                    for slot = g[1], g[2] do
                        map[slot] = node
                    end
                end
                return map
            end
            last = err or "protocol: empty slot map (cluster not ready)"
        end
    end
    return nil, last
end

local function cluster_node(self, slot)
    local sm = slot_maps[self.pool]
    if not sm then
        sm = { stale = true }
        slot_maps[self.pool] = sm
    end
    if sm.loading and not sm.map then -- another request is loading the first map
        local deadline = now_ms() + self.connect_timeout_ms + self.command_timeout_ms
        while sm.loading and now_ms() < deadline do
            ngx_sleep(0.005)
        end
    end
    if (sm.stale or not sm.map or not sm.map[slot]) and not sm.loading then
        sm.loading = true
        local map, err = load_slots(self, sm)
        sm.loading = false
        if map then
            sm.map, sm.stale, sm.at = map, false, now_ms()
        elseif not sm.map then
            return nil, err
        end
    end
    local n = sm.map and sm.map[slot]
    if not n then
        return nil, "connection: no master serves slot " .. slot
    end
    -- the map may have been loaded by another client with the same seeds
    return self.nodes[n.key] or node_of(self, n.host, n.port)
end

-- The worker's sentinel watcher (one ngx.timer per sentinel URL): listens
-- to "+switch-master" on the first sentinel that answers and points the
-- master cache at the new master as soon as a failover ends, so that no
-- request goes on writing to a demoted master that does not know it yet.
local watchers = {} -- client.pool -> true while a watcher runs

-- A connection to sentinel sd (TLS as the client; AUTH with the sentinels'
-- own credentials on a fresh one), or nil, err.
local function sentinel_socket(self, sd, pool)
    if pool and self.tls then
        pool = pool .. ":" .. self.tls_tag
    end
    local sock, err = open_socket(self, sd.host, sd.port, pool and { pool = pool } or nil)
    if not sock then
        return nil, err
    end
    if self.sentinel_password and sock:getreusedtimes() == 0 then
        local auth = proto.handshake_cmds(self.sentinel_user, self.sentinel_password)[1]
        local rd = get_reader()
        local r
        r, err = send_read(sock, rd, auth)
        if not r then
            sock:close()
            return nil, err
        end
        put_reader(rd)
        local ok, msg = proto.handshake_reply(r)
        if not ok then
            sock:close()
            return nil, "auth: sentinel " .. sd.host .. ":" .. sd.port .. ": " .. msg
        end
    end
    return sock
end

local function sentinel_watch(premature, self, key)
    local sub = proto.sentinel_watch_cmd()
    while not premature and not ngx.worker.exiting() do
        local listened = false
        for _, sd in ipairs(self.seeds) do
            if ngx.worker.exiting() then
                break
            end
            local sock = sentinel_socket(self, sd)
            if sock and sock:send(sub) then
                local rd = proto.reader()
                masters[key] = nil -- a switch may have been missed meanwhile
                while not ngx.worker.exiting() do
                    sock:settimeout(LISTEN_POLL_MS)
                    local r, err = read_reply(sock, rd)
                    if r then
                        listened = true
                        local host, port = proto.decode_switch_master(r, self.master_name)
                        if host then
                            masters[key] = { node = node_of(self, host, port), at = now_ms() }
                        end
                    elseif err ~= "connection: timeout" then
                        break
                    end
                end
            end
            sock:close()
        end
        if not listened and not ngx.worker.exiting() then
            ngx_sleep(1) -- no sentinel answers: the cache (1 s) still limits staleness
        end
    end
    watchers[key] = nil
end

-- Ask the sentinels for the master; check that it is one.
local function sentinel_master(self, force)
    local key = self.pool
    if not watchers[key] and timer_at(0, sentinel_watch, self, key) then
        watchers[key] = true
    end
    local e = masters[key]
    if e and not force and now_ms() - e.at < MASTER_CACHE_MS then
        return e.node
    end
    local last = "connection: no sentinel reachable"
    local cmd = proto.sentinel_master_cmd(self.master_name)
    for _, sd in ipairs(self.seeds) do
        local sock, err = sentinel_socket(self, sd, "hilock-sentinel:" .. sd.host .. ":"
                                          .. sd.port .. ":" .. (self.sentinel_user or "") .. ":"
                                          .. (self.sentinel_password
                                              and ngx.md5(self.sentinel_password) or ""))
        if sock then
            local rd = get_reader()
            local r
            r, err = send_read(sock, rd, cmd)
            if r then
                put_reader(rd)
                keepalive(self, sock)
                local host, port = proto.decode_sentinel_master(r)
                if host then
                    local node = node_of(self, host, port)
                    local role = ask(self, node, role_cmd)
                    if role and proto.decode_role(role) then
                        masters[self.pool] = { node = node, at = now_ms() }
                        return node
                    end
                    last = "connection: " .. node.key .. " named by sentinel " .. sd.host
                           .. ":" .. sd.port .. " is not a master (failover in progress?)"
                else
                    last = "connection: " .. proto.master_addr_msg(
                        "sentinel " .. sd.host .. ":" .. sd.port, self.master_name, r)
                end
            else
                sock:close()
                last = err
            end
        else
            last = tostring(err) .. " (sentinel " .. sd.host .. ":" .. sd.port .. ")"
        end
    end
    return nil, last
end

-- The master that serves slot (the only node outside cluster mode).
local function master_node(self, slot)
    local mode = self.mode
    if mode == "single" then
        return self.node
    elseif mode == "cluster" then
        return cluster_node(self, slot)
    end
    return sentinel_master(self)
end

-- Something went wrong with the routing: reload it before the next command.
local function invalidate(self)
    if self.mode == "cluster" then
        local sm = slot_maps[self.pool]
        if sm then
            sm.stale = true
        end
    elseif self.mode == "sentinel" then
        masters[self.pool] = nil
    end
end

-- MOVED: the slot lives on host:port now; the rest of the map is reloaded
-- at the next command.
local function moved(self, slot, host, port)
    local sm = slot_maps[self.pool]
    if sm and sm.map then
        sm.map[slot] = node_of(self, host, port)
    end
    invalidate(self)
end


local function st_close(st)
    if st.sock then
        st.sock:close()
    end
    st.sock, st.rd, st.node = nil, nil, nil
end

-- Put the connection of st back in its pool.
local function st_done(self, st)
    if st.sock then
        if st.rd:pending() == 0 then
            if nreaders < 64 then
                nreaders = nreaders + 1
                readers[nreaders] = st.rd
            end
            keepalive(self, st.sock)
        else
            st.sock:close()
        end
    end
    st.sock, st.rd, st.node = nil, nil, nil
end

-- One command for slot on its master, over st's connection when it still
-- goes to the right node. The engine's router says what each reply means
-- (the answer, a redirection to follow, a pause, a new master to look up).
-- Returns the reply or nil, err; st keeps the connection. nil, err, true:
-- the command was sent and its reply did not come in time (the server may
-- still run it); st still holds that connection, for settling. A fourth
-- result, lost, says the command went out and its connection died before
-- the reply (the server may have run it). resend: such a command may be
-- sent again, once, when its connection came from the pool (a dead idle
-- connection; the caller's latch makes the copy answer like the first).
-- lost stays true whatever ends that resend (no connection, a failed send):
-- the first copy went out all the same.
local function exec(self, slot, bytes, st, resend)
    local rt, asking, lost
    while true do
        local node, err = asking, nil
        if not node then
            node, err = master_node(self, slot)
            if not node then
                return nil, err, nil, lost
            end
        end
        if st.sock and st.node ~= node then
            st_done(self, st)
        end
        local act, a1, a2, a3, a4
        if not st.sock then
            st.sock, err = connect(self, node)
            if not st.sock then
                invalidate(self)
                rt = rt or proto.router(self.mode)
                act, a1 = rt:on_conn_error(false)
                if act ~= "refresh" then
                    return nil, err, nil, lost
                end
                asking = nil
                ngx_sleep(a1 / 1000)
                goto continue
            end
            st.rd, st.node = get_reader(), node
            st.reused = resend and st.sock:getreusedtimes() > 0
        end
        do
            local ok
            ok, err = st.sock:send(asking and { asking_cmd, bytes } or bytes)
            if not ok then
                st_close(st)
                invalidate(self)
                return nil, "connection: " .. tostring(err), nil, lost
            end
            local r, is_error
            if asking then
                r, err = read_reply(st.sock, st.rd)
            end
            if r or not asking then
                -- rd is empty unless the ASKING reply came with this one
                r, err, is_error = read_reply(st.sock, st.rd, not asking)
            end
            if not r then
                invalidate(self)
                if err == "connection: timeout" then
                    return nil, "connection: " .. no_reply(self, st.node), true, lost
                end
                local reused = st.reused
                st_close(st)
                if err:find("^connection:") then
                    lost = true
                    if resend and reused then
                        resend = false
                        goto continue
                    end
                end
                return nil, err, nil, lost
            end
            if not is_error then
                return r, nil, nil, lost -- the common case: no router needed
            end
            rt = rt or proto.router(self.mode)
            act, a1, a2, a3, a4 = rt:on_reply(r)
            if act == "done" then
                return r, nil, nil, lost
            end
            asking = nil
            if act == "moved" or act == "ask" then
                self.st.redirects = self.st.redirects + 1
            end
            if act == "moved" then
                moved(self, a1, a2, a3)
                if a4 > 0 then
                    ngx_sleep(a4 / 1000)
                end
            elseif act == "ask" then
                asking = node_of(self, a1, a2)
            elseif act == "retry" then
                ngx_sleep(a1 / 1000)
            elseif act == "refresh" then
                st_close(st)
                invalidate(self)
                if a1 > 0 then
                    ngx_sleep(a1 / 1000)
                end
            else
                return nil, "connection: " .. (r:error() or a1), nil, lost
            end
        end
        ::continue::
    end
end

-- One command round trip (routed by slot) on a pooled connection.
local function call(self, bytes, slot)
    local st = {}
    local r, err = exec(self, slot or 0, bytes, st)
    if not r then
        st_close(st)
        return nil, err
    end
    st_done(self, st)
    return r
end

-- client:command(name, ...) -> the reply as a Lua value | nil, err.
-- A convenience for plain commands (GET, SET, ...) over the same pool.
-- On a cluster it goes to the master of the slot of its first argument
-- after the command name (the key of most commands).
function Client:command(...)
    local key = select(2, ...)
    local slot = self.mode == "cluster" and key ~= nil and proto.key_slot(tostring(key)) or 0
    local r, err = call(self, proto.command(...), slot)
    if not r then
        return nil, err
    end
    local v, msg = r:value()
    if v == nil then
        return nil, "protocol: " .. msg
    end
    return v
end

function Client:id()
    return self.uuid
end

-- A lock or semaphore name: a string the engine accepts (its words, as
-- every binding's), else an argument error pointing where its caller's
-- own check would have.
local function check_name_arg(name)
    if type(name) ~= "string" then
        argerr("name", "expected a string", 4)
    end
    local name_ok, why = proto.check_name(name)
    if not name_ok then
        argerr("name", why, 4)
    end
end

local function new_lock(self, name, kind, tid)
    check_name_arg(name)
    if tid ~= nil and (type(tid) ~= "number" or tid < 0 or tid % 1 ~= 0) then
        argerr("thread_id", "expected a non-negative integer")
    end
    local p = proto.lock(name, kind, self.mode == "cluster")
    -- every kind's attempts keep an acquire latch, on every topology (while
    -- a cluster slot migrates the engine's scripts go on without it)
    local latched = true
    return setmetatable({ client = self, name = name, p = p, slot = p:slot(), tid = tid,
                          kind_name = kind, latched = latched }, Lock)
end

-- client:lock(name [, thread_id]) / client:fair_lock(...) /
-- client:fenced_lock(...) / client:read_lock(...) / client:write_lock(...).
-- thread_id defaults to the current request's id. read_lock and write_lock
-- are the two sides of one read-write lock (Redisson's RReadWriteLock);
-- fenced_lock's grants carry fencing tokens (lk:acquire_token()).
for method, kind in pairs({ lock = "reentrant", fair_lock = "fair", fenced_lock = "fenced",
                           read_lock = "read", write_lock = "write" }) do
    Client[method] = function(self, name, tid)
        return new_lock(self, name, kind, tid)
    end
end

-- ---------------------------------------------------------------- watchdog

local renew_tick, doubt_tick, hold_drop

-- The watchdog's times are the session's hold table's (self.holds: every
-- hold granted there as what it is, hold_start): when each watchdog hold's
-- renewal is due (proto.renew_period after its last one went out) and when
-- it is reported lost "in doubt" (the engine's rule: lease - lease/5 after
-- its latest confirmed grant or renewal went out, unless a renewal of it in
-- flight went out at or after that point: then its answer is awaited first,
-- for at most the command timeout and never past the lease).
--
-- The doubt timer: a chain of its own at the table's earliest doubt
-- deadline, so that no renewal stuck in a connect or a read can put a
-- report off. nginx timers cannot be cancelled: arming an earlier one
-- supersedes the armed one (doubt_gen); a later deadline waits for the
-- armed one, which re-arms.
local function arm_doubt(self)
    local at = self.holds:next_doubt()
    if at < 0 or (self.doubt_armed and self.doubt_armed <= at) then
        return
    end
    local gen = (self.doubt_gen or 0) + 1
    local delay = at - now_ms()
    if timer_at((delay < 1 and 1 or delay) / 1000, doubt_tick, self, gen, 0) then
        self.doubt_gen, self.doubt_armed = gen, at
    end
end

-- Schedule the renewal tick at the table's next renewal (one timer chain
-- per client), and the doubt timer.
local function start_watchdog(self)
    if not self.doubt_armed then -- else it fires no later than a new hold's deadline
        arm_doubt(self)
    end
    if self.wd_running then
        return
    end
    local at = self.holds:next_renewal()
    if at < 0 then
        return
    end
    local delay = at - now_ms()
    local ok = timer_at((delay < 1 and 1 or delay) / 1000, renew_tick, self)
    self.wd_running = ok and true or false
end

-- Losses are remembered per (lock, owner), and request owners come and go:
-- so in two generations of at most lost_max keys each; when the current one
-- is full it becomes the old one and the older is forgotten.
-- why: what lk:lost() says after true ("gone", or "in doubt: ...").
local function mark_lost(self, key, why)
    if self.lost[key] then
        return
    end
    if self.lost_n >= self.lost_max then
        self.lost_old, self.lost, self.lost_n = self.lost, {}, 0
    end
    self.lost[key] = why or "gone"
    self.lost_n = self.lost_n + 1
end

-- key's hold (of the lock (kind, name)) ended, released or lost: its hold time.
local function hold_end(self, key, kind, name)
    local at = self.since[key]
    if at then
        self.since[key] = nil
        local k = self.st.kinds[kind]
        if k then
            local b = stats_bucket(now_ms() - at)
            k.hold_ms[b] = k.hold_ms[b] + 1
            local n = name_slot(self, kind, name)
            if n then
                n.hold_ms[b] = n.hold_ms[b] + 1
            end
        end
    end
end

-- The watched hold e (key) was lost (field: lost_gone, lost_expired,
-- lost_in_doubt): counted, its hold ended, logged at WARN with the lock's
-- name and thread (never a URL).
local function count_lost(self, key, e, field, silent_ms)
    local k = self.st.kinds[e.kind]
    if k then
        k[field] = k[field] + 1
        local n = name_slot(self, e.kind, e.p:name())
        if n then
            n[field] = n[field] + 1
        end
    end
    hold_end(self, key, e.kind, e.p:name())
    if field == "lost_in_doubt" then
        ngx.log(ngx.WARN, "hilock: lock '", e.p:name(), "' lost (in doubt): no renewal ",
                "confirmed for ", silent_ms, " ms; owner ", e.owner, " must stop using it")
    else
        ngx.log(ngx.WARN, "hilock: lock '", e.p:name(), "' lost: ", field == "lost_expired"
                and "its lease ran out while renewals went unconfirmed"
                or "removed on the server (force unlock or deleted)", "; it was held by ",
                e.owner)
    end
end

-- Holds the table reports lost "in doubt" (past their doubt deadline):
-- cut off from the server, the holder must stop before its lease ends there
-- and another client takes the lock. They stay in the table and are still
-- renewed: if the link comes back and the lock is still theirs, renewing it
-- is harmless; if it is gone, the renewal says so.
local function check_doubts(self)
    local now = now_ms()
    while true do
        local k = self.holds:doubt_next(now)
        if not k then
            return
        end
        local e = self.wd[k]
        local at = self.holds:state(k)
        if e and at then
            count_lost(self, k, e, "lost_in_doubt", now - at)
            mark_lost(self, k, str_format("in doubt: no renewal confirmed by the server for %d ms",
                                          now - at))
        end
    end
end

-- The holds the table found lost (a renewal or a check found the owner's
-- field gone), each reported once: counted (lost_expired when it was
-- reported in doubt before, else lost_gone), dropped, remembered for
-- lk:lost().
local function report_lost(self)
    while true do
        local k = self.holds:lost_next()
        if not k then
            return
        end
        local e = self.wd[k] or self.held[k]
        local _, doubted = self.holds:state(k)
        self.wd[k] = nil
        hold_drop(self, k)
        if e then
            count_lost(self, k, e, doubted and "lost_expired" or "lost_gone")
            mark_lost(self, k)
        end
    end
end

local function clear_lost(self, key)
    if self.lost[key] then
        self.lost[key] = nil
        self.lost_n = self.lost_n - 1
    end
    self.lost_old[key] = nil
end

-- The command renewing the holds of group g (g.entries: the session put
-- them in one group, renew_groups: up to its limit of one slot's holds, a
-- read side alone).
local function renew_cmd(self, g, eval)
    local es = g.entries
    if #es == 1 then
        return es[1].p:renew_cmd(es[1].owner, self.watchdog_lease_ms, eval)
    end
    local locks, owners = {}, {}
    for j, e in ipairs(es) do
        locks[j], owners[j] = e.p, e.owner
    end
    return proto.renew_many_cmd(locks, owners, self.watchdog_lease_ms, eval)
end

-- The outcome of each of a group's n holds from its reply.
local function renew_outcomes(r, n)
    if n == 1 then
        return { proto.renew_outcome(r) }
    end
    return (proto.renew_outcomes(r, n))
end

local replica_acked -- below

-- The outcome out of the renewal of hold k (entry e) sent at sent_at, to
-- the table (acked: a replica took it, or none is asked for), counted.
-- A hold released meanwhile (and maybe taken again: another entry) is
-- left alone.
local function renewed(self, k, e, out, acked, sent_at)
    local st = self.st
    if (self.wd[k] or false) == e then
        out = self.holds:outcome(k, out, acked, sent_at)
    else
        out = proto.renew_unacked(out, acked)
    end
    if out == "renewed" then
        st.renewals = st.renewals + 1
    elseif out ~= "lost" then
        st.renewal_failures = st.renewal_failures + 1
    end
end

-- Renew the groups of node ({keys, entries} each), pipelined on one
-- connection (sent at sent_at, when the table handed them out).
-- Redirected renewals come back in the retry list ({key, entry}); every
-- other one's outcome goes to the table.
local function renew_on(self, node, groups, retry, sent_at)
    local cmds = {}
    for j, g in ipairs(groups) do
        cmds[j] = renew_cmd(self, g, false)
    end
    local sock = connect(self, node)
    if not sock then
        invalidate(self)
    end
    local rd = sock and get_reader()
    local good = sock and sock:send(cmds) and true or false
    local st = self.st
    if sock then
        st.renewal_commands = st.renewal_commands + #cmds
    end
    local any_renewed = false
    for _, g in ipairs(groups) do
        if not good then
            break
        end
        local r = read_reply(sock, rd)
        local outs = r and renew_outcomes(r, #g.keys)
        if outs and outs[1] == "send_body" then -- the script body, now
            st.renewal_commands = st.renewal_commands + 1
            r = send_read(sock, rd, renew_cmd(self, g, true))
            outs = r and renew_outcomes(r, #g.keys)
        end
        if not outs then
            good = false
            break
        end
        g.outs = outs
        for _, out in ipairs(outs) do
            any_renewed = any_renewed or out == "renewed"
        end
    end
    -- replica_ack: a renewal no replica took is no confirmation (a master
    -- cut off from its replicas may be replaced by one whose lease runs
    -- from the last renewal it took): WAIT on the same connection, as for
    -- a grant, and the engine's renew_unacked says what each answer means
    local acked, closed = not self.replica_ack, false
    if self.replica_ack and good and any_renewed then
        local rs = { sock = sock, rd = rd, node = node }
        acked = replica_acked(self, rs)
        if not rs.sock then -- the connection failed: closed
            good, closed = false, true
        end
    end
    for _, g in ipairs(groups) do
        for j, k in ipairs(g.keys) do
            -- no usable answer: retried when next due
            local out = g.outs and g.outs[j] or "trouble"
            if out ~= "trouble" and proto.renew_unacked(out, acked) == "redirect" then
                retry[#retry + 1] = { k, g.entries[j] }
                st.renewal_failures = st.renewal_failures + 1
            else
                renewed(self, k, g.entries[j], out, out == "trouble" or acked, sent_at)
            end
        end
    end
    if good then
        put_reader(rd)
        keepalive(self, sock)
    elseif sock then
        if not closed then
            sock:close()
        end
        invalidate(self)
    end
end

-- One tick: the renewals the table has due within a period (so the holds
-- share one pass per period), in the groups the session makes (one
-- renewal command each), one pipelined round trip per master (cluster:
-- the master of each group's slot). A "0" answer means the owner field is
-- gone: the hold is lost. Transport errors are retried when next due; a
-- redirected renewal (slot moved, failover) is sent again at once through
-- the redirection-following path. Then the losses and doubts.
renew_tick = function(premature, self)
    if premature then
        self.wd_running = false
        return
    end
    self.wd_busy = true
    local sent_at = now_ms()
    local gs = self.holds:renew_groups(sent_at, proto.renew_period(self.watchdog_lease_ms))
    -- finding a master may yield (sentinel, slot map), and other requests
    -- change self.wd meanwhile: the entries as handed out
    for i, ks in ipairs(gs) do
        local g = { keys = {}, entries = {} }
        for _, k in ipairs(ks) do
            local e = self.wd[k]
            if e then
                g.keys[#g.keys + 1], g.entries[#g.entries + 1] = k, e
            else
                renewed(self, k, false, "trouble", true, sent_at)
            end
        end
        gs[i] = g
    end
    local per, order = {}, {}
    for _, g in ipairs(gs) do
        local node = g.entries[1] and master_node(self, g.entries[1].slot)
        if node then
            if not per[node] then
                per[node] = {}
                order[#order + 1] = node
            end
            per[node][#per[node] + 1] = g
        else
            for j, k in ipairs(g.keys) do
                renewed(self, k, g.entries[j], "trouble", true, sent_at)
            end
        end
    end
    for _, node in ipairs(order) do
        local retry = {}
        renew_on(self, node, per[node], retry, sent_at)
        for _, ke in ipairs(retry) do
            local k, e = ke[1], ke[2]
            local build = function(eval)
                return e.p:renew_cmd(e.owner, self.watchdog_lease_ms, eval)
            end
            local st = self.st
            st.renewal_commands = st.renewal_commands + 1
            local r = call(self, build(false), e.slot)
            if r and proto.renew_outcome(r) == "send_body" then
                st.renewal_commands = st.renewal_commands + 1
                r = call(self, build(true), e.slot)
            end
            local out = r and proto.renew_outcome(r) or "trouble"
            renewed(self, k, e, out == "redirect" and "trouble" or out, true, sent_at)
        end
    end
    self.wd_busy = false
    report_lost(self)
    check_doubts(self)
    self.wd_running = false
    start_watchdog(self)
end

-- The doubt timer's check (gen: its arming; n: how many times it waited).
-- A renewal tick due but not yet run fired late in this same cycle (nginx
-- runs expired timers one after another): the check waits for it to send.
doubt_tick = function(premature, self, gen, n)
    if premature or gen ~= self.doubt_gen then
        return
    end
    self.doubt_armed = nil
    local due = self.holds:next_renewal()
    if n < 3 and not self.wd_busy and due >= 0 and now_ms() >= due then
        if timer_at(0, doubt_tick, self, gen, n + 1) then
            self.doubt_armed = 0
            return
        end
    end
    check_doubts(self)
    arm_doubt(self)
end

-- The key of a (lock, owner) hold in the client's tables; the lock keeps
-- the last one it made (a request uses one owner).
local function wd_key(lock, owner)
    if lock.key_owner == owner then
        return lock.key
    end
    local key = lock.name .. "\0" .. owner
    lock.key_owner, lock.key = owner, key
    return key
end

-- ---------------------------------------------------------------- lock

-- The hold's owner field (the engine adds ":write" on a write side); the
-- lock keeps the last one it made.
local function owner_of(lock)
    local tid = lock.tid or request_tid()
    if lock.owner_tid ~= tid then
        lock.owner_tid, lock.owner = tid, lock.p:hold_owner(lock.client.uuid, tid)
    end
    return lock.owner
end

local live_due

-- A subscription on its own connection to the master of slot: {sock, rd,
-- channel, node}. On a cluster it is a shard subscription (SSUBSCRIBE),
-- which is what sees the scripts' SPUBLISH. L: a shared listener, whose
-- liveness rule (L.live, the session's) paces the wait for the
-- confirmation instead of the command timeout, and meanwhile has the holds
-- listening there checked.
local function subscribe(self, channel, slot, L)
    local cmd = proto.subscribe_cmd(channel, self.mode == "cluster")
    for _ = 1, 3 do
        local node = master_node(self, slot)
        if not node then
            return nil
        end
        local sock = connect(self, node)
        if not sock then
            invalidate(self)
            return nil
        end
        local rd = get_reader()
        local ok = sock:send(cmd)
        local retry = false
        if ok and L then
            L.live:opened(now_ms())
        end
        while ok do
            if L then
                local ms = live_due(self, L, sock)
                if not ms then
                    break
                end
                sock:settimeout(ms)
            end
            local r, err = read_reply(sock, rd)
            if not r then
                if not L or err ~= "connection: timeout" then
                    break
                end
                goto continue
            end
            if L then
                L.live:heard(now_ms())
            end
            local act, s1, host, port = proto.router(self.mode):on_reply(r)
            if act == "moved" or act == "ask" or act == "refresh" then
                -- stale slot map or master: look again
                if act == "moved" then
                    moved(self, s1, host, port)
                else
                    invalidate(self)
                end
                retry = true
                break
            end
            local typ, ch = decode_pubsub(r)
            if typ == "subscribe" and ch == channel then
                return { sock = sock, rd = rd, channel = channel, node = node, slot = slot,
                         confirm = r, L = L }
            end
            if r:type() == "error" then
                break
            end
            ::continue::
        end
        sock:close()
        if L then
            L.live:closed(now_ms())
        end
        if not retry then
            return nil
        end
    end
    return nil
end

-- Drop the subscription; the connection goes back to the pool when the
-- server confirms, else it is closed.
local function unsubscribe(self, ps)
    local sock, rd = ps.sock, ps.rd
    local ok = sock:send(proto.unsubscribe_cmd(ps.channel, self.mode == "cluster"))
    while ok do
        local r = read_reply(sock, rd)
        if not r then
            break
        end
        local typ, ch = decode_pubsub(r)
        if typ == "unsubscribe" and ch == ps.channel then
            if rd:pending() == 0 then
                put_reader(rd)
                sock:settimeouts(self.connect_timeout_ms, self.command_timeout_ms,
                                 self.command_timeout_ms)
                keepalive(self, sock)
                return
            end
            break
        end
    end
    sock:close()
end

-- Does ps still listen on the master of its slot? (cluster: the slot map,
-- reloaded after a MOVED; sentinel: the master the sentinels name, asked at
-- most every MASTER_CACHE_MS.) A listener on a former master would never
-- hear the unlock.
local function ps_moved(self, ps)
    if self.mode == "single" then
        return false
    end
    local node = master_node(self, ps.slot)
    return node ~= nil and node ~= ps.node
end

-- Wait up to ms (-1: no limit) for a wake-up message on ps. Returns the
-- subscription, or false when it ended (connection broke, the server ended
-- a shard subscription because the slot moved, the master changed, or the
-- session's liveness rule of its connection, ps.L.live, gave it up: a
-- silent connection would hide the unlock meant for this waiter).
-- Without a subscription (nil: subscribing failed, the machine polls) it
-- just sleeps.
local function wait_message(self, ps, ms, w)
    if ms < 0 then
        ms = LONG_WAIT_MS
    end
    local deadline = now_ms() + ms
    if not ps then
        -- in slices, so that lk:cancel() (w.cancelled) ends the sleep soon
        while not w.cancelled do
            local left = deadline - now_ms()
            if left <= 0 then
                break
            end
            ngx_sleep((left > CANCEL_POLL_MS and CANCEL_POLL_MS or left) / 1000)
        end
        return nil
    end
    while true do
        local left = deadline - now_ms()
        if left <= 0 or w.cancelled then
            return ps
        end
        if self.mode ~= "single" and left > LISTEN_POLL_MS then
            left = LISTEN_POLL_MS
        end
        -- another light thread cannot interrupt this read (a cosocket is
        -- its reader's alone): lk:cancel() is seen at the next slice
        if left > CANCEL_POLL_MS then
            left = CANCEL_POLL_MS
        end
        local lms = live_due(self, ps.L, ps.sock)
        if not lms then -- unanswered: given up; the machine tries again at once
            ps.sock:close()
            return false
        end
        ps.sock:settimeout(lms < left and lms or left)
        local r, err = read_reply(ps.sock, ps.rd)
        if not r then
            if err ~= "connection: timeout" or ps_moved(self, ps) then
                ps.sock:close()
                ps.L.live:closed(now_ms())
                return false
            end
        else
            ps.L.live:heard(now_ms())
            local typ, ch = decode_pubsub(r)
            if typ == "message" and ch == ps.channel and proto.lock_wakes(r) ~= 0 then
                return ps, true -- woken by the message (else: its time ran out)
            end
            if typ == "unsubscribe" and ch == ps.channel then
                -- not asked for: the slot moved to another master
                ps.sock:close()
                invalidate(self)
                return false
            end
        end
    end
end

-- Shared listeners (reentrant locks). Every unlock publishes "0" on the
-- lock's one channel; if each waiting request had its own subscription, every
-- unlock would wake them all. Instead each worker keeps one subscription per
-- channel, read by an ngx.timer; waiting requests park on a semaphore and a
-- "0" wakes one of them ("1" wakes all), as libcore's listener thread does.
-- Fair-lock waiters have a channel of their own and subscribe directly.
-- Holders listen there too (hold_start): every hold of the worker is in
-- L.holds of its lock's channel (the engine's hold_channel), and a lock
-- frame there goes to the session (holds_heard), which says which holds to
-- check (send_checks), without taking a waiter's wake-up; the listener runs
-- while anyone waits or holds.
local listeners = {} -- pool .. "\0" .. channel -> listener
local check_hold

-- Wake up to n (nil: every) requests waiting on L (none may be left:
-- sem:post(0) raises).
local function wake_all(L, n)
    local waiting = 0
    for _ in pairs(L.waiting) do
        waiting = waiting + 1
    end
    if n and n < waiting then
        waiting = n
    end
    if waiting > 0 then
        L.sem:post(waiting)
    end
end

-- Fixed-lease holds whose lease ran out (the table's t:end_next: nobody
-- released them) stop listening; true if any hold listens on L still.
local function holds_left(c, L)
    local now = now_ms()
    while true do
        local k = c.holds:end_next(now)
        if not k then
            return next(L.holds) ~= nil
        end
        hold_drop(c, k)
    end
end

-- Send the checks the session hands out ("is the hold still there?": the
-- engine's hold_check_cmd, no renewal), each on a timer of its own (the
-- listener keeps reading). A hold whose release is under way is left to
-- that release (usually the message is its own), and checked after it.
local function send_checks(c)
    local now = now_ms()
    while true do
        local key = c.holds:check_next(now)
        if not key then
            return
        end
        local h = c.held[key]
        if h and h.releasing > 0 then
            h.after = true
        end
        if not h or h.releasing > 0 or not timer_at(0, check_hold, c, key, h) then
            c.holds:check_outcome(key, nil)
        end
    end
end

-- A frame r on L's channel: the session says which of the holds listening
-- there are to be checked now.
local function holds_heard(c, L, r)
    local now, due = now_ms(), false
    for k in pairs(L.holds) do
        if c.holds:heard(k, r, now) then
            due = true
        end
    end
    if due then
        send_checks(c)
    end
end

local ping_cmd = proto.ping_cmd()

-- What the session's liveness rule of L's connection (L.live, proto.sublive)
-- has due now: the holds listening there handed to the session, which says
-- which to check on the command connection (not known alive: a force
-- unlock published there may go unheard); a PING written on sock. Returns
-- false when the rule gives the connection up (or the PING cannot be
-- written), else how long to read before asking again (ms).
live_due = function(c, L, sock)
    local now = now_ms()
    local ping, reset, check = L.live:due(now)
    if check then
        local due = false
        for k in pairs(L.holds) do
            due = c.holds:unheard(k, now) or due
        end
        if due then
            send_checks(c)
        end
    end
    if reset then
        return false
    end
    if ping and sock and not sock:send(ping_cmd) then
        L.live:closed(now)
        return false
    end
    local nxt, ms = L.live:next(), LISTEN_POLL_MS
    if nxt >= 0 and nxt - now < ms then
        ms = nxt > now and nxt - now or 1
    end
    return ms
end

-- No subscription while holds listen on L: wait up to LISTEN_POLL_MS before
-- subscribing again, their checks going on meanwhile. false: nothing listens
-- any more (or the worker exits).
local function listen_pause(c, L)
    local deadline = now_ms() + LISTEN_POLL_MS
    while not ngx.worker.exiting() and holds_left(c, L) do
        local ms, left = live_due(c, L, nil), deadline - now_ms()
        if left <= 0 then
            return true
        end
        ngx_sleep((ms < left and ms or left) / 1000)
    end
    return false
end

local function listener_loop(premature, c, key, L)
    local resubscribing = false
    while not premature and not ngx.worker.exiting() do
        local ps = subscribe(c, L.channel, L.slot, L)
        if not ps then
            -- holds listen here: they are checked until a subscription is
            -- heard again; waiters try again meanwhile
            wake_all(L)
            if not listen_pause(c, L) then
                break
            end
            resubscribing = true
            goto continue
        end
        if resubscribing then -- messages may have been missed: all retry
            c.st.reconnects = c.st.reconnects + 1
            ngx.log(ngx.WARN, "hilock: pub/sub listener connected again; waits woken to try again")
            wake_all(L)
        end
        -- the holds listening here joined before this subscription was
        -- confirmed (or before it was made again): a force unlock
        -- published in between went unheard (the session has them checked)
        holds_heard(c, L, ps.confirm)
        ps.confirm = nil
        L.state = "ready"
        if L.ready_waiting > 0 then
            L.ready:post(L.ready_waiting)
        end
        while true do
            if (not next(L.waiting) and not holds_left(c, L)) or ngx.worker.exiting() then
                -- nobody waits or holds any more (waiters of killed requests
                -- vanish with their coroutine: the set has weak keys)
                if listeners[key] == L then
                    listeners[key] = nil
                end
                L.state = "closed"
                L.live:idle()
                unsubscribe(c, ps)
                return
            end
            local ms = live_due(c, L, ps.sock)
            if not ms then -- unanswered: given up, another one subscribes
                ps.sock:close()
                break
            end
            ps.sock:settimeout(ms)
            local r, err = read_reply(ps.sock, ps.rd)
            if r then
                L.live:heard(now_ms())
                local typ, ch = decode_pubsub(r)
                if typ == "message" and ch == L.channel then
                    if next(L.holds) then
                        -- an unlock or force unlock: are our holds still there?
                        holds_heard(c, L, r)
                    end
                    -- the engine says how many a message wakes (-1 all; a
                    -- lock's channel: "0" one, "1" all; a semaphore's or
                    -- latch's: L.rule, n the published permits)
                    local n = L.rule and L.rule:wakes(r) or proto.lock_wakes(r)
                    if n ~= 0 then
                        wake_all(L, n > 0 and n or nil)
                    end
                elseif typ == "unsubscribe" and ch == L.channel then
                    -- ended by the server: the slot moved to another master
                    holds_heard(c, L, r)
                    ps.sock:close()
                    L.live:closed(now_ms())
                    invalidate(c)
                    break
                end
            elseif err ~= "connection: timeout" or ps_moved(c, ps) then
                ps.sock:close()
                L.live:closed(now_ms())
                break
            end
        end
        L.state = "reconnecting"
        resubscribing = true
        ::continue::
    end
    -- could not subscribe: waiters fall back to timed retries
    if listeners[key] == L then
        listeners[key] = nil
    end
    L.live:idle()
    L.state = "failed"
    if L.ready_waiting > 0 then
        L.ready:post(L.ready_waiting)
    end
    wake_all(L)
end

-- A listener of channel started (its timer running listener_loop), or nil.
-- L.live: the session's liveness rule of its connection.
local function new_listener(c, key, channel, slot, rule)
    local L = { channel = channel, slot = slot, state = "starting", ready_waiting = 0, rule = rule,
                sem = semaphore.new(0), ready = semaphore.new(0),
                waiting = setmetatable({}, WEAK_KEYS), holds = {},
                live = proto.sublive(c.command_timeout_ms) }
    if not timer_at(0, listener_loop, c, key, L) then
        return nil
    end
    listeners[key] = L
    return L
end

-- Register the calling request on the worker's listener for channel; returns
-- the listener once it is subscribed, or nil (then the machine polls).
-- rule: a semaphore's names (proto.sem), whose wakes(r) says how many a
-- message wakes; nil for a lock channel ("0" one, "1" all).
local function join_listener(c, channel, slot, rule)
    local key = c.pool .. "\0" .. channel
    local L = listeners[key]
    if not L then
        L = new_listener(c, key, channel, slot, rule)
        if not L then
            return nil
        end
    end
    local co = co_running()
    L.waiting[co] = true
    if L.state == "starting" then
        L.ready_waiting = L.ready_waiting + 1
        L.ready:wait((c.connect_timeout_ms + 2 * c.command_timeout_ms) / 1000)
        L.ready_waiting = L.ready_waiting - 1
    end
    if L.state == "starting" or L.state == "failed" then
        L.waiting[co] = nil
        return nil
    end
    return L
end

local function leave_listener(L)
    L.waiting[co_running()] = nil
end

-- A hold granted (lease_ms: its fixed lease, 0 = the watchdog's): it
-- listens on its lock's channel (the engine's hold_channel), on the
-- worker's listener for it (shared with waiters and the name's other
-- holds; started if none), so that a force unlock is reported at once, not
-- at the next renewal or never (a fixed lease). A fixed lease's hold
-- listens until that lease (the latest grant's) ends. Nothing waits for
-- the subscription: once it is confirmed, the listener checks the holds
-- that joined it before (a force unlock published in between is unheard).
local function hold_start(c, lock, key, owner, lease_ms, sent_at)
    -- in the session's table as what it is (a watchdog hold: renewed and
    -- checked for as long as it is held; or its fixed lease), its grant
    -- written at sent_at
    c.holds:grant(key, lease_ms == 0, lease_ms, sent_at)
    -- renewed with the other holds of its slot, a read side alone
    c.holds:batch(key, c.mode == "cluster" and lock.slot or 0, lock.kind_name == "read")
    local h = c.held[key]
    if not h then
        h = { p = lock.p, owner = owner, slot = lock.slot, kind = lock.kind_name, releasing = 0 }
        local channel = lock.p:hold_channel()
        local lkey = c.pool .. "\0" .. channel
        local L = listeners[lkey]
        if not L or L.state == "closed" or L.state == "failed" then
            L = new_listener(c, lkey, channel, lock.slot)
            if not L then
                return -- unheard: the watchdog still renews it
            end
        end
        L.holds[key] = h
        h.L = L
        c.held[key] = h
    end
end

-- key's hold is over (released, lost): it stops listening.
hold_drop = function(c, key)
    c.holds:remove(key)
    local h = c.held[key]
    if h then
        c.held[key] = nil
        if h.L.holds[key] == h then
            h.L.holds[key] = nil
        end
    end
end

-- "Is hold h still there?" (the engine's hold_check_cmd, no renewal): the
-- answer goes to the session, which says whether it is lost. Found gone
-- while its own release is under way: that release says "not owner" (or,
-- if it keeps the hold, the hold is checked again).
check_hold = function(premature, c, key, h)
    local gone
    if not premature then
        local r = call(c, h.p:hold_check_cmd(h.owner), h.slot)
        if r then
            gone = proto.hold_gone(r)
        end
        if gone and h.releasing > 0 then
            h.after = true
            gone = nil
        end
    end
    if c.held[key] == h then -- else released meanwhile: out of the table
        c.holds:check_outcome(key, gone)
    end
    report_lost(c)
    if not premature then
        send_checks(c) -- one heard again while this was out
    end
end

-- Replica acknowledgement of the write just made on st's connection, as
-- the engine's ack machine asks (replica count cached per node). true: a
-- replica has it, or the master has none (and, with sentinels, this client
-- never saw a master of the name with one); false: replicas exist and none
-- acknowledged, or the connection failed (and with it any certainty).
replica_acked = function(c, st)
    if not st.sock then
        return false
    end
    local node = st.node
    -- Sentinel: whether the name keeps replicas is the client's memory, not
    -- the node's: a master promoted a moment ago, or one cut off from its
    -- replicas, may list none
    local sentinel = c.mode == "sentinel"
    local k = proto.ack(node.nrep or -1, node.rep_at and now_ms() - node.rep_at or -1,
                        c.replica_ack_ms, sentinel and c.replicated)
    while true do
        local act, a1, a2, a3, a4 = k:next()
        if act == "send" then
            st.sock:settimeout(c.command_timeout_ms + a2)
            local r = send_read(st.sock, st.rd, a1)
            if r then
                k:on_reply(r)
            else
                k:on_error()
            end
        else
            if a3 then
                node.nrep, node.rep_at = a3, now_ms()
            end
            if a4 and sentinel then
                c.replicated = true
            end
            if a2 then
                st_close(st)
            else
                st.sock:settimeout(c.command_timeout_ms)
            end
            return a1
        end
    end
end

-- The lease each (lock, owner) hold of this client was taken with, when the
-- caller gave one: the engine's release re-applies it on a partial unlock
-- (watchdog holds need no entry: the watchdog lease is the default). An
-- entry whose lease ran out describes a hold that is gone; those are
-- dropped once the table grows, so unreleased holds cannot pile up.
local LEASES_PRUNE_AT = 1024

local function forget_lease(c, key)
    if c.leases[key] then
        c.leases[key], c.lease_ends[key] = nil, nil
        c.nleases = c.nleases - 1
    end
end

local function remember_lease(c, key, lease_ms)
    if lease_ms <= 0 then
        return forget_lease(c, key)
    end
    local now = ngx_now() * 1000 -- the cached clock is good enough here
    if not c.leases[key] then
        if c.nleases >= LEASES_PRUNE_AT then
            for k, ends in pairs(c.lease_ends) do
                if ends < now then
                    forget_lease(c, k)
                end
            end
        end
        c.nleases = c.nleases + 1
    end
    c.leases[key], c.lease_ends[key] = lease_ms, now + lease_ms
end

-- A unique id for one request of this client (latch keys): the engine's
-- release_request_id (hl_release_request_id, as the C drivers), the form
-- for which it keeps one unlock latch per owner instead of a key per request. seq is the one
-- counter of this client's acquires and releases in this worker (the
-- acquire latch's seq too): the engine's scripts refuse a late copy of a
-- release older than the owner's last grant or release.
-- The worker's pid is part of the epoch: a client made before nginx forked
-- its workers has the same id in all of them.
local function latch_epoch(c)
    return worker_pid() * TID_SPAN + c.latch_epoch % TID_SPAN
end

local function request_id(c)
    c.seq = c.seq + 1
    return proto.release_request_id(c.uuid, worker_pid(), c.latch_epoch, c.seq)
end

-- A command of this client whose reply was lost may still reach the
-- server: later calls use other latch keys, so they cannot overwrite the
-- answer that late copy must find.
local function latch_move_on(c)
    c.latch_epoch = c.latch_epoch + 1
end

-- Send a waiting machine's try (bytes) and feed it the reply; when the
-- machine asks for it again (NOSCRIPT: the script body), send that too.
-- Returns exec's r, err, unknown, lost (lost of either send); after a lost
-- or unknown reply later calls use other latch keys (a copy may still come).
local function send_try(c, slot, m, bytes, st, resend)
    local r, err, unknown, lost = exec(c, slot, bytes, st, resend)
    if r then
        local again = m:on_reply(r)
        if again then
            local lost2
            r, err, unknown, lost2 = exec(c, slot, again, st, resend)
            lost = lost or lost2
            if r then
                m:on_reply(r)
            end
        end
    end
    if lost or unknown then
        latch_move_on(c)
    end
    return r, err, unknown, lost
end

-- Drive a settle machine (x.s) on the connection whose reply never came.
-- When that connection dies the machine may go on on a new one to the same
-- node (paused first: nothing to read meanwhile). Its reads go in slices:
-- the owner's next acquire may take the settle over (x.dropped: the
-- machine is theirs now) and it then stops at once.
local function settle(c, node, sock, rd, x)
    local s = x.s
    while not x.dropped do
        local act, a1, a2 = s:next()
        if act == "wait" then
            if a2 or not sock then -- a pause: the connection is dead
                if sock then
                    sock:close()
                    sock = nil
                end
                ngx_sleep(a1 / 1000)
            else
                local deadline, r, err = now_ms() + a1, nil, nil
                repeat
                    local left = deadline - now_ms()
                    sock:settimeout(left > CANCEL_POLL_MS and CANCEL_POLL_MS or left > 0 and left or 1)
                    r, err = read_reply(sock, rd)
                until r or err ~= "connection: timeout" or x.dropped or now_ms() >= deadline
                if x.dropped then
                    break
                elseif r then
                    s:on_reply(r)
                else
                    s:on_error()
                end
            end
        elseif act == "send" then
            if a2 or not sock then
                if sock then
                    sock:close()
                end
                sock, rd = connect(c, node), proto.reader()
            end
            if x.dropped then
                break
            elseif not sock or not sock:send(a1) then
                s:on_error()
            end
        else
            break
        end
    end
    c.settles[x] = nil
    if not x.dropped then
        s:free()
    end
    if sock then
        sock:close()
    end
end

-- The attempt on st's connection got no reply in time: settle its late
-- outcome there (a light thread, so the caller gets its error now; the
-- request ends once it is done), or close it when there is nothing to settle.
local function settle_later(c, st, s, name, owner)
    local sock, rd, node = st.sock, st.rd, st.node
    st.sock, st.rd, st.node = nil, nil, nil
    if not s then
        sock:close()
        return
    end
    c.st.settles = c.st.settles + 1
    ngx.log(ngx.INFO, "hilock: an acquire attempt's reply timed out; the settler gives back ",
            "a late grant")
    local x = { s = s, name = name, owner = owner, node = node }
    c.settles[x] = true -- while it runs (settle_earlier may take it over)
    local ok = pcall(ngx.thread.spawn, settle, c, node, sock, rd, x)
    if not ok then
        settle(c, node, sock, rd, x) -- no light threads here: settle before returning
    end
end

-- The engine's rule before an acquire attempt goes to the master of slot
-- (hl_settle_gate, as hilock_async and hilock.aio): while earlier attempts
-- there are still being settled, that server (or the way to it) is
-- stalled, and one more attempt would only park one more connection there:
-- wait up to what the rule says for those settles to end, then send, or
-- fail. true, or nil, err.
local function settle_gate(c, slot)
    local node = next(c.settles) and master_node(c, slot)
    if not node then
        return true
    end
    local function settling()
        local n = 0
        for x in pairs(c.settles) do
            n = n + (x.node == node and 1 or 0)
        end
        return n
    end
    local ms = proto.settle_gate(settling(), false, c.command_timeout_ms)
    if ms > 0 then
        local deadline = now_ms() + ms
        repeat
            ngx_sleep(CANCEL_POLL_MS / 1000)
        until proto.settle_gate(settling(), true, 0) < 0 or now_ms() >= deadline
        ms = proto.settle_gate(settling(), true, c.command_timeout_ms)
    end
    if ms < 0 then
        return true
    end
    return nil, str_format("connection: server %s:%d has not answered an earlier attempt yet "
                           .. "(still being settled); no new attempt sent to it", node.host,
                           node.port)
end

-- One run of the acquire machine. Returns true, st (the connection of the
-- granting attempt, for the replica acknowledgement), token (a fenced
-- grant's fencing token, else 0), sent_at (when the granting attempt was
-- sent) or nil, err.
local function acquire_once(self, owner, wait_ms, lease_ms, watched, waits)
    local c = self.client
    local slot = self.slot
    -- one machine per lock, started again by each call (a light thread
    -- acquiring the same lock object meanwhile makes its own)
    local m = self.am
    if m then
        self.am = nil
        m:restart(owner, wait_ms, lease_ms, c.fair_wait_window_ms)
    else
        m = self.p:acquire(owner, wait_ms, lease_ms, c.fair_wait_window_ms)
    end
    local latched = self.latched
    if latched then
        -- every attempt of this call is idempotent: one whose reply was
        -- lost is sent again or settled, never taken twice
        c.seq = c.seq + 1
        m:latch(latch_epoch(c), c.seq, c.latch_ttl_ms)
    end
    -- every kind but the fair lock waits on a channel shared by all waiters
    local shared = self.kind_name ~= "fair"
    local st = {}
    local ps, L, joined, sent_at, last_err, own
    -- this call, for lk:cancel(): cancelled (asked), parked (the shared
    -- listener whose semaphore it waits on now); a try (wait 0) is not one
    local w = { cancelled = false }
    if wait_ms ~= 0 then
        local waits_of = self.waits
        if not waits_of then
            -- weak: a call that raised does not stay cancellable
            waits_of = setmetatable({}, WEAK_KEYS)
            self.waits = waits_of
        end
        waits_of[w] = true
    end
    local told = false
    while true do
        if w.cancelled and not told then
            -- between actions: the engine leaves the fair line and the
            -- subscription and ends "canceled", unless it has its outcome
            told = true
            m:cancel()
        end
        local act, a1, a2, a3 = m:next()
        if act == "send" then
            if watched then -- the watchdog's lease runs from the grant's sending
                sent_at = now_ms()
            end
            local r, err, unknown, lost
            r, err = settle_gate(c, slot)
            if r then
                r, err, unknown, lost = send_try(c, slot, m, a1, st, latched)
            end
            if unknown then
                settle_later(c, st, m:on_unknown(err, request_id(c), c.command_timeout_ms,
                                                 c.unsettled_acq), self.name, owner)
            elseif not r then
                last_err = err -- the machine keeps the code; this says what happened
                st_close(st)
                if lost then
                    m:on_reply_lost(err) -- settled with the latch, else an error
                else
                    m:on_error(err)
                end
            end
        elseif act == "subscribe" then
            st_done(c, st) -- do not sit on a pooled connection while waiting
            if shared then
                L = join_listener(c, a1, slot)
                joined = L ~= nil
                m:on_subscribed(joined)
            else
                -- its own connection, under the session's liveness rule
                own = own or { live = proto.sublive(c.command_timeout_ms), holds = {} }
                ps = subscribe(c, a1, slot, own)
                m:on_subscribed(ps ~= nil)
            end
        elseif act == "wait" then
            if joined and (not L or L.state == "failed" or L.state == "closed") then
                -- our listener gave up (its connection broke and could not
                -- come back): join or start another, then retry at once
                if L then
                    leave_listener(L)
                end
                L = join_listener(c, a1, slot)
                if not L then
                    ngx_sleep(0.05)
                end
            elseif L then
                local woken = false
                if not w.cancelled then
                    w.parked = L
                    woken = L.sem:wait((a2 < 0 and LONG_WAIT_MS or a2) / 1000)
                    w.parked = nil
                end
                if waits then
                    waits[#waits + 1] = woken and 1 or 0
                end
            elseif ps == false then
                -- the subscription ended (connection broke, slot moved,
                -- failover, given up as silent): listen again, then retry
                -- at once (an unlock may have been missed meanwhile)
                ps = subscribe(c, a1, slot, own) or false
                if not ps then
                    ngx_sleep(0.05)
                end
            else
                local woken
                ps, woken = wait_message(c, ps, a2, w)
                if waits then
                    waits[#waits + 1] = woken and 1 or 0
                end
            end
            m:on_wake()
        elseif act == "unsubscribe" then
            if L then
                leave_listener(L)
                L = nil
            end
            if ps then
                unsubscribe(c, ps)
                ps = nil
            end
        else -- "done"
            if ps then -- not reached normally: the machine unsubscribes first
                ps.sock:close()
            end
            if L then
                leave_listener(L)
            end
            if self.waits then
                self.waits[w] = nil
            end
            self.am = m
            if a1 then
                return true, st, a3, sent_at
            end
            c.unsettled_acq:after(m) -- the session keeps an attempt left unsettled
            st_done(c, st)
            -- the failure's own words when the machine ended on it
            if last_err and a2 == last_err:match("^[^:]+") then
                return nil, last_err
            end
            if a2 == "canceled" then
                return nil, str_format("canceled: acquire of lock '%s' cancelled by lk:cancel() "
                                       .. "(nothing held or queued)", self.name)
            end
            return nil, a2
        end
    end
end

-- Drive a one-command machine (m:next/on_reply/on_error) on the lock's
-- master; returns what its "done" says.
local function run(c, slot, m)
    local st = {}
    while true do
        local act, a1, a2 = m:next()
        if act ~= "send" then
            st_done(c, st)
            return a1, a2
        end
        local r, err = exec(c, slot, a1, st)
        if r then
            m:on_reply(r)
        else
            st_close(st)
            m:on_error(err)
        end
    end
end

-- Release owner's hold; again: the request id of an earlier release that
-- got no answer, sent again under it (the session's u:rel_next).
local function release(self, owner, ack, again)
    local c = self.client
    local key = wd_key(self, owner)
    local lease = c.leases[key] or 0
    local rid, sent = again or request_id(c), now_ms()
    local m = self.rm -- one machine per lock, as acquire's
    if m then
        self.rm = nil
        m:restart(owner, lease, c.watchdog_lease_ms, rid, c.command_timeout_ms)
    else
        m = self.p:release(owner, lease, c.watchdog_lease_ms, rid, c.command_timeout_ms)
    end
    if c.lost[key] or c.lost_old[key] then
        m:known_lost() -- a fair unlock's "released" cannot be trusted after a loss
    end
    local h = c.held[key]
    if h then
        h.releasing = h.releasing + 1 -- a check finding it gone is this release's to say
    end
    local st = {}
    local ok, left, still, renew, unconfirmed, failed
    while true do
        local act, a1, a2, a3, a4, a5 = m:next()
        if act == "send" then
            local r, err = exec(c, self.slot, a1, st)
            if r then
                m:on_reply(r)
            else
                st_close(st)
                m:on_error(err)
                failed = true
            end
        else
            ok, left, still, renew, unconfirmed = a1, a2, a3, a4, a5
            break
        end
    end
    self.rm = m
    if failed then
        latch_move_on(c) -- a copy of this unlock may still come
    end
    if ok and ack then
        -- a release stays a release without an acknowledgement; the WAIT
        -- only lets a failover right after it see the lock free
        replica_acked(c, st)
    end
    st_done(c, st)
    if h then
        h.releasing = h.releasing - 1
    end
    if not still then
        c.wd[key] = nil
        hold_drop(c, key)
        forget_lease(c, key)
        if ok then
            hold_end(c, key, self.kind_name, self.name)
        end
    elseif not renew then
        -- the engine's rule (hl_release.renew): a release no try got an
        -- answer to may or may not have run; renewing the hold would keep
        -- the lock for the client's life when it did not. Unrenewed, it
        -- ends at its lease at the latest (and is listened for no more).
        c.wd[key] = nil
        hold_drop(c, key)
    elseif h and h.releasing == 0 and h.after and c.held[key] == h then
        h.after = false
        if c.holds:check(key, now_ms()) then -- found gone meanwhile, and still believed held
            send_checks(c)
        end
    end
    if not ok and unconfirmed then
        local wd_lease = c.watchdog_lease_ms
        local lease = (lease > wd_lease) and lease or wd_lease
        -- the session keeps it (hl_unsettled_rel_put) until its lease has
        -- surely ended: the owner's next acquire sends it again first (one
        -- sent again is kept already)
        if not again then
            c.unsettled_acq:rel_put(self.name, owner, rid, sent + lease, now_ms())
        end
        return nil, str_format("release of '%s' not confirmed (%s); renewal stopped: it ends "
                               .. "at its lease (%d ms) at the latest", self.name,
                               tostring(left), lease)
    end
    if not ok then
        if c.since[key] and left and left:find("^not owner") then
            c.since[key] = nil -- over, not timed (as the blocking client)
        end
        return nil, left
    end
    return true
end

-- The owner's releases of this lock that got no answer, each sent again
-- under its own id, oldest first, as the session says (u:rel_next,
-- hl_unsettled_rel_next), before its next acquire or release: sent after a
-- later release, they would find its higher seq in the owner's unlock
-- latch and be refused as late copies, leaving a hold. Not owner = they
-- ran, or the hold expired. Returns true; nil, err (one got no answer
-- again: the session keeps them all); or false, refused_until (they could
-- not all be kept).
local function send_unanswered(self, owner)
    local u = self.client.unsettled_acq
    while true do
        local rid, refused = u:rel_next(self.name, owner, now_ms())
        if not rid then
            return refused <= 0 or false, refused
        end
        local ok, err = release(self, owner, false, rid)
        local ran = nil -- no usable answer
        if ok or (type(err) == "string" and err:find("^not owner")) then
            ran = ok and true or false
        end
        u:rel_end(self.name, owner, rid, ran, now_ms())
        if ran == nil then
            return nil, err
        end
    end
end

-- The session's rule before owner's acquire (u:before): an earlier attempt
-- of theirs on this lock that may have been granted and was never settled
-- is settled first; when that fails too, or one is being settled, the
-- acquire fails instead of entering. Returns true, or nil, err.
local function settle_earlier(self, owner)
    local c = self.client
    local u = c.unsettled_acq
    while true do
        local m = u:before(self.p, owner, c.fair_wait_window_ms)
        if not m then
            return true
        end
        local settled = false
        if m == true then
            -- a settle of theirs runs: one that has sent no undo yet is
            -- taken over, as hilock_async does (hl_settle_can_hand_over):
            -- dropped (its record kept), then asked again, which hands out
            -- a machine that settles the attempt here
            for x in pairs(c.settles) do
                if x.name == self.name and x.owner == owner and x.s:can_hand_over() then
                    x.dropped, c.settles[x], settled = true, nil, true
                    x.s:free()
                end
            end
        else
            local st = {}
            while true do
                local act, a1 = m:next()
                if act ~= "send" then
                    break
                end
                local r, err = send_try(c, self.slot, m, a1, st)
                if not r then
                    st_close(st)
                    m:on_error(err)
                end
            end
            st_done(c, st)
            settled = u:settled(m)
        end
        if not settled then
            return nil, str_format("connection: an earlier acquire attempt of this owner on "
                                   .. "lock '%s' is not settled yet; not entered", self.name)
        end
    end
end

-- Acquire; returns the grant's fencing token (fenced lock; 0 for other
-- kinds) or nil, err.
local function acquire_run(self, wait, lease, waits)
    local wait_ms = seconds(wait, -1, true, "wait")
    local lease_ms = seconds(lease, nil, false, "lease")
    local c = self.client
    local watchdog = lease_ms == nil
    if watchdog then
        lease_ms = c.watchdog_lease_ms
    end
    local owner = owner_of(self)
    -- this owner's releases that got no answer (their holds may still be
    -- there) go first, rather than re-entering; any failure there is this
    -- acquire's, nothing acquired (and the session keeps them)
    local sent, why = send_unanswered(self, owner)
    if sent == false then
        return nil, str_format("connection: releases of lock '%s' got no answer and not all "
                               .. "could be kept to be sent again; not entered until their "
                               .. "lease ends (in %d ms)", self.name, math.max(0, why - now_ms()))
    elseif not sent then
        return nil, why
    end
    if c.unsettled_acq:count() > 0 then
        local ok, err = settle_earlier(self, owner)
        if not ok then
            return nil, err
        end
    end
    local deadline = wait_ms > 0 and now_ms() + wait_ms or nil
    local token, sent_at
    while true do
        local left = wait_ms
        if deadline then
            left = deadline - now_ms()
            if left < 1 then
                left = 1
            end
        end
        local ok, st, tok, sent = acquire_once(self, owner, left, lease_ms, watchdog, waits)
        if not ok then
            return nil, st
        end
        token, sent_at = tok, sent
        remember_lease(c, wd_key(self, owner), watchdog and 0 or lease_ms)
        local acked = not c.replica_ack or replica_acked(c, st)
        st_done(c, st)
        if acked then
            break
        end
        -- nobody replicated the grant, so a failover now would forget it:
        -- give it back, and try again while the caller may still wait
        c.st.replica_ack_failures = c.st.replica_ack_failures + 1
        release(self, owner, false)
        local pause = proto.ack_retry(wait_ms, deadline or -1)
        if not pause then
            return nil, str_format("not acknowledged: lock '%s' released again: no replica "
                                   .. "acknowledged it within %d ms", self.name, c.replica_ack_ms)
        end
        ngx_sleep(pause / 1000)
        waits[#waits + 1] = 0
    end
    local key = wd_key(self, owner)
    clear_lost(c, key)
    if not c.since[key] then -- a re-entry keeps the first grant's time
        c.since[key] = now_ms()
    end
    -- sent_at: when the grant the server confirmed was sent
    hold_start(c, self, key, owner, watchdog and 0 or lease_ms, sent_at or now_ms())
    if watchdog then
        if not c.wd[key] then
            c.wd[key] = { p = self.p, owner = owner, slot = self.slot, kind = self.kind_name }
        end
        start_watchdog(c)
    end
    return token
end

-- One acquire call counted in the figures f: granted or not, its outcome
-- field, its wait bucket b (false: busy, not a wait).
local function count_acquire(f, granted, field, b)
    if granted then
        f.granted = f.granted + 1
    end
    f[field] = f[field] + 1
    if b then
        f.wait_ms[b] = f.wait_ms[b] + 1
    end
end

-- acquire_run, counted in the client's stats (for the kind and, with
-- stats_names, for the pair): the call's outcome (a wait of 0 that finds
-- the lock held is "busy", not a wait), how a grant came (first try: no
-- wait; else the last wait: ended by a message "woken", by its time
-- "retried") and how long the call took.
local function acquire(self, wait, lease)
    local t0, waits = now_ms(), {}
    local token, err = acquire_run(self, wait, lease, waits)
    local c = self.client
    local k = c.st.kinds[self.kind_name]
    if not k then
        return token, err
    end
    local field
    if token then
        field = #waits == 0 and "granted_first_try"
            or waits[#waits] == 1 and "granted_woken" or "granted_retried"
    elseif type(err) == "string" and err:find("^timeout") then
        field = wait == 0 and "busy" or "timed_out"
    elseif type(err) == "string" and err:find("^canceled") then
        field = "cancelled"
    else
        return token, err -- an error: its message says it, no wait to count
    end
    local b = field ~= "busy" and stats_bucket(now_ms() - t0)
    count_acquire(k, token, field, b)
    local n = name_slot(c, self.kind_name, self.name)
    if n then
        count_acquire(n, token, field, b)
    end
    return token, err
end

-- client:stats() -> a table of the client's counters (a copy), of the shape
-- of the hilock module's client:stats() and Python's client.stats():
-- {version, kinds = {reentrant = {granted, timed_out, cancelled, busy,
-- granted_first_try, granted_woken, granted_retried, wait_ms = {24},
-- hold_ms = {24}, lost_gone, lost_expired, lost_in_doubt}, fair, read,
-- write, fenced}, renewals, renewal_commands, renewal_failures, settles,
-- reconnects, redirects, replica_ack_failures}. Per worker: each worker's
-- client counts its own. docs/observability.md says what each means.
-- client:stats{by_name = true} (a client made with stats_names > 0) adds
-- names = {{kind = , name = , <figures>}, ...} for each tracked (kind, name)
-- pair in the order first counted, then {kind = , other = true, <figures>}
-- for each kind whose other entry counted something.
function Client:stats(opts)
    local by_name = false
    if opts ~= nil then
        if type(opts) ~= "table" then
            argerr("opts", "expected a table")
        end
        by_name = opts.by_name and true or false
        if by_name and self.stats_names == 0 then
            argerr("opts", "by_name needs a client made with stats_names > 0")
        end
    end
    local out = copy_stats(self.st)
    if by_name then
        local names = {}
        for i, e in ipairs(self.st_order) do
            local f = copy_stats(e[3])
            f.kind, f.name = e[1], e[2]
            names[i] = f
        end
        for _, kind in ipairs(STATS_KINDS) do
            local o = self.st_other[kind]
            if o then
                local f = copy_stats(o)
                f.kind, f.other = kind, true
                names[#names + 1] = f
            end
        end
        out.names = names
    end
    return out
end

-- lk:acquire([wait [, lease]]) -> true | nil, err
-- wait: seconds, nil = forever, 0 = one try. lease: seconds, nil = watchdog.
-- With replica acknowledgement (default on cluster and sentinel clients) a
-- grant no replica acknowledged is given back and tried again within wait.
function Lock:acquire(wait, lease)
    local token, err = acquire(self, wait, lease)
    if not token then
        return nil, err
    end
    return true
end

-- lk:acquire_token([wait [, lease]]) -> token | nil, err: acquire (or
-- re-enter) like acquire; a fenced lock answers the grant's fencing token
-- (every grant takes the next value of the name's counter), other kinds 0.
function Lock:acquire_token(wait, lease)
    return acquire(self, wait, lease)
end

-- lk:cancel() -> true when an acquire of this lock object was waiting
-- (wait ~= 0), else false. From another light thread or request of the
-- worker: each such acquire returns nil, "canceled: ..." soon (a wait on
-- the shared listener at once, a fair waiter's within CANCEL_POLL_MS),
-- having left the fair queue and its subscription, holding nothing; one
-- whose grant had already come returns true (the caller holds the lock),
-- as hilock_lock_cancel. An acquire that starts later is not cancelled.
function Lock:cancel()
    local any = false
    local waits_of = self.waits
    if waits_of then
        for w in pairs(waits_of) do
            if not w.cancelled then
                w.cancelled, any = true, true
                local L = w.parked
                if L then
                    -- the semaphore is the listener's, shared: wake its
                    -- waiters (the others try once more and wait again)
                    wake_all(L)
                end
            end
        end
    end
    return any
end

-- lk:release() -> true | nil, err ("not owner" when not held)
function Lock:release()
    local c, owner = self.client, owner_of(self)
    local sent, err = send_unanswered(self, owner) -- a refusal: what was not kept cannot go
    if sent == nil then
        -- not sent: kept by the session after the earlier one, sent before
        -- the owner's next acquire (its hold is renewed no more already)
        local lease = math.max(c.leases[wd_key(self, owner)] or 0, c.watchdog_lease_ms)
        c.unsettled_acq:rel_put(self.name, owner, request_id(c), now_ms() + lease, now_ms())
        return nil, str_format("release of '%s' not sent: an earlier release of this owner got "
                               .. "no answer again (%s); sent after it, before the next acquire; "
                               .. "renewal stopped: it ends at its lease (%d ms) at the latest",
                               self.name, tostring(err), lease)
    end
    return release(self, owner, c.replica_ack)
end

-- lk:extend(seconds) -> true | nil, err: add seconds to the remaining lease
-- of this owner's hold, atomically on the server (as the C API's
-- hilock_lock_extend and Python's Lock.extend). Meant for a fixed lease; under
-- the watchdog the next renewal sets the watchdog lease again. "not owner"
-- when this owner holds none; "invalid argument" for a key without expiry
-- or a read-write side. A bad time raises, as acquire's.
function Lock:extend(lease)
    if lease == nil then
        argerr("lease", "expected a positive number of seconds")
    end
    local ms = seconds(lease, nil, false, "lease")
    if self.kind_name == "read" or self.kind_name == "write" then
        return nil, "invalid argument: extend: not for read-write lock sides"
    end
    local c, owner = self.client, owner_of(self)
    local r, err = call(c, self.p:extend_cmd(owner, ms), self.slot)
    local v, derr
    if r then
        v, derr = proto.decode_extend(r)
        if v == "send_body" then -- the server forgot the script: its body, now
            r, err = call(c, self.p:extend_cmd(owner, ms, true), self.slot)
            v, derr = r and proto.decode_extend(r)
        end
    end
    if not r then
        return nil, err
    end
    if type(v) ~= "number" then
        return nil, derr or "protocol: unexpected answer to extend"
    end
    if v == 0 then
        return nil, str_format("not owner: lock '%s' is not held by %s", self.name, owner)
    end
    if v < 0 then
        return nil, str_format("invalid argument: lock '%s' has no expiry to extend", self.name)
    end
    return true
end

-- lk:force_unlock() -> deleted (boolean) | nil, err
function Lock:force_unlock()
    local c = self.client
    local deleted, err = run(c, self.slot, self.p:force())
    if deleted == nil then
        return nil, err
    end
    -- every holder listens on the lock's channel, where the force unlock
    -- published: it checks its hold and reports it lost at once
    return deleted
end

local function query_int(self, bytes, decode)
    local r, err = call(self.client, bytes, self.slot)
    if not r then
        return nil, err
    end
    return (decode or proto.decode_int)(r)
end

-- Is it locked (by anyone)? A read-write side: is the lock in that
-- side's mode (held by readers / by a writer).
function Lock:locked()
    local p = self.p
    return query_int(self, p:locked_cmd(), function(r) return p:decode_locked(r) end)
end

-- lk:token() -> the latest fencing token issued for the name (0: none yet)
-- | nil, err. While this owner holds a fenced lock: its latest grant's.
function Lock:token()
    return query_int(self, self.p:token_cmd(), proto.decode_token)
end

function Lock:held()
    local n, err = query_int(self, self.p:hexists_cmd(owner_of(self)))
    if not n then
        return nil, err
    end
    return n == 1
end

function Lock:hold_count()
    return query_int(self, self.p:hget_cmd(owner_of(self)), proto.decode_hold_count)
end

-- Remaining lease in seconds; -2 no lock, -1 no expiry.
function Lock:ttl()
    local ms, err = query_int(self, self.p:pttl_cmd())
    if not ms then
        return nil, err
    end
    return ms < 0 and ms or ms / 1000
end

-- true, why once the watchdog found this owner's hold gone (why "gone") or
-- got no renewal confirmed for lease - lease/5 (why "in doubt: ..."; stop
-- using what the lock guards: another client may hold it once the lease
-- ends on the server). false otherwise; reset by the next acquire. Asked
-- while the worker's timers could not run (this request kept it busy), it
-- also says "in doubt" once the lease may have ended since the last
-- confirmed renewal (the hold table's rule, holds:is_lost).
function Lock:lost()
    local c, key = self.client, wd_key(self, owner_of(self))
    local why = c.lost[key] or c.lost_old[key]
    if why then
        return true, why
    end
    -- asked while the worker's timers are held up (this request kept the
    -- worker busy): the doubt timer may be overdue; the table's rule says
    local now = now_ms()
    if c.wd[key] and c.holds:is_lost(key, now) then
        mark_lost(c, key, str_format("in doubt: no renewal confirmed by the server for %d ms",
                                     now - c.holds:state(key)))
        return true, c.lost[key]
    end
    return false
end

function Lock:thread_id()
    return self.tid or request_tid()
end

function Lock:kind()
    return self.p:kind()
end

-- ---------------------------------------------------------------- semaphores

-- Redisson's RSemaphore, RPermitExpirableSemaphore and RCountDownLatch, in
-- their layouts (docs/protocol.md): client:semaphore(name),
-- client:permit_semaphore(name), client:latch(name). The commands, replies
-- and the wait (try, subscribe, try, sleep until a message or the nearest
-- permit lease end) are the engine's (proto.sem and its wait machine); a
-- waiting request sleeps on the worker's shared listener of the object's
-- channel, and a message wakes as many as the engine says (a release of k
-- permits: k; the latch at zero: all).
local Sem = {}
Sem.__index = Sem

local function new_sem(self, name, kind)
    check_name_arg(name)
    local p = proto.sem(name, kind, self.mode == "cluster")
    return setmetatable({ client = self, name = name, p = p, slot = p:slot(), kind_name = kind },
                        Sem)
end

-- client:semaphore(name) / client:permit_semaphore(name) / client:latch(name)
for method, kind in pairs({ semaphore = "semaphore", permit_semaphore = "permit",
                           latch = "latch" }) do
    Client[method] = function(self, name)
        return new_sem(self, name, kind)
    end
end

local function need(self, what, ...)
    for i = 1, select("#", ...) do
        if self.kind_name == select(i, ...) then
            return
        end
    end
    error(what .. ": not for a " .. self.kind_name, 3)
end

-- One operation of the engine (p:op(verb, ...), NOSCRIPT handled there) on
-- the object's master: its number | nil, err.
local function sem_op(self, verb, arg)
    local m, err = self.p:op(verb, arg)
    if not m then
        return nil, err
    end
    return run(self.client, self.slot, m)
end

-- Drive the engine's wait machine m; returns what its "done" says.
-- resend: a try whose pooled connection turns out dead may be sent once
-- more (a latched semaphore try or a permit-expirable one: the copy takes
-- nothing twice). A try that went out and got no reply (its connection
-- died, or the reply timed out) is the machine's to settle
-- (m:on_reply_lost: its next sends give back what it may have taken).
local function sem_wait(self, m, err, resend)
    if not m then
        return nil, err
    end
    local c, slot = self.client, self.slot
    local st, L, joined = {}, nil, false
    while true do
        local act, a1, a2 = m:next()
        if act == "send" then
            local r, rerr, unknown, lost = send_try(c, slot, m, a1, st, resend)
            if not r then
                st_close(st) -- a timed-out reply is never read: its connection goes
                if lost or unknown then
                    m:on_reply_lost(rerr)
                else
                    m:on_error(rerr)
                end
            end
        elseif act == "subscribe" then
            st_done(c, st) -- do not sit on a pooled connection while waiting
            L = join_listener(c, a1, slot, self.p)
            joined = L ~= nil
            m:on_subscribed(joined)
        elseif act == "wait" then
            local ms = a2 < 0 and LONG_WAIT_MS or a2
            if joined and (not L or L.state == "failed" or L.state == "closed") then
                if L then
                    leave_listener(L)
                end
                L = join_listener(c, a1, slot, self.p)
                if not L then
                    ngx_sleep(0.05)
                end
            elseif L then
                L.sem:wait(ms / 1000)
            else
                ngx_sleep(ms / 1000)
            end
            m:on_wake()
        elseif act == "unsubscribe" then
            if L then
                leave_listener(L)
                L = nil
            end
        else
            if L then
                leave_listener(L)
            end
            m:free()
            st_done(c, st)
            return a1, a2
        end
    end
end

-- s:try_set_permits(n) (semaphores) / s:try_set_count(n) (latch) -> true
-- (set) | false (a count was there already) | nil, err
local function try_set(self, n)
    local v, err = sem_op(self, "try_set", n)
    if v == nil then
        return nil, err
    end
    return v == 1
end

function Sem:try_set_permits(n)
    need(self, "try_set_permits", "semaphore", "permit")
    return try_set(self, n)
end

function Sem:try_set_count(n)
    need(self, "try_set_count", "latch")
    return try_set(self, n)
end

-- Semaphore: s:acquire([permits [, wait]]) -> true | nil, err ("timeout").
-- Permit-expirable: s:acquire([wait [, lease]]) -> permit id | nil, err.
-- wait: seconds, nil = forever, 0 = one try; lease: seconds, nil = until
-- released.
function Sem:acquire(a, b)
    need(self, "acquire", "semaphore", "permit")
    if self.kind_name == "permit" then
        local lease_ms = seconds(b, 0, false, "lease") -- nil: until released
        local ok, id = sem_wait(self, self.p:wait(1, seconds(a, -1, true, "wait"), lease_ms),
                                nil, true)
        if not ok then
            return nil, id
        end
        return id
    end
    -- the owner's request latch: a try sent again takes nothing twice, and
    -- one whose reply was lost is settled before the call fails
    local c = self.client
    c.seq = c.seq + 1
    local m, err = self.p:wait(a or 1, seconds(b, -1, true, "wait"), nil,
                               str_format("%s:%d", c.uuid, request_tid()), latch_epoch(c),
                               c.seq, c.latch_ttl_ms)
    return sem_wait(self, m, err, true)
end

-- Latch: l:await([wait]) -> true once the count is zero | nil, err ("timeout")
function Sem:await(wait)
    need(self, "await", "latch")
    return sem_wait(self, self.p:wait(1, seconds(wait, -1, true, "wait")))
end

-- Semaphore: s:release([permits]) -> true | nil, err. Permit-expirable:
-- s:release(id) -> true | nil, "not owner: ..." (not taken, or its lease
-- had ended).
function Sem:release(x)
    need(self, "release", "semaphore", "permit")
    if self.kind_name == "permit" then
        local v, err = sem_op(self, "permit_release", x)
        if v == nil then
            return nil, err
        end
        if v ~= 1 then
            return nil, v == 0 and "not owner: the permit is not taken (released before?)"
                or "not owner: the permit's lease had ended (given back now)"
        end
        return true
    end
    local v, err = sem_op(self, "release", x or 1)
    if v == nil then
        return nil, err
    end
    return true
end

-- s:available() -> free permits; l:count() -> the latch's count
function Sem:available()
    need(self, "available", "semaphore", "permit")
    return sem_op(self, "count")
end

function Sem:count()
    need(self, "count", "latch")
    return sem_op(self, "count")
end

-- s:drain() -> the permits taken (all free ones)
function Sem:drain()
    need(self, "drain", "semaphore")
    return sem_op(self, "drain")
end

-- s:add_permits(delta) (may be negative) / s:set_permits(n) -> true | nil, err
function Sem:add_permits(delta)
    need(self, "add_permits", "semaphore", "permit")
    local v, err = sem_op(self, "add", delta)
    if v == nil then
        return nil, err
    end
    return true
end

function Sem:set_permits(n)
    need(self, "set_permits", "semaphore")
    local v, err = sem_op(self, "set", n)
    if v == nil then
        return nil, err
    end
    return true
end

-- l:count_down() -> the count left | nil, err
function Sem:count_down()
    need(self, "count_down", "latch")
    return sem_op(self, "count_down")
end

-- s:delete() -> deleted (boolean) | nil, err; waiters are woken (and find
-- no permits / the latch open)
function Sem:delete()
    local v, err = sem_op(self, "delete")
    if v == nil then
        return nil, err
    end
    return v == 1
end

function Sem:kind()
    return self.kind_name
end

return _M
