#!lua name=chit
-- chit's Redis library: every transition of a job is one function here, run
-- atomically by the server (FCALL). KEYS[1] is the prefix ("{chit}"), whose
-- hash tag puts every key chit writes in one slot; ARGV[1] is the time in
-- milliseconds, "" for the server's TIME (tests pass one).
--
-- Keys (P is the prefix):
--   P:j:<id>     a job's hash (fields below; a missing field is None)
--   P:r:<queue>  ready jobs: score priority, member run_at (13 digits) .. id,
--                so equal priorities sort by due time, then id
--   P:gr:<queue> NUL <group>  the same, for one group (kind NUL tenant NUL
--                concurrency key: the job's field g), for flow claims
--   P:qg:<queue> group -> its queued jobs (due or not); P:queues every queue
--   P:rk:<kind>, P:rkk:<kind> NUL <key>  running jobs by lease expiry
--   P:sk:<kind>, P:skk:<kind> NUL <key>  starts (lease tokens) by time, the
--                last hour's: what limits count
--   P:limits     kind -> JSON {code, operator, updated_at}; P:pauses
--                ("queue"|"kind") NUL name -> paused_at; P:lock:<kind> a flow
--                claim's short lock of a limited kind
--   P:s:<queue>  scheduled jobs (run_at in the future): score run_at, member id;
--                a claim moves those due to P:r
--   P:w:<queue>  wake tokens: enqueue pushes, idle workers BLPOP
--   P:leases     running jobs by lease expiry
--   P:exp        jobs not started yet that have an expires_at, by it
--   P:done       terminal jobs by finished_at (prune); P:failed the failed ones
--   P:idem, P:uniq, P:deb   (tenant NUL key) -> the job holding the key
--   P:res:<id>   a large result; P:att:<id> attempt records (JSON, in order);
--   P:st:<id>    steps: name -> "attempt|created_at|result"
--   P:tok        the lease token counter
--   P:d:<queue>  its ready jobs by due time; P:run:<queue> its running jobs
--   P:wf:<id>    a workflow's job ids
--
-- The library is this file, then flow.lua and the capabilities' files
-- (connection.PARTS), loaded as one: they use the helpers here.

local VERSION = 7
local WAKE_TOKENS = 16
local SCAN = 200  -- ready jobs a claim reads at a time, looking past skipped ones

local function clock(arg)
  if arg ~= nil and arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function jkey(P, id) return P .. ':j:' .. id end

local function member(run_at, id) return string.format('%013d', run_at) .. id end

local function nonempty(v) if v == '' then return nil end return v end

-- A job's state changed (`from` nil: stored; `to` nil: deleted): the indexes
-- reports read, P:bs:<state> (ids by state) and P:cnt (state NUL kind NUL
-- tenant -> jobs), moved with it.
local function moved(P, id, from, to)
  local f = redis.call('HMGET', jkey(P, id), 'kind', 'tenant')
  local tail = '\0' .. f[1] .. '\0' .. f[2]
  if from then
    if redis.call('HINCRBY', P .. ':cnt', from .. tail, -1) <= 0 then
      redis.call('HDEL', P .. ':cnt', from .. tail)
    end
    redis.call('ZREM', P .. ':bs:' .. from, id)
  end
  if to then
    redis.call('HINCRBY', P .. ':cnt', to .. tail, 1)
    redis.call('ZADD', P .. ':bs:' .. to, 0, id)
  end
end

-- Queue placement

local function wake(P, queue)
  local w = P .. ':w:' .. queue
  if redis.call('LLEN', w) < WAKE_TOKENS then redis.call('RPUSH', w, '1') end
end

local function gkey(P, queue, g) return P .. ':gr:' .. queue .. '\0' .. g end

-- Put a queued job where claims find it: ready when due, else scheduled.
local function place(P, id, queue, priority, run_at, now)
  if run_at <= now then
    local m = member(run_at, id)
    local k = jkey(P, id)
    redis.call('ZADD', P .. ':r:' .. queue, priority, m)
    redis.call('ZADD', gkey(P, queue, redis.call('HGET', k, 'g')), priority, m)
    redis.call('ZADD', P .. ':d:' .. queue, run_at, id)
    redis.call('HSET', k, 'rm', m)
    wake(P, queue)
  else
    redis.call('ZADD', P .. ':s:' .. queue, run_at, id)
  end
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
local function queued_in(P, id, queue)
  redis.call('HINCRBY', P .. ':qg:' .. queue, redis.call('HGET', jkey(P, id), 'g'), 1)
end

local function queued_out(P, id, queue)
  local qg, g = P .. ':qg:' .. queue, redis.call('HGET', jkey(P, id), 'g')
  if redis.call('HINCRBY', qg, g, -1) <= 0 then redis.call('HDEL', qg, g) end
end

local function held_by(P, index, tenant, key, id)
  if key then
    local k = tenant .. '\0' .. key
    if redis.call('HGET', P .. index, k) == id then redis.call('HDEL', P .. index, k) end
  end
end

-- A job that just became terminal: its indexes.
local function ended(P, id, state, now)
  local k = jkey(P, id)
  local f = redis.call('HMGET', k, 'tenant', 'unique', 'deb')
  held_by(P, ':uniq', f[1], f[2], id)
  held_by(P, ':deb', f[1], f[3], id)
  redis.call('ZREM', P .. ':exp', id)
  redis.call('ZADD', P .. ':done', now, id)
  if state == 'failed' then redis.call('ZADD', P .. ':failed', now, id) end
  if state == 'failed' or state == 'succeeded' then
    redis.call('ZADD', P .. ':fin:' .. state, now, id)
    redis.call('ZADD', P .. ':fin:' .. state .. '\0' .. f[1], now, id)
  end
end

-- Attempt records

local function close_attempt(P, id, now, outcome, err)
  local a = P .. ':att:' .. id
  local last = redis.call('LINDEX', a, -1)
  if not last then return end
  local rec = cjson.decode(last)
  if rec.finished_at then return end
  rec.finished_at = now
  rec.outcome = outcome
  rec.error = err
  redis.call('LSET', a, -1, cjson.encode(rec))
  -- Durations by kind, outcome and tenant, for attempt_stats' histograms.
  local g = rec.kind .. '\0' .. outcome .. '\0' .. (redis.call('HGET', jkey(P, id), 'tenant') or '')
  local seconds = (now - rec.started_at) / 1000
  redis.call('ZADD', P .. ':dur:' .. g, seconds, id .. ':' .. rec.attempt)
  redis.call('HINCRBYFLOAT', P .. ':dursum', g, seconds)
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
    if f[1] and (not callbacks_only or f[2] == 'finished') then
      local pending = tonumber(f[3] or '0') - 1
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

-- Enqueue

-- The fields of a job, by position in ARGV (`width` of them a job).
local J_ID, J_KIND, J_QUEUE, J_PRIORITY, J_PAYLOAD, J_MAX, J_RUN_AT, J_TENANT = 0, 1, 2, 3, 4, 5, 6, 7
local J_IDEM, J_HASH, J_CKEY, J_TIMEOUT, J_EXPIRES_AT, J_EXPIRES_IN, J_UNIQUE = 8, 9, 10, 11, 12, 13, 14
local J_TRACE, J_DEB, J_DEB_DELAY, J_DEB_BOUND = 15, 16, 17, 18
-- Workflows only (width 28)
local J_STATE, J_ERROR, J_PENDING, J_WF, J_REF, J_RUN_ON, J_DEPENDS, J_DEPENDENTS, J_DEPENDED = 19, 20, 21, 22, 23, 24, 25, 26, 27

local function live(P, index, k, states)
  local id = redis.call('HGET', P .. index, k)
  if not id then return nil end
  local f = redis.call('HMGET', jkey(P, id), 'state', 'started_at', 'kind')
  if f[1] and states[f[1]] and not (index == ':deb' and f[2]) then return id, f[3] end
  return nil
end

local ACTIVE = {waiting = true, queued = true, running = true}
local NOT_STARTED = {queued = true}

-- ARGV: now, width, expected states of stored dependencies (JSON, or ""),
-- then the jobs. Returns, per job: code (c created, i idempotency key,
-- d debounced, u unique key), id, stored request hash; or {"retry"} when a
-- stored dependency changed since it was read, {"depended", n} when a job
-- others depend on matched a key, {"kind", n, holder, kind}: a debounce key
-- held by another kind. Nothing is written in those cases.
local function enqueue(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local width = tonumber(args[2])
  if args[3] ~= '' then
    for id, state in pairs(cjson.decode(args[3])) do
      local s = redis.call('HGET', jkey(P, id), 'state')
      if s ~= state then return {'retry'} end
    end
  end
  local n = (#args - 3) / width
  -- First every key, writing nothing: a refusal must store nothing.
  local out = {}
  local taken = {idem = {}, uniq = {}, deb = {}}  -- keys this call takes
  for i = 0, n - 1 do
    local b = 3 + i * width + 1
    local id, tenant = args[b + J_ID], args[b + J_TENANT]
    local idem, uniq, deb = nonempty(args[b + J_IDEM]), nonempty(args[b + J_UNIQUE]), nonempty(args[b + J_DEB])
    -- What the SQL stores' CHECK constraints refuse, refused here before any write.
    local max_attempts = tonumber(args[b + J_MAX])
    if not max_attempts or max_attempts < 1 then
      return {'invalid', i, 'max_attempts must be at least 1, not ' .. args[b + J_MAX]}
    end
    local code, holder, rhash = 'c', id, false
    if idem then
      local k = tenant .. '\0' .. idem
      local found = taken.idem[k] or redis.call('HGET', P .. ':idem', k)
      if found then
        code, holder = 'i', found
        rhash = taken.idem[k] and args[taken.idem_b[k] + J_HASH] or redis.call('HGET', jkey(P, found), 'rhash')
        if rhash == '' then rhash = false end
      end
    end
    if code == 'c' and deb then
      local k = tenant .. '\0' .. deb
      local found, kind = taken.deb[k], nil
      if found then kind = args[taken.deb_b[k] + J_KIND] else found, kind = live(P, ':deb', k, NOT_STARTED) end
      if found then
        if kind ~= args[b + J_KIND] then return {'kind', i, found, kind, deb} end
        code, holder = 'd', found
      end
    end
    if code == 'c' and uniq then
      local k = tenant .. '\0' .. uniq
      local found = taken.uniq[k] or live(P, ':uniq', k, ACTIVE)
      if found then code, holder = 'u', found end
    end
    if code ~= 'c' and width > 19 and args[b + J_DEPENDED] == '1' then return {'depended', i} end
    if code == 'c' then
      taken.idem_b = taken.idem_b or {}
      taken.deb_b = taken.deb_b or {}
      if idem then taken.idem[tenant .. '\0' .. idem] = id; taken.idem_b[tenant .. '\0' .. idem] = b end
      if deb then taken.deb[tenant .. '\0' .. deb] = id; taken.deb_b[tenant .. '\0' .. deb] = b end
      if uniq then taken.uniq[tenant .. '\0' .. uniq] = id end
    end
    out[#out + 1] = code
    out[#out + 1] = holder
    out[#out + 1] = rhash
  end
  -- Then the writes.
  local created = {}
  for i = 0, n - 1 do
    local b = 3 + i * width + 1
    local code, id = out[i * 3 + 1], args[b + J_ID]
    local tenant = args[b + J_TENANT]
    if code == 'c' then
      created[id] = true
      local k = jkey(P, id)
      local queue, priority = args[b + J_QUEUE], tonumber(args[b + J_PRIORITY])
      local state = 'queued'
      if width > 19 and args[b + J_STATE] ~= '' then state = args[b + J_STATE] end
      local run_at = now
      local deb = nonempty(args[b + J_DEB])
      if deb then
        run_at = now + math.floor(tonumber(args[b + J_DEB_DELAY]) * 1000)
      elseif args[b + J_RUN_AT] ~= '' then
        run_at = tonumber(args[b + J_RUN_AT])
      end
      local fields = {'id', id, 'kind', args[b + J_KIND], 'queue', queue, 'priority', priority,
        'payload', args[b + J_PAYLOAD], 'state', state, 'attempts', 0,
        'max_attempts', args[b + J_MAX], 'run_at', run_at, 'created_at', now, 'updated_at', now,
        'tenant', tenant, 'g', args[b + J_KIND] .. '\0' .. tenant .. '\0' .. args[b + J_CKEY]}
      local function opt(name, v) if v ~= nil and v ~= '' then fields[#fields + 1] = name; fields[#fields + 1] = v end end
      opt('idem', args[b + J_IDEM])
      opt('rhash', args[b + J_HASH])
      opt('ckey', args[b + J_CKEY])
      opt('timeout', args[b + J_TIMEOUT])
      opt('unique', args[b + J_UNIQUE])
      opt('tp', args[b + J_TRACE])
      local expires_at = nonempty(args[b + J_EXPIRES_AT])
      if args[b + J_EXPIRES_IN] ~= '' then
        expires_at = now + math.floor(tonumber(args[b + J_EXPIRES_IN]) * 1000)
      end
      opt('expires_at', expires_at)
      if deb then
        opt('deb', deb)
        opt('deb_until', now + math.floor(tonumber(args[b + J_DEB_BOUND]) * 1000))
      end
      if width > 19 then
        opt('error', args[b + J_ERROR])
        opt('deps_pending', args[b + J_PENDING])
        opt('wf', args[b + J_WF])
        opt('ref', args[b + J_REF])
        opt('run_on', args[b + J_RUN_ON])
        opt('depends_on', args[b + J_DEPENDS])
        opt('dependents', args[b + J_DEPENDENTS])
      end
      if state == 'cancelled' then opt('finished_at', now) end
      redis.call('HSET', k, unpack(fields))
      moved(P, id, nil, state)
      redis.call('ZADD', P .. ':all', 0, id)
      local idem, uniq = nonempty(args[b + J_IDEM]), nonempty(args[b + J_UNIQUE])
      if idem then redis.call('HSET', P .. ':idem', tenant .. '\0' .. idem, id) end
      if state == 'cancelled' then
        redis.call('ZADD', P .. ':done', now, id)
      else
        if uniq then redis.call('HSET', P .. ':uniq', tenant .. '\0' .. uniq, id) end
        if deb then redis.call('HSET', P .. ':deb', tenant .. '\0' .. deb, id) end
        if expires_at then redis.call('ZADD', P .. ':exp', tonumber(expires_at), id) end
        if state == 'queued' then
          queued_in(P, id, queue)
          place(P, id, queue, priority, run_at, now)
        end
        redis.call('SADD', P .. ':queues', queue)
        if width > 19 and args[b + J_WF] ~= '' then redis.call('ZADD', P .. ':wf:' .. args[b + J_WF], 0, id) end
      end
    elseif code == 'd' then
      -- The holder takes this payload and start, never past its bound.
      local holder = out[i * 3 + 2]
      local k = jkey(P, holder)
      local f = redis.call('HMGET', k, 'deb_until', 'queue', 'priority', 'rm')
      local run_at = math.min(now + math.floor(tonumber(args[b + J_DEB_DELAY]) * 1000), tonumber(f[1]))
      unplace(P, holder, f[2], f[4])
      redis.call('HSET', k, 'payload', args[b + J_PAYLOAD], 'run_at', run_at, 'updated_at', now)
      place(P, holder, f[2], tonumber(f[3]), run_at, now)
    end
  end
  -- Stored jobs the new ones depend on learn of their new dependents.
  if width > 19 then
    local told = {}
    local order = {}
    for i = 0, n - 1 do
      local b = 3 + i * width + 1
      local id = args[b + J_ID]
      if created[id] and args[b + J_DEPENDS] ~= '' then
        for _, t in ipairs(cjson.decode(args[b + J_DEPENDS])) do
          if not created[t] and redis.call('EXISTS', jkey(P, t)) == 1 and not told[t] then
            told[t] = {}
            order[#order + 1] = t
          end
          if told[t] then table.insert(told[t], id) end
        end
      end
    end
    for _, t in ipairs(order) do
      local have = dependents_of(P, t)
      for _, d in ipairs(told[t]) do have[#have + 1] = d end
      redis.call('HSET', jkey(P, t), 'dependents', cjson.encode(have))
    end
  end
  return out
end

-- Claims

local CLAIMED = {'id', 'kind', 'queue', 'payload', 'attempts', 'max_attempts', 'lease_token',
  'checkpoint', 'pdone', 'ptotal', 'timeout', 'depends_on', 'tenant', 'tp'}

-- Move a queue's scheduled jobs that are due to its ready set.
local function promote(P, queue, now)
  local s = P .. ':s:' .. queue
  local due = redis.call('ZRANGEBYSCORE', s, '-inf', now, 'LIMIT', 0, 1000)
  for _, id in ipairs(due) do
    local f = redis.call('HMGET', jkey(P, id), 'priority', 'run_at', 'g')
    local m = member(tonumber(f[2]), id)
    redis.call('ZADD', P .. ':r:' .. queue, tonumber(f[1]), m)
    redis.call('ZADD', gkey(P, queue, f[3]), tonumber(f[1]), m)
    redis.call('ZADD', P .. ':d:' .. queue, tonumber(f[2]), id)
    redis.call('HSET', jkey(P, id), 'rm', m)
  end
  if #due > 0 then redis.call('ZREM', s, unpack(due)) end
end

-- A job's lease in the indexes limits read: by kind, and by key.
local function leased(P, id, kind, ckey, expires)
  redis.call('ZADD', P .. ':leases', expires, id)
  redis.call('ZADD', P .. ':rk:' .. kind, expires, id)
  if ckey and ckey ~= '' then redis.call('ZADD', P .. ':rkk:' .. kind .. '\0' .. ckey, expires, id) end
end

local HOUR = 3600000

local function started(P, key, now, token)
  redis.call('ZADD', key, now, token)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - HOUR)
end

-- A queued job (its ready entry `m` already gone from P:r) starts.
local function start(P, id, worker, lease_ms, now, token, m)
  local k = jkey(P, id)
  local f = redis.call('HMGET', k, 'started_at', 'kind', 'ckey', 'tenant', 'deb', 'attempts', 'queue', 'g')
  local attempt = tonumber(f[6]) + 1
  redis.call('ZREM', gkey(P, f[7], f[8]), m)
  queued_out(P, id, f[7])
  redis.call('HSET', k, 'state', 'running', 'attempts', attempt, 'lease_token', token,
    'lease_expires_at', now + lease_ms, 'worker', worker, 'updated_at', now)
  moved(P, id, 'queued', 'running')
  redis.call('ZREM', P .. ':d:' .. f[7], id)
  redis.call('SADD', P .. ':run:' .. f[7], id)
  redis.call('HDEL', k, 'rm')
  if not f[1] then redis.call('HSET', k, 'started_at', now) end
  leased(P, id, f[2], f[3], now + lease_ms)
  started(P, P .. ':sk:' .. f[2], now, token)
  if f[3] and f[3] ~= '' then started(P, P .. ':skk:' .. f[2] .. '\0' .. f[3], now, token) end
  redis.call('ZREM', P .. ':exp', id)
  held_by(P, ':deb', f[4], f[5], id)
  close_attempt(P, id, now, 'lease_expired', 'lease expired: worker lost')
  redis.call('RPUSH', P .. ':att:' .. id, cjson.encode({attempt = attempt, worker = worker,
    started_at = now, kind = f[2], ckey = f[3] or ''}))
  return redis.call('HMGET', k, unpack(CLAIMED))
end

local function kind_set(arg)
  if arg == '' then return nil end
  local set = {}
  for _, kind in ipairs(cjson.decode(arg)) do set[kind] = true end
  return set
end

local function next_token(P, id)
  return string.format('%x', redis.call('INCR', P .. ':tok')) .. '-' .. id
end

-- ARGV from `base`: worker, lease (ms), limit, kinds (JSON, "" for any),
-- held kinds (JSON: limited or paused ones, left to flow claims; "" for none),
-- queue count, queues.
local function claim_in(P, args, base, now)
  local worker, lease_ms, limit = args[base], tonumber(args[base + 1]), tonumber(args[base + 2])
  local kinds, held = kind_set(args[base + 3]), kind_set(args[base + 4]) or {}
  local nq = tonumber(args[base + 5])
  local out = {}
  local taken = 0
  for q = 1, nq do
    if taken >= limit then break end
    local queue = args[base + 5 + q]
    promote(P, queue, now)
    local r = P .. ':r:' .. queue
    local offset = 0
    while taken < limit do
      local page = redis.call('ZRANGE', r, offset, offset + SCAN - 1)
      if #page == 0 then break end
      local skipped = 0
      for _, m in ipairs(page) do
        if taken >= limit then break end
        local id = string.sub(m, 14)
        local f = redis.call('HMGET', jkey(P, id), 'kind', 'expires_at', 'started_at')
        local expired = f[2] and not f[3] and tonumber(f[2]) <= now
        if (kinds == nil or kinds[f[1]]) and not held[f[1]] and not expired then
          redis.call('ZREM', r, m)
          local row = start(P, id, worker, lease_ms, now, next_token(P, id), m)
          for _, v in ipairs(row) do out[#out + 1] = v end
          taken = taken + 1
        else
          skipped = skipped + 1
        end
      end
      if #page < SCAN then break end
      offset = offset + skipped
    end
  end
  return out
end

local function claim(keys, args)
  local P = keys[1]
  return claim_in(P, args, 2, clock(args[1]))
end

-- Outcomes

-- A job leaves `running`: its lease and fence go.
local function unlease(P, id, k)
  local f = redis.call('HMGET', k, 'kind', 'ckey', 'queue')
  redis.call('SREM', P .. ':run:' .. f[3], id)
  redis.call('HDEL', k, 'lease_token', 'lease_expires_at')
  redis.call('ZREM', P .. ':leases', id)
  if f[1] then redis.call('ZREM', P .. ':rk:' .. f[1], id) end
  if f[2] and f[2] ~= '' then redis.call('ZREM', P .. ':rkk:' .. f[1] .. '\0' .. f[2], id) end
end

local function fenced(k, token)
  local f = redis.call('HMGET', k, 'state', 'lease_token')
  return f[1] == 'running' and f[2] == token
end

-- One outcome: code (S, F, R, C, Z), id, token, then five values. Returns
-- the state it left the job in, or nil when fenced out.
local function finish_one(P, now, free, code, id, token, a, b, c, d, e)
  local k = jkey(P, id)
  if not fenced(k, token) then return nil end
  local f = redis.call('HMGET', k, 'cancel', 'attempts', 'max_attempts', 'hand_backs', 'queue', 'priority')
  local cancel = f[1] == '1'
  local attempts, max = tonumber(f[2]), tonumber(f[3])
  local state, outcome, err = nil, nil, nil
  unlease(P, id, k)
  local requeue_at = nil
  if code == 'S' then
    state, outcome = 'succeeded', 'succeeded'
    if b == '1' then
      redis.call('SET', P .. ':res:' .. id, a)
      redis.call('HSET', k, 'result_ext', '1')
      redis.call('HDEL', k, 'result')
    else
      redis.call('HSET', k, 'result', a)
      redis.call('HDEL', k, 'result_ext')
    end
    if c == '1' then
      redis.call('HDEL', k, 'pdone', 'ptotal')
      if d ~= '' then redis.call('HSET', k, 'pdone', d) end
      if e ~= '' then redis.call('HSET', k, 'ptotal', e) end
    end
    redis.call('HDEL', k, 'error')
  elseif code == 'F' then
    redis.call('HSET', k, 'error', a)
    err = a
    if cancel then state = 'cancelled'
    elseif b == '' or attempts >= max then state = 'failed'
    else state = 'queued'; requeue_at = now + tonumber(b) end
    outcome = state == 'queued' and 'retried' or state
  elseif code == 'R' then
    local hand_backs = tonumber(f[4] or '0')
    local free_one = hand_backs < tonumber(free)
    if free_one then attempts = attempts - 1 end
    redis.call('HSET', k, 'hand_backs', hand_backs + 1, 'attempts', attempts)
    if cancel then state = 'cancelled'
    elseif not free_one and attempts >= max then
      state = 'failed'
      err = 'handed back ' .. (hand_backs + 1) .. ' times without finishing'
      redis.call('HSET', k, 'error', err)
    else state = 'queued'; requeue_at = now end
    outcome = state == 'queued' and 'released' or state
  elseif code == 'C' then
    state, outcome = 'cancelled', 'cancelled'
  else  -- Z: snoozed
    redis.call('HSET', k, 'attempts', attempts - 1)
    if cancel then state = 'cancelled' else state = 'queued'; requeue_at = now + tonumber(a) end
    outcome = state == 'queued' and 'snoozed' or state
  end
  redis.call('HSET', k, 'state', state, 'updated_at', now)
  moved(P, id, 'running', state)
  if requeue_at then
    redis.call('HSET', k, 'run_at', requeue_at)
    queued_in(P, id, f[5])
    place(P, id, f[5], tonumber(f[6]), requeue_at, now)
  else
    redis.call('HSET', k, 'finished_at', now)
    ended(P, id, state, now)
  end
  close_attempt(P, id, now, outcome, err)
  return state
end

-- ARGV from `base`: count, then 8 values an outcome.
local function finish_in(P, args, base, now, free)
  local n = tonumber(args[base])
  local out, succeeded, finished = {}, {}, {}
  for i = 0, n - 1 do
    local b = base + 1 + i * 8
    local id = args[b + 1]
    local state = finish_one(P, now, free, args[b], id, args[b + 2], args[b + 3], args[b + 4],
      args[b + 5], args[b + 6], args[b + 7])
    out[#out + 1] = state and 1 or 0
    if state and has_dependents(P, id) then
      if state == 'succeeded' then table.insert(succeeded, id)
      elseif state ~= 'queued' then table.insert(finished, id) end
    end
  end
  settle(P, succeeded, finished, now)
  return out, base + 1 + n * 8
end

-- ARGV: now, free hand-backs, outcomes.
local function finish(keys, args)
  local out = finish_in(keys[1], args, 3, clock(args[1]), args[2])
  return out
end

-- ARGV: now, free hand-backs, outcomes, then a claim's arguments.
local function finish_claim(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local out, next_arg = finish_in(P, args, 3, now, args[2])
  return {out, claim_in(P, args, next_arg, now)}
end

-- ARGV: now, lease (ms), then id, token, has progress, done, total a beat.
-- Returns id, cancel requested (1/0) of each held job.
local function heartbeat(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local lease_ms = tonumber(args[2])
  local out = {}
  for b = 3, #args, 5 do
    local id = args[b]
    local k = jkey(P, id)
    if fenced(k, args[b + 1]) then
      redis.call('HSET', k, 'lease_expires_at', now + lease_ms, 'updated_at', now)
      local g = redis.call('HMGET', k, 'kind', 'ckey')
      leased(P, id, g[1], g[2], now + lease_ms)
      if args[b + 2] == '1' then
        redis.call('HDEL', k, 'pdone', 'ptotal')
        if args[b + 3] ~= '' then redis.call('HSET', k, 'pdone', args[b + 3]) end
        if args[b + 4] ~= '' then redis.call('HSET', k, 'ptotal', args[b + 4]) end
      end
      out[#out + 1] = id
      out[#out + 1] = redis.call('HGET', k, 'cancel') == '1' and 1 or 0
    end
  end
  return out
end

-- ARGV: now, id, token, checkpoint JSON, lease (ms), has progress, done, total.
local function checkpoint(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local id = args[2]
  local k = jkey(P, id)
  if not fenced(k, args[3]) then return 0 end
  local lease_ms = tonumber(args[5])
  redis.call('HSET', k, 'checkpoint', args[4], 'lease_expires_at', now + lease_ms, 'updated_at', now)
  local g = redis.call('HMGET', k, 'kind', 'ckey')
  leased(P, id, g[1], g[2], now + lease_ms)
  if args[6] == '1' then
    redis.call('HDEL', k, 'pdone', 'ptotal')
    if args[7] ~= '' then redis.call('HSET', k, 'pdone', args[7]) end
    if args[8] ~= '' then redis.call('HSET', k, 'ptotal', args[8]) end
  end
  return 1
end

-- ARGV: now, id, token, name, result JSON. A step stored keeps its first result.
local function save_step(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local k = jkey(P, args[2])
  if not fenced(k, args[3]) then return 0 end
  local attempt = redis.call('HGET', k, 'attempts')
  local st = P .. ':st:' .. args[2]
  if redis.call('HSETNX', st, args[4], attempt .. '|' .. now .. '|' .. args[5]) == 1 then
    redis.call('RPUSH', P .. ':sto:' .. args[2], args[4])
  end
  return 1
end

-- Leases and expiry

local function rescue_expired(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local ids = redis.call('ZRANGEBYSCORE', P .. ':leases', '-inf', '(' .. now)
  local counts = {queued = 0, failed = 0, cancelled = 0}
  local finished = {}
  for _, id in ipairs(ids) do
    local k = jkey(P, id)
    local f = redis.call('HMGET', k, 'state', 'cancel', 'attempts', 'max_attempts', 'queue', 'priority')
    unlease(P, id, k)
    if f[1] == 'running' then
      local state
      if f[2] == '1' then state = 'cancelled'
      elseif tonumber(f[3]) >= tonumber(f[4]) then state = 'failed'
      else state = 'queued' end
      if state ~= 'cancelled' then
        redis.call('HSET', k, 'error', 'worker lost: lease expired after ' .. f[3] .. ' attempts')
      end
      redis.call('HSET', k, 'state', state, 'run_at', now, 'updated_at', now)
      moved(P, id, 'running', state)
      close_attempt(P, id, now, 'lease_expired', 'lease expired: worker lost')
      if state == 'queued' then
        queued_in(P, id, f[5])
        place(P, id, f[5], tonumber(f[6]), now, now)
      else
        redis.call('HSET', k, 'finished_at', now)
        ended(P, id, state, now)
        if has_dependents(P, id) then table.insert(finished, id) end
      end
      counts[state] = counts[state] + 1
    end
  end
  settle(P, {}, finished, now)
  return {counts.queued, counts.failed, counts.cancelled}
end

local function cancel_now(P, id, k, f, now, err)
  if f.state == 'queued' then queued_out(P, id, f.queue) end
  unplace(P, id, f.queue, f.rm)
  redis.call('HSET', k, 'state', 'cancelled', 'finished_at', now, 'updated_at', now)
  moved(P, id, f.state, 'cancelled')
  if err then redis.call('HSET', k, 'error', err) end
  ended(P, id, 'cancelled', now)
end

local function expire_jobs(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local ids = redis.call('ZRANGEBYSCORE', P .. ':exp', '-inf', now)
  local n, finished = 0, {}
  for _, id in ipairs(ids) do
    local k = jkey(P, id)
    local f = redis.call('HMGET', k, 'state', 'started_at', 'queue', 'rm')
    redis.call('ZREM', P .. ':exp', id)
    if (f[1] == 'queued' or f[1] == 'waiting') and not f[2] then
      cancel_now(P, id, k, {state = f[1], queue = f[3], rm = f[4]}, now, 'expired before it started')
      n = n + 1
      if has_dependents(P, id) then table.insert(finished, id) end
    end
  end
  settle(P, {}, finished, now)
  return n
end

-- Operating

local function tenant_ok(f_tenant, tenant)
  return tenant == '' or f_tenant == string.sub(tenant, 2)
end

-- ARGV: now, id, tenant ("" any, else "=" .. tenant). Returns the result or "".
local function cancel(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local id = args[2]
  local k = jkey(P, id)
  local f = redis.call('HMGET', k, 'state', 'tenant', 'queue', 'rm')
  if not f[1] or not tenant_ok(f[2], args[3]) then return 'not_found' end
  if f[1] == 'queued' or f[1] == 'waiting' then
    redis.call('HSET', k, 'cancel', '1')
    cancel_now(P, id, k, {state = f[1], queue = f[3], rm = f[4]}, now, nil)
    if has_dependents(P, id) then settle(P, {}, {id}, now) end
    return 'cancelled'
  elseif f[1] == 'running' then
    redis.call('HSET', k, 'cancel', '1', 'updated_at', now)
    return 'requested'
  end
  return 'already_finished'
end

-- ARGV: now, id, tenant, run_now (1/""), run_at (ms or ""), priority, payload.
local function update(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local id = args[2]
  local k = jkey(P, id)
  local f = redis.call('HMGET', k, 'state', 'tenant', 'queue', 'rm', 'run_at', 'priority')
  if not f[1] or not tenant_ok(f[2], args[3]) then return 'not_found' end
  if f[1] ~= 'queued' and f[1] ~= 'waiting' then return 'started' end
  local run_at, priority = tonumber(f[5]), tonumber(f[6])
  if args[4] == '1' then run_at = math.min(run_at, now)
  elseif args[5] ~= '' then run_at = tonumber(args[5]) end
  if args[6] ~= '' then priority = tonumber(args[6]) end
  if args[7] ~= '' then redis.call('HSET', k, 'payload', args[7]) end
  redis.call('HSET', k, 'run_at', run_at, 'priority', priority, 'updated_at', now)
  if f[1] == 'queued' then
    unplace(P, id, f[3], f[4])
    place(P, id, f[3], priority, run_at, now)
  end
  return 'changed'
end

-- Replay: a failed or cancelled job made new, and what its end cancelled put back.

local function unique_free(P, id, tenant, uniq)
  if not uniq then return true end
  local holder = live(P, ':uniq', tenant .. '\0' .. uniq, ACTIVE)
  return holder == nil or holder == id
end

local function reset(P, id, k, f, now)
  local pending = tonumber(f.deps_pending or '0')
  local state = pending > 0 and 'waiting' or 'queued'
  redis.call('HDEL', k, 'error', 'result', 'result_ext', 'checkpoint', 'pdone', 'ptotal',
    'lease_token', 'lease_expires_at', 'finished_at', 'expires_at', 'deb', 'deb_until')
  redis.call('HSET', k, 'state', state, 'attempts', 0, 'hand_backs', 0, 'run_at', now,
    'cancel', '0', 'updated_at', now)
  moved(P, id, f.state, state)
  redis.call('ZREM', P .. ':fin:failed', id)
  redis.call('ZREM', P .. ':fin:failed\0' .. f.tenant, id)
  redis.call('ZREM', P .. ':fin:succeeded', id)
  redis.call('ZREM', P .. ':fin:succeeded\0' .. f.tenant, id)
  redis.call('DEL', P .. ':res:' .. id)
  redis.call('ZREM', P .. ':done', id)
  redis.call('ZREM', P .. ':failed', id)
  if f.unique then redis.call('HSET', P .. ':uniq', f.tenant .. '\0' .. f.unique, id) end
  if state == 'queued' then
    queued_in(P, id, f.queue)
    place(P, id, f.queue, tonumber(f.priority), now, now)
  end
end

local REPLAY_FIELDS = {'state', 'tenant', 'unique', 'deps_pending', 'queue', 'priority', 'kind', 'error', 'finished_at', 'run_on'}

local function read(k)
  local v = redis.call('HMGET', k, unpack(REPLAY_FIELDS))
  local f = {}
  for i, name in ipairs(REPLAY_FIELDS) do if v[i] then f[name] = v[i] end end
  return f
end

local function replayed(P, ids, now)
  while #ids > 0 do
    local next_round = {}
    for _, x in ipairs(ids) do
      for _, d in ipairs(dependents_of(P, x)) do
        local k = jkey(P, d)
        local f = read(k)
        if f.run_on == 'finished' then
          redis.call('HSET', k, 'deps_pending', tonumber(f.deps_pending or '0') + 1, 'updated_at', now)
          if f.state == 'queued' then
            queued_out(P, d, f.queue)
            unplace(P, d, f.queue, redis.call('HGET', k, 'rm'))
            redis.call('HSET', k, 'state', 'waiting')
            moved(P, d, 'queued', 'waiting')
          end
        elseif f.state == 'cancelled' and (f.error == 'dependency ' .. x .. ' failed'
            or f.error == 'dependency ' .. x .. ' cancelled') and unique_free(P, d, f.tenant, f.unique) then
          redis.call('HDEL', k, 'error', 'finished_at')
          redis.call('HSET', k, 'state', 'waiting', 'cancel', '0', 'updated_at', now)
          moved(P, d, 'cancelled', 'waiting')
          redis.call('ZREM', P .. ':done', d)
          if f.unique then redis.call('HSET', P .. ':uniq', f.tenant .. '\0' .. f.unique, d) end
          if has_dependents(P, d) then table.insert(next_round, d) end
        end
      end
    end
    ids = next_round
  end
end

-- ARGV: now, tenant, kind, error prefix, since (ms), then ids ("" filters:
-- every failed job matching them instead). Returns how many.
local function replay(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local tenant, kind, prefix, since = args[2], args[3], args[4], args[5]
  local ids = {}
  if #args > 5 then
    for i = 6, #args do ids[#ids + 1] = args[i] end
  else
    -- newest first: of several holding one unique key, the newest comes back
    local low = since == '' and '-inf' or since
    ids = redis.call('ZREVRANGEBYSCORE', P .. ':failed', '+inf', low)
  end
  local n, with_dependents = 0, {}
  for _, id in ipairs(ids) do
    local k = jkey(P, id)
    local f = read(k)
    local ok = (f.state == 'failed' or f.state == 'cancelled') and tenant_ok(f.tenant, tenant)
    if ok and #args <= 5 then
      ok = f.state == 'failed' and (kind == '' or f.kind == kind)
        and (prefix == '' or string.sub(f.error or '', 1, #prefix) == prefix)
    end
    if ok and unique_free(P, id, f.tenant, f.unique) then
      reset(P, id, k, f, now)
      n = n + 1
      if has_dependents(P, id) then table.insert(with_dependents, id) end
    end
  end
  replayed(P, with_dependents, now)
  return n
end

-- ARGV: now, age (ms), batch. Deletes up to `batch` terminal jobs finished before now - age.
local function prune(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local ids = redis.call('ZRANGEBYSCORE', P .. ':done', '-inf', '(' .. (now - tonumber(args[2])), 'LIMIT', 0, tonumber(args[3]))
  for _, id in ipairs(ids) do
    local k = jkey(P, id)
    local f = redis.call('HMGET', k, 'tenant', 'idem', 'state', 'wf')
    if f[3] == 'succeeded' or f[3] == 'failed' or f[3] == 'cancelled' then
      held_by(P, ':idem', f[1], f[2], id)
      if f[4] then redis.call('ZREM', P .. ':wf:' .. f[4], id) end
      moved(P, id, f[3], nil)
      redis.call('ZREM', P .. ':all', id)
      for _, name in ipairs({'succeeded', 'failed'}) do
        redis.call('ZREM', P .. ':fin:' .. name, id)
        redis.call('ZREM', P .. ':fin:' .. name .. '\0' .. f[1], id)
      end
      for _, rec in ipairs(redis.call('LRANGE', P .. ':att:' .. id, 0, -1)) do
        local a = cjson.decode(rec)
        if a.outcome then
          local g = a.kind .. '\0' .. a.outcome .. '\0' .. f[1]
          if redis.call('ZREM', P .. ':dur:' .. g, id .. ':' .. a.attempt) == 1 then
            redis.call('HINCRBYFLOAT', P .. ':dursum', g, -(a.finished_at - a.started_at) / 1000)
          end
        end
      end
      redis.call('DEL', k, P .. ':res:' .. id, P .. ':att:' .. id, P .. ':st:' .. id, P .. ':sto:' .. id)
    end
    redis.call('ZREM', P .. ':done', id)
    redis.call('ZREM', P .. ':failed', id)
  end
  return #ids
end

-- Reads

-- ARGV: id, tenant. The job's fields (flat), the server's time, and its
-- dependencies' states (flat: state, count).
local function get(keys, args)
  local P = keys[1]
  local k = jkey(P, args[1])
  local fields = redis.call('HGETALL', k)
  if #fields == 0 then return {} end
  local tenant = redis.call('HGET', k, 'tenant')
  if not tenant_ok(tenant, args[2]) then return {} end
  local states = {}
  local depends_on = redis.call('HGET', k, 'depends_on')
  if depends_on then
    local n = {}
    for _, d in ipairs(cjson.decode(depends_on)) do
      local s = redis.call('HGET', jkey(P, d), 'state')
      if s then n[s] = (n[s] or 0) + 1 end
    end
    for s, c in pairs(n) do states[#states + 1] = s; states[#states + 1] = c end
  end
  return {fields, clock(''), states}
end

-- ARGV: id, tenant. {found, inline result, external result}.
local function get_result(keys, args)
  local P = keys[1]
  local f = redis.call('HMGET', jkey(P, args[1]), 'tenant', 'result', 'result_ext')
  if not f[1] or not tenant_ok(f[1], args[2]) then return {0} end
  if f[3] == '1' then return {1, redis.call('GET', P .. ':res:' .. args[1])} end
  return {1, f[2]}
end

-- ARGV: id. Each direct dependency still stored: id, kind, state, result, external.
local function dependencies(keys, args)
  local P = keys[1]
  local depends_on = redis.call('HGET', jkey(P, args[1]), 'depends_on')
  local out = {}
  if not depends_on then return out end
  for _, d in ipairs(cjson.decode(depends_on)) do
    local f = redis.call('HMGET', jkey(P, d), 'kind', 'state', 'result', 'result_ext')
    if f[2] then
      out[#out + 1] = d
      for i = 1, 4 do out[#out + 1] = f[i] end
    end
  end
  return out
end

-- ARGV: ids. For each: tenant, state, workflow id (false when unknown).
local function lookup(keys, args)
  local P = keys[1]
  local out = {}
  for _, id in ipairs(args) do
    local f = redis.call('HMGET', jkey(P, id), 'tenant', 'state', 'wf')
    out[#out + 1] = f
  end
  return out
end

-- ARGV: queues. Milliseconds until the first scheduled job of these queues
-- is due (-1: none scheduled).
local function next_due(keys, args)
  local P = keys[1]
  local first = nil
  for _, queue in ipairs(args) do
    local s = redis.call('ZRANGE', P .. ':s:' .. queue, 0, 0, 'WITHSCORES')
    if #s > 0 and (first == nil or tonumber(s[2]) < first) then first = tonumber(s[2]) end
  end
  if first == nil then return -1 end
  return math.max(0, first - clock(''))
end

local function version() return VERSION end

local RO = {'no-writes'}
redis.register_function('chit_version', version)
redis.register_function{function_name = 'chit_version_ro', callback = version, flags = RO}
redis.register_function('chit_enqueue', enqueue)
redis.register_function('chit_claim', claim)
redis.register_function('chit_finish', finish)
redis.register_function('chit_finish_claim', finish_claim)
redis.register_function('chit_heartbeat', heartbeat)
redis.register_function('chit_checkpoint', checkpoint)
redis.register_function('chit_save_step', save_step)
redis.register_function('chit_rescue_expired', rescue_expired)
redis.register_function('chit_expire_jobs', expire_jobs)
redis.register_function('chit_cancel', cancel)
redis.register_function('chit_update', update)
redis.register_function('chit_replay', replay)
redis.register_function('chit_prune', prune)
redis.register_function{function_name = 'chit_get', callback = get, flags = RO}
redis.register_function{function_name = 'chit_get_result', callback = get_result, flags = RO}
redis.register_function{function_name = 'chit_dependencies', callback = dependencies, flags = RO}
redis.register_function{function_name = 'chit_lookup', callback = lookup, flags = RO}
redis.register_function{function_name = 'chit_next_due', callback = next_due, flags = RO}
