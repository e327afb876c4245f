#!lua name=chit
-- chit's Redis library: every transition of a job is one function, run
-- atomically by the server (FCALL). KEYS[1] is the prefix ("{chit}"), whose
-- hash tag puts every key chit writes in one slot; ARGV[1] is the time in
-- milliseconds, "" for the server's TIME (tests pass one).
--
-- Keys (P is the prefix):
--   P:j:<id>     a job's hash (a missing field is None): id, kind, queue,
--                priority, payload, state, attempts, max_attempts, run_at,
--                created_at, updated_at, tenant, g (its group), idem, rhash,
--                ckey, timeout, unique, tp (traceparent), deb, deb_until,
--                expires_at, wf, ref, run_on, depends_on and dependents (JSON
--                ids), deps_pending, error, lease_token, lease_expires_at,
--                worker, pdone, ptotal, pmsg, checkpoint, result, result_ext, cancel,
--                started_at, finished_at, hand_backs, rm (its member of P:r),
--                aat (the running attempt's start: its record, open, is the
--                job's attempts, worker and aat until it closes), cost (the
--                job's, when not 1), acost (the attempt's, under a budget), oseq and
--                obytes (its output, output.lua), lsn (an event stream follows it)
--   P:r:<queue>  ready jobs: score priority, member run_at (13 digits) .. id,
--                so equal priorities sort by due time, then id
--   P:gr:<queue> NUL <group>  the same, for one group (kind NUL tenant NUL
--                concurrency key: the job's field g), for flow claims
--   P:qg:<queue> group -> its queued jobs (due or not); P:queues every queue
--   P:rk:<kind>, P:rkk:<kind> NUL <key>  running jobs by lease expiry
--   P:sk:<kind>, P:skk:<kind> NUL <key>  starts (lease tokens) by time, the
--                last hour's, of kinds with a rate limit: what rates count
--   P:ck:<kind>, P:ckk:<kind> NUL <key>  the same, of kinds with a cost_rate,
--                each start as token NUL cost (the job's `cost`, then what
--                report_cost says; the job's acost holds it): what budgets sum
--   P:limits     kind -> JSON {code, operator, updated_at}; P:pauses
--                ("queue"|"kind") NUL name -> paused_at; P:lock:<kind> a flow
--                claim's short lock of a limited kind
--   P:s:<queue>  scheduled jobs (run_at in the future): score run_at, member id;
--                a claim moves those due to P:r
--   P:w:<queue>  wake tokens: enqueue pushes, idle workers BLPOP (or BLMOVE to
--                P:wk:<worker>, which the claim that follows pops: ClaimsOnWake)
--   P:leases     running jobs by lease expiry
--   P:exp        jobs not started yet that have an expires_at, by it
--   P:done       cancelled jobs by finished_at (prune; the succeeded and failed
--                are P:fin's); P:failed the failed ones, before version 11
--                (P:fin:failed since), drained by prune
--   P:idem, P:uniq, P:deb   (tenant NUL key) -> the job holding the key
--   P:uk:<tenant> NUL <key>  every stored job with that unique key, by id
--                (score 0): replay's `unique_free` reads the newer ones
--   P:layout     the library version whose layout the prefix's keys have
--                (chit_upgrade_layout brings older ones up)
--   P:res:<id>   a large result; P:att:<id> attempt records (JSON, in order;
--                the open one is in the job hash, see aat);
--   P:st:<id>    steps: name -> "attempt|created_at|result"
--   P:tok        the lease token counter
--   P:d:<queue>  its ready jobs by due time; P:run:<queue> its running jobs
--   P:wf:<id>    a workflow's job ids
--   P:o:<id>     output (output.lua); P:out the channel its writes publish on
--   P:sig:<id>   a job's signals: name -> JSON data ("" marks a wait for that
--                name that ended by its timeout); a waiting job's hash holds
--                wsig (the signal's name), wjobs (JSON ids) and wuntil (its
--                deadline), a job others wait for `waiters` (JSON ids)
--   P:wu         waiting jobs with a deadline, by it
--
-- The library is this file (the helpers every part uses), then the other
-- parts in connection.PARTS' order, loaded as one chunk: each part uses the
-- helpers of those before it.

local VERSION = 27
local WAKE_TOKENS = 16
local SCAN = 200  -- entries a read of a long index takes at most at a time
-- Jobs one call of a sweep (due jobs made ready, leases rescued, expiries)
-- moves at most: a backlog is taken over several calls, none of them long.
local SWEEP = 1000

local function clock(arg)
  if arg ~= nil and arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function jkey(P, id) return P .. ':j:' .. id end

-- A ready entry: the due time in 13 characters that sort as the times do,
-- then the id. Before 1970 (a test's clock) '-' and 10^12 plus the time:
-- '%013d' would put -5 before -10. Times outside what 13 characters hold
-- (before April 1938, from November 2286: neither is a run_at chit accepts)
-- are taken as the nearest that fits; the job's hash keeps its own.
local EARLIEST, LATEST = -999999999999, 9999999999999
local function member(run_at, id)
  run_at = math.min(math.max(run_at, EARLIEST), LATEST)
  if run_at < 0 then return string.format('-%012d', 1000000000000 + run_at) .. id end
  return string.format('%013d', run_at) .. id
end

local function member_time(m)
  local t = tonumber(string.sub(m, 1, 13))
  if t < 0 then return -t - 1000000000000 end
  return t
end

local function nonempty(v) if v == '' then return nil end return v end

-- Index writes gathered over the jobs of one call (a claim, a batch of
-- outcomes), then sent as one command a key: ZADD key s1 m1 s2 m2 ..., one
-- HINCRBY a count. Only for keys nothing reads before the call's `flush`;
-- `B` nil writes at once. A key's writes keep their order: a write of another
-- command to a key sends what it holds first.
local function batch() return {ops = {}, keys = {}, limits = {}} end

local CHUNK = 2000  -- arguments a command at most (Lua's stack holds 8000)

local function send(key, op)
  if op.name == 'HINCRBY' then
    -- A count that reaches 0 goes, as one written a job at a time does.
    for field, n in pairs(op.counts) do
      if n ~= 0 and redis.call('HINCRBY', key, field, n) <= 0 and n < 0 then
        redis.call('HDEL', key, field)
      end
    end
    return
  elseif op.name == 'HINCRBYFLOAT' then
    for field, n in pairs(op.counts) do redis.call('HINCRBYFLOAT', key, field, n) end
    return
  end
  local a = op.args
  for i = 1, #a, CHUNK do
    redis.call(op.name, key, unpack(a, i, math.min(i + CHUNK - 1, #a)))
  end
end

local function write(B, name, key, a, b)
  if not B then
    if name == 'HINCRBY' then
      if redis.call('HINCRBY', key, a, b) <= 0 and b < 0 then redis.call('HDEL', key, a) end
    elseif b == nil then redis.call(name, key, a)
    else redis.call(name, key, a, b) end
    return
  end
  local op = B.ops[key]
  if op and op.name ~= name then
    send(key, op)
    op = nil
  end
  if not op then
    op = {name = name, args = {}, counts = {}}
    B.ops[key] = op
    B.keys[#B.keys + 1] = key
  end
  if name == 'HINCRBY' or name == 'HINCRBYFLOAT' then
    op.counts[a] = (op.counts[a] or 0) + b
  else
    op.args[#op.args + 1] = a
    if b ~= nil then op.args[#op.args + 1] = b end
  end
end

local function flush(B)
  for _, key in ipairs(B.keys) do
    local op = B.ops[key]
    if op then send(key, op) end
    B.ops[key] = nil
  end
  B.keys = {}
end

-- A job's state changed (`from` nil: stored; `to` nil: deleted): the indexes
-- reports read, P:bs:<state> (ids by state) and P:cnt (state NUL kind NUL
-- tenant -> jobs), moved with it. `kind` and `tenant`, when the caller has
-- read them, spare reading them again; such a caller (a claim, an outcome)
-- tells a job's event streams itself. Any other change (a cancel, a rescue,
-- a signal, a dependency ending) is published here to a job with output or
-- an event stream following it, in the same read.
local function moved(P, id, from, to, kind, tenant, B)
  if kind == nil then
    local f = redis.call('HMGET', jkey(P, id), 'kind', 'tenant', 'oseq', 'lsn')
    kind, tenant = f[1], f[2]
    if to and (f[3] or f[4]) then redis.call('PUBLISH', P .. ':out', id) end
  end
  local tail = '\0' .. kind .. '\0' .. tenant
  if from then
    write(B, 'HINCRBY', P .. ':cnt', from .. tail, -1)
    write(B, 'ZREM', P .. ':bs:' .. from, id)
  end
  if to then
    write(B, 'HINCRBY', P .. ':cnt', to .. tail, 1)
    write(B, 'ZADD', P .. ':bs:' .. to, 0, id)
  end
end

-- Queue placement

local function wake(P, queue)
  local w = P .. ':w:' .. queue
  if redis.call('LLEN', w) < WAKE_TOKENS then redis.call('RPUSH', w, '1') end
end

local function gkey(P, queue, g) return P .. ':gr:' .. queue .. '\0' .. g end

-- Put a queued job in the ready sets (`m`: its member, the job hash's rm)
-- or, when not due, the scheduled set; `g`: its group, when the caller has it.
local function placed(P, id, queue, priority, run_at, now, m, g)
  if m then
    redis.call('ZADD', P .. ':r:' .. queue, priority, m)
    redis.call('ZADD', gkey(P, queue, g or redis.call('HGET', jkey(P, id), 'g')), priority, m)
    redis.call('ZADD', P .. ':d:' .. queue, run_at, id)
    wake(P, queue)
  else
    redis.call('ZADD', P .. ':s:' .. queue, run_at, id)
  end
end

-- Put a queued job where claims find it: ready when due, else scheduled.
local function place(P, id, queue, priority, run_at, now)
  local m = nil
  if run_at <= now then
    m = member(run_at, id)
    redis.call('HSET', jkey(P, id), 'rm', m)
  end
  placed(P, id, queue, priority, run_at, now, m)
end

local function unplace(P, id, queue, rm)
  local k = jkey(P, id)
  if rm then
    redis.call('ZREM', P .. ':r:' .. queue, rm)
    redis.call('ZREM', gkey(P, queue, redis.call('HGET', k, 'g')), rm)
  end
  redis.call('ZREM', P .. ':s:' .. queue, id)
  redis.call('ZREM', P .. ':d:' .. queue, id)
  redis.call('HDEL', k, 'rm')
end

-- A job becomes queued, or stops being: its group's count.
local function queued_in(P, id, queue, g)
  redis.call('HINCRBY', P .. ':qg:' .. queue, g or redis.call('HGET', jkey(P, id), 'g'), 1)
end

local function queued_out(P, id, queue, g, B)
  write(B, 'HINCRBY', P .. ':qg:' .. queue, g or redis.call('HGET', jkey(P, id), 'g'), -1)
end

local function held_by(P, index, tenant, key, id)
  if key then
    local k = tenant .. '\0' .. key
    if redis.call('HGET', P .. index, k) == id then redis.call('HDEL', P .. index, k) end
  end
end

-- Waits (waits.lua): a waiting job queued, due at its run_at.
local function resume(P, id, now)
  local k = jkey(P, id)
  local f = redis.call('HMGET', k, 'queue', 'priority', 'run_at')
  redis.call('HSET', k, 'state', 'queued', 'updated_at', now)
  redis.call('ZREM', P .. ':wu', id)
  moved(P, id, 'waiting', 'queued')
  queued_in(P, id, f[1])
  place(P, id, f[1], tonumber(f[2]), tonumber(f[3]), now)
end

local TERMINAL = {succeeded = true, failed = true, cancelled = true}

-- Whether every job of `ids` has ended (an unknown one, pruned, has).
local function all_ended(P, ids)
  for _, x in ipairs(ids) do
    local s = redis.call('HGET', jkey(P, x), 'state')
    if s and not TERMINAL[s] then return false end
  end
  return true
end

-- A job others wait for ended: each waiter whose jobs have all ended is queued.
-- `w`: its waiters field, as the caller read it.
local function wake_waiters_of(P, id, now, w)
  if not w then return end
  for _, x in ipairs(cjson.decode(w)) do
    local f = redis.call('HMGET', jkey(P, x), 'state', 'wjobs')
    if f[1] == 'waiting' and f[2] and all_ended(P, cjson.decode(f[2])) then resume(P, x, now) end
  end
end

-- A job that just became terminal: its indexes. `f`: its tenant, unique and
-- debounce keys and waiters, when the caller has read them; `ran`: it was
-- running, so its start took it out of P:exp already.
local function ended(P, id, state, now, f, ran, B)
  f = f or redis.call('HMGET', jkey(P, id), 'tenant', 'unique', 'deb', 'waiters')
  wake_waiters_of(P, id, now, f[4])
  held_by(P, ':uniq', f[1], f[2], id)
  held_by(P, ':deb', f[1], f[3], id)
  if not ran then redis.call('ZREM', P .. ':exp', id) end
  -- P:fin:<state> holds the succeeded and failed jobs by finish: prune reads
  -- it with P:done, which holds the rest.
  if state == 'failed' or state == 'succeeded' then
    write(B, 'ZADD', P .. ':fin:' .. state, now, id)
    write(B, 'ZADD', P .. ':fin:' .. state .. '\0' .. f[1], now, id)
  else
    write(B, 'ZADD', P .. ':done', now, id)
  end
end

-- Attempt records

-- A record's entry in its P:dur set: its start too, as hand-backs, snoozes
-- and replays repeat an attempt's number (library 24 and before left it
-- out, and one record of a number took the place of another).
local function dur_member(id, rec)
  return id .. ':' .. rec.attempt .. ':' .. string.format('%d', rec.started_at)
end

-- Durations by kind, outcome and tenant, for attempt_stats' histograms.
local function timed(P, id, rec, tenant, B)
  local g = rec.kind .. '\0' .. rec.outcome .. '\0' .. (tenant or redis.call('HGET', jkey(P, id), 'tenant') or '')
  local seconds = (rec.finished_at - rec.started_at) / 1000
  write(B, 'ZADD', P .. ':dur:' .. g, seconds, dur_member(id, rec))
  write(B, 'HINCRBYFLOAT', P .. ':dursum', g, seconds)
end

-- Close the last record in P:att when it is open: one a failure left there
-- (the SQL stores can), or one stored before the open record moved to the
-- job hash (library version 11).
local function close_record(P, id, now, outcome, err, tenant)
  local a = P .. ':att:' .. id
  local last = redis.call('LINDEX', a, -1)
  if not last then return end
  local rec = cjson.decode(last)
  if rec.finished_at then return end
  rec.finished_at = now
  rec.outcome = outcome
  rec.error = err
  redis.call('LSET', a, -1, cjson.encode(rec))
  timed(P, id, rec, tenant)
end

-- Close the open record the job hash holds: `a` is its attempt, worker, aat,
-- kind and ckey. The caller deletes aat.
local function close_open(P, id, now, outcome, err, tenant, a, B)
  local rec = {attempt = tonumber(a[1]), worker = a[2], started_at = tonumber(a[3]), kind = a[4],
    ckey = a[5] or '', finished_at = now, outcome = outcome, error = err}
  redis.call('RPUSH', P .. ':att:' .. id, cjson.encode(rec))
  timed(P, id, rec, tenant, B)
end

-- Close the job's open attempt record, wherever it is.
local function close_attempt(P, id, now, outcome, err, tenant)
  local k = jkey(P, id)
  local a = redis.call('HMGET', k, 'attempts', 'worker', 'aat', 'kind', 'ckey')
  if a[3] then
    close_open(P, id, now, outcome, err, tenant, a)
    redis.call('HDEL', k, 'aat')
  else
    close_record(P, id, now, outcome, err, tenant)
  end
end

-- Workflows: what an outcome does to the jobs depending on it.

local function dependents_of(P, id)
  local d = redis.call('HGET', jkey(P, id), 'dependents')
  if not d then return {} end
  return cjson.decode(d)
end

local function count_down(P, id, callbacks_only, now)
  for _, d in ipairs(dependents_of(P, id)) do
    local k = jkey(P, d)
    local f = redis.call('HMGET', k, 'state', 'run_on', 'deps_pending', 'queue', 'priority', 'run_at')
    -- None pending: a callback a replay left alone, having started (operating.lua).
    if f[1] and (not callbacks_only or f[2] == 'finished') and tonumber(f[3] or '0') > 0 then
      local pending = tonumber(f[3]) - 1
      redis.call('HSET', k, 'deps_pending', pending, 'updated_at', now)
      if f[1] == 'waiting' and pending <= 0 then
        redis.call('HSET', k, 'state', 'queued')
        moved(P, d, 'waiting', 'queued')
        queued_in(P, d, f[4])
        place(P, d, f[4], tonumber(f[5]), tonumber(f[6]), now)
      end
    end
  end
end

-- `succeeded`, `failed_or_cancelled`: ids that just ended so.
local function settle(P, succeeded, finished, now)
  for _, id in ipairs(succeeded) do count_down(P, id, false, now) end
  while #finished > 0 do
    -- By id: a dependent of several that ended in one round names the first
    -- (SQL's min(id)), which a retry of that one then finds in its error.
    table.sort(finished)
    local next_round = {}
    for _, x in ipairs(finished) do
      count_down(P, x, true, now)
      local how = redis.call('HGET', jkey(P, x), 'state')
      for _, d in ipairs(dependents_of(P, x)) do
        local k = jkey(P, d)
        local f = redis.call('HMGET', k, 'state', 'run_on')
        if f[1] == 'waiting' and f[2] == 'succeeded' then
          redis.call('HSET', k, 'state', 'cancelled', 'error', 'dependency ' .. x .. ' ' .. how,
            'finished_at', now, 'updated_at', now)
          moved(P, d, 'waiting', 'cancelled')
          ended(P, d, 'cancelled', now)
          table.insert(next_round, d)
        end
      end
    end
    finished = next_round
  end
end

local function has_dependents(P, id)
  return redis.call('HEXISTS', jkey(P, id), 'dependents') == 1
end


-- Shared by the parts that read a job for a tenant.
local function tenant_ok(f_tenant, tenant)
  return tenant == '' or f_tenant == string.sub(tenant, 2)
end

-- The failed jobs by finish (P:fin:failed), or a tenant's own (its argument:
-- NUL and its name), so that its reads never walk everyone's.
local function failed_set(P, tenant)
  if tenant == '' then return P .. ':fin:failed' end
  return P .. ':fin:failed\0' .. string.sub(tenant, 2)
end


local RO = {'no-writes'}

local function version() return VERSION end

redis.register_function('chit_version', version)
redis.register_function{function_name = 'chit_version_ro', callback = version, flags = RO}
