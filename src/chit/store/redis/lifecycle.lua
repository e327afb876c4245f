-- A job's lifecycle: claims, outcomes, heartbeats, checkpoints, steps,
-- leases and expiry.

-- Claims

local CLAIMED = {'id', 'kind', 'queue', 'payload', 'attempts', 'max_attempts', 'lease_token',
  'checkpoint', 'pdone', 'ptotal', 'timeout', 'depends_on', 'tenant', 'tp'}
-- What a start reads, in one HMGET: CLAIMED's fields, then four more, then
-- expires_at, aat and the state, for the claim that reads them first, then
-- oseq and lsn (a job with output, or one an event stream follows: output.lua).
local STARTING = {'id', 'kind', 'queue', 'payload', 'attempts', 'max_attempts', 'lease_token',
  'checkpoint', 'pdone', 'ptotal', 'timeout', 'depends_on', 'tenant', 'tp',
  'started_at', 'ckey', 'deb', 'g', 'expires_at', 'aat', 'state', 'oseq', 'lsn'}

-- Move a queue's scheduled jobs that are due to its ready set.
local function promote(P, queue, now)
  local s = P .. ':s:' .. queue
  local due = redis.call('ZRANGEBYSCORE', s, '-inf', now, 'LIMIT', 0, SWEEP)
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
local function leased(P, id, kind, ckey, expires, B)
  write(B, 'ZADD', P .. ':leases', expires, id)
  write(B, 'ZADD', P .. ':rk:' .. kind, expires, id)
  if ckey and ckey ~= '' then write(B, 'ZADD', P .. ':rkk:' .. kind .. '\0' .. ckey, expires, id) end
end

local HOUR = 3600000

local function started(P, key, now, token)
  redis.call('ZADD', key, now, token)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - HOUR)
end

-- A queued job (its ready entry `m` already gone from P:r) starts. `v`: its
-- STARTING fields, when the caller has read them. `B`: the claim's batch of
-- index writes (a claim that reads none of them), or nil.
local function start(P, id, worker, lease_ms, now, token, m, v, B)
  local k = jkey(P, id)
  v = v or redis.call('HMGET', k, unpack(STARTING))
  local n = #CLAIMED
  local kind, queue, tenant = v[2], v[3], v[13]
  local started_at, ckey, deb, g = v[n + 1], v[n + 2], v[n + 3], v[n + 4]
  local attempt = tonumber(v[5]) + 1
  -- A record still open (none is, but for a failure's) closes first, while
  -- the hash still holds the attempt it was. A job never started has none.
  if v[n + 6] then close_attempt(P, id, now, 'lease_expired', 'lease expired: worker lost', tenant) end
  if attempt > 1 then close_record(P, id, now, 'lease_expired', 'lease expired: worker lost', tenant) end
  write(B, 'ZREM', gkey(P, queue, g), m)
  queued_out(P, id, queue, g, B)
  local sets = {'state', 'running', 'attempts', attempt, 'lease_token', token,
    'lease_expires_at', now + lease_ms, 'worker', worker, 'updated_at', now, 'aat', now}
  if not started_at then sets[#sets + 1] = 'started_at'; sets[#sets + 1] = now end
  redis.call('HSET', k, unpack(sets))
  moved(P, id, 'queued', 'running', kind, tenant, B)
  write(B, 'ZREM', P .. ':d:' .. queue, id)
  write(B, 'SADD', P .. ':run:' .. queue, id)
  redis.call('HDEL', k, 'rm')
  leased(P, id, kind, ckey, now + lease_ms, B)
  -- Starts are kept (an hour at most) only for a kind with a rate to count
  -- them against: at thousands of jobs a second they would fill the memory.
  local limits = B and B.limits[kind]
  if limits == nil then
    limits = redis.call('HGET', P .. ':limits', kind)
    if B then B.limits[kind] = limits end
  end
  if limits and string.find(limits, 'rate"', 1, true) then
    started(P, P .. ':sk:' .. kind, now, token)
    if ckey and ckey ~= '' then started(P, P .. ':skk:' .. kind .. '\0' .. ckey, now, token) end
    -- A budget's starts carry their cost (token NUL cost): what flow.lua's
    -- spent sums, and report_cost replaces.
    if string.find(limits, 'cost_rate"', 1, true) then
      local cost = redis.call('HGET', k, 'cost') or '1'
      local m = token .. '\0' .. cost
      started(P, P .. ':ck:' .. kind, now, m)
      if ckey and ckey ~= '' then started(P, P .. ':ckk:' .. kind .. '\0' .. ckey, now, m) end
      redis.call('HSET', k, 'acost', cost)
    end
  end
  -- Only a job with an expiry is in P:exp, until it starts or ends.
  if v[n + 5] then redis.call('ZREM', P .. ':exp', id) end
  held_by(P, ':deb', tenant, deb, id)
  if v[n + 8] or v[n + 9] then redis.call('PUBLISH', P .. ':out', id) end
  -- The row claimed, as the HSET above left it.
  local row = {}
  for i = 1, n do row[i] = v[i] end
  row[5], row[7] = tostring(attempt), token
  return row
end

local function kind_set(arg)
  if arg == '' then return nil end
  local set = {}
  for _, kind in ipairs(cjson.decode(arg)) do set[kind] = true end
  return set
end

-- A lease token: a counter's value and the job's id, so that it changes on
-- every claim. The jobs of one claim share one value (`counted`, a hex string
-- already taken from the counter).
local function next_token(P, id, counted)
  return (counted or string.format('%x', redis.call('INCR', P .. ':tok'))) .. '-' .. id
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
  local counted = nil  -- the token counter's value, taken at the first job claimed
  local B = batch()
  for q = 1, nq do
    if taken >= limit then break end
    local queue = args[base + 5 + q]
    promote(P, queue, now)
    local r = P .. ':r:' .. queue
    local offset = 0
    -- A page as long as the jobs still wanted, then twice as long each time,
    -- up to SCAN: a claim of one job from a queue of thousands reads one
    -- entry, not SCAN (each entry read is a string made for Lua), and one
    -- behind many it must look past still takes few calls.
    local size = 0
    while taken < limit do
      size = math.min(SCAN, math.max(size * 2, limit - taken))
      local page = redis.call('ZRANGE', r, offset, offset + size - 1)
      if #page == 0 then break end
      local skipped = 0
      for _, m in ipairs(page) do
        if taken >= limit then break end
        local id = string.sub(m, 14)
        local v = redis.call('HMGET', jkey(P, id), unpack(STARTING))
        local kind, started_at, expires_at = v[2], v[15], v[19]
        local expired = expires_at and not started_at and tonumber(expires_at) <= now
        if v[21] ~= 'queued' then
          -- Not queued (an entry left behind): never a second claim of a job.
          redis.call('ZREM', r, m)
        elseif (kinds == nil or kinds[kind]) and not held[kind] and not expired then
          redis.call('ZREM', r, m)
          counted = counted or string.format('%x', redis.call('INCR', P .. ':tok'))
          local row = start(P, id, worker, lease_ms, now, next_token(P, id, counted), m, v, B)
          for _, v in ipairs(row) do out[#out + 1] = v end
          taken = taken + 1
        else
          skipped = skipped + 1
        end
      end
      if #page < size then break end
      offset = offset + skipped
    end
  end
  flush(B)
  return out
end

local function claim(keys, args)
  local P = keys[1]
  return claim_in(P, args, 2, clock(args[1]))
end

-- The claim that follows an idle worker's blocking wait in one pipeline (the
-- wait a BLMOVE of a wake token into the worker's own list P:wk:<worker>): it
-- claims only when the wait moved one there, so a wait that timed out costs
-- an LPOP. ARGV as `claim`'s (its second, the worker).
local function claim_woken(keys, args)
  local P = keys[1]
  if not redis.call('LPOP', P .. ':wk:' .. args[2]) then return false end
  return claim(keys, args)
end

-- Outcomes

-- A job leaves `running`: its lease and fence go. `f`: its kind, ckey and
-- queue, when the caller has read them; `dels`: the fields the caller will
-- HDEL, to add the lease's to.
local function unlease(P, id, k, f, dels, B)
  f = f or redis.call('HMGET', k, 'kind', 'ckey', 'queue')
  write(B, 'SREM', P .. ':run:' .. f[3], id)
  if dels then
    dels[#dels + 1] = 'lease_token'
    dels[#dels + 1] = 'lease_expires_at'
  else
    redis.call('HDEL', k, 'lease_token', 'lease_expires_at')
  end
  write(B, 'ZREM', P .. ':leases', id)
  if f[1] then write(B, 'ZREM', P .. ':rk:' .. f[1], id) end
  if f[2] and f[2] ~= '' then write(B, 'ZREM', P .. ':rkk:' .. f[1] .. '\0' .. f[2], id) end
end

-- Progress a beat or a checkpoint carries: given is '1' (the numbers) or 'm'
-- and a message (the numbers with it); done and total '' for none.
local function progressed(k, given, done, total)
  redis.call('HDEL', k, 'pdone', 'ptotal', 'pmsg')
  if done ~= '' then redis.call('HSET', k, 'pdone', done) end
  if total ~= '' then redis.call('HSET', k, 'ptotal', total) end
  if given ~= '1' then redis.call('HSET', k, 'pmsg', string.sub(given, 2)) end
end

local function fenced(k, token)
  local f = redis.call('HMGET', k, 'state', 'lease_token')
  return f[1] == 'running' and f[2] == token
end

-- What an outcome reads, in one HMGET: its fence first.
local FINISHING = {'state', 'lease_token', 'cancel', 'attempts', 'max_attempts', 'hand_backs', 'queue',
  'priority', 'kind', 'ckey', 'tenant', 'unique', 'deb', 'dependents', 'worker', 'aat', 'oseq',
  'lsn', 'waiters'}

-- One outcome: code (S, F, R, C, Z, W), id, token, then five values. Returns
-- the state it left the job in (nil when fenced out), and whether the job
-- has dependents. `B`: the batch's index writes.
local function finish_one(P, now, free, B, code, id, token, a, b, c, d, e)
  local k = jkey(P, id)
  local f = redis.call('HMGET', k, unpack(FINISHING))
  if not (f[1] == 'running' and f[2] == token) then return nil end
  local cancel = f[3] == '1'
  local attempts, max = tonumber(f[4]), tonumber(f[5])
  local queue, kind, tenant = f[7], f[9], f[11]
  local state, outcome, err = nil, nil, nil
  -- The job hash's writes, gathered into one HSET and one HDEL.
  local sets, dels = {}, {}
  unlease(P, id, k, {kind, f[10], queue}, dels, B)
  local function put(name, value) sets[#sets + 1] = name; sets[#sets + 1] = value end
  local requeue_at = nil
  if code == 'S' then
    state, outcome = 'succeeded', 'succeeded'
    if b == '1' then
      redis.call('SET', P .. ':res:' .. id, a)
      put('result_ext', '1')
      dels[#dels + 1] = 'result'
    else
      put('result', a)
      dels[#dels + 1] = 'result_ext'
    end
    if c ~= '' then
      if d ~= '' then put('pdone', d) else dels[#dels + 1] = 'pdone' end
      if e ~= '' then put('ptotal', e) else dels[#dels + 1] = 'ptotal' end
      if c ~= '1' then put('pmsg', string.sub(c, 2)) else dels[#dels + 1] = 'pmsg' end
    end
    dels[#dels + 1] = 'error'
  elseif code == 'F' then
    put('error', a)
    err = a
    if cancel then state = 'cancelled'
    elseif b == '' or attempts >= max then state = 'failed'
    else state = 'queued'; requeue_at = now + tonumber(b) end
    outcome = state == 'queued' and 'retried' or state
  elseif code == 'R' then
    local hand_backs = tonumber(f[6] or '0')
    local free_one = hand_backs < tonumber(free)
    if free_one then attempts = attempts - 1 end
    put('hand_backs', hand_backs + 1)
    put('attempts', attempts)
    if cancel then state = 'cancelled'
    elseif not free_one and attempts >= max then
      state = 'failed'
      err = 'handed back ' .. (hand_backs + 1) .. ' times without finishing'
      put('error', err)
    else state = 'queued'; requeue_at = now end
    outcome = state == 'queued' and 'released' or state
  elseif code == 'C' then
    state, outcome = 'cancelled', 'cancelled'
  elseif code == 'W' then  -- suspended: waits (waits.lua), the attempt not counted
    put('attempts', attempts - 1)
    if cancel then state = 'cancelled' else state = 'waiting' end
    outcome = state == 'waiting' and 'snoozed' or state
  else  -- Z: snoozed
    put('attempts', attempts - 1)
    if cancel then state = 'cancelled' else state = 'queued'; requeue_at = now + tonumber(a) end
    outcome = state == 'queued' and 'snoozed' or state
  end
  put('state', state)
  put('updated_at', now)
  if requeue_at then put('run_at', requeue_at)
  elseif state == 'waiting' then put('run_at', now)
  else put('finished_at', now) end
  if f[16] then dels[#dels + 1] = 'aat' end
  redis.call('HDEL', k, unpack(dels))
  redis.call('HSET', k, unpack(sets))
  -- A job that waits may be queued again within this call (its signal or its
  -- jobs already there, or a job of this batch it waits for ending), by writes
  -- not batched: its move to waiting must be in place before them.
  moved(P, id, 'running', state, kind, tenant, state ~= 'waiting' and B or nil)
  if requeue_at then
    queued_in(P, id, queue)
    place(P, id, queue, tonumber(f[8]), requeue_at, now)
  elseif state == 'waiting' then
    suspend_wait(P, id, now, a, b, c)
  else
    ended(P, id, state, now, {tenant, f[12], f[13], f[19]}, true, B)
  end
  if f[16] then
    close_open(P, id, now, outcome, err, tenant, {f[4], f[15], f[16], kind, f[10]}, B)
  else
    close_record(P, id, now, outcome, err, tenant)
  end
  -- A job with output, or one an event stream follows: its listeners hear of
  -- the outcome as of its values (output.lua).
  if f[17] or f[18] then redis.call('PUBLISH', P .. ':out', id) end
  return state, f[14] ~= false
end

-- ARGV from `base`: count, then 8 values an outcome.
local function finish_in(P, args, base, now, free)
  local n = tonumber(args[base])
  local out, succeeded, finished = {}, {}, {}
  local B = batch()
  for i = 0, n - 1 do
    local b = base + 1 + i * 8
    local id = args[b + 1]
    local state, dependents = finish_one(P, now, free, B, args[b], id, args[b + 2], args[b + 3],
      args[b + 4], args[b + 5], args[b + 6], args[b + 7])
    out[#out + 1] = state and 1 or 0
    if state and dependents then
      if state == 'succeeded' then table.insert(succeeded, id)
      elseif state ~= 'queued' and state ~= 'waiting' then table.insert(finished, id) end
    end
  end
  flush(B)
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

-- ARGV: now, lease (ms), then id, token, progress given (see `progressed`),
-- done, total a beat.
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
      if args[b + 2] ~= '' then progressed(k, args[b + 2], args[b + 3], args[b + 4]) end
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
  if args[6] ~= '' then progressed(k, args[6], args[7], args[8]) end
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

-- ARGV: now. Up to SWEEP expired leases taken back: {requeued, failed,
-- cancelled, 1 when there may be more}.
local function rescue_expired(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local ids = redis.call('ZRANGEBYSCORE', P .. ':leases', '-inf', '(' .. now, 'LIMIT', 0, SWEEP)
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
        ended(P, id, state, now, nil, true)
        if has_dependents(P, id) then table.insert(finished, id) end
      end
      counts[state] = counts[state] + 1
    end
  end
  settle(P, {}, finished, now)
  return {counts.queued, counts.failed, counts.cancelled, #ids == SWEEP and 1 or 0}
end

local function cancel_now(P, id, k, f, now, err)
  if f.state == 'queued' then queued_out(P, id, f.queue) end
  unplace(P, id, f.queue, f.rm)
  redis.call('HSET', k, 'state', 'cancelled', 'finished_at', now, 'updated_at', now)
  moved(P, id, f.state, 'cancelled')
  if err then redis.call('HSET', k, 'error', err) end
  ended(P, id, 'cancelled', now)
end

-- ARGV: now. Up to SWEEP jobs past their expiry cancelled: {how many, 1 when
-- there may be more}.
local function expire_jobs(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local ids = redis.call('ZRANGEBYSCORE', P .. ':exp', '-inf', now, 'LIMIT', 0, SWEEP)
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
  return {n, #ids == SWEEP and 1 or 0}
end

redis.register_function('chit_claim', claim)
redis.register_function('chit_claim_woken', claim_woken)
redis.register_function('chit_finish', finish)
redis.register_function('chit_finish_claim', finish_claim)
redis.register_function('chit_heartbeat', heartbeat)
redis.register_function('chit_checkpoint', checkpoint)
redis.register_function('chit_save_step', save_step)
redis.register_function('chit_rescue_expired', rescue_expired)
redis.register_function('chit_expire_jobs', expire_jobs)
