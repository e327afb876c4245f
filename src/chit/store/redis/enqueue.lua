-- Enqueue (chit.store.redis.core's enqueue_many): keys, debounce, workflows.

-- Enqueue

-- The fields of a job, by position in ARGV (`width` of them a job).
local J_ID, J_KIND, J_QUEUE, J_PRIORITY, J_PAYLOAD, J_MAX, J_RUN_AT, J_TENANT = 0, 1, 2, 3, 4, 5, 6, 7
-- A batch whose jobs have none of the fields below comes with the eight above
-- alone (width SHORT): each argument costs a call half a microsecond.
local SHORT = 8
local J_IDEM, J_HASH, J_CKEY, J_TIMEOUT, J_EXPIRES_AT, J_EXPIRES_IN, J_UNIQUE = 8, 9, 10, 11, 12, 13, 14
local J_TRACE, J_DEB, J_DEB_DELAY, J_DEB_BOUND, J_COST = 15, 16, 17, 18, 19
-- Workflows only (width 29)
local J_STATE, J_ERROR, J_PENDING, J_WF, J_REF, J_RUN_ON, J_DEPENDS, J_DEPENDENTS, J_DEPENDED = 20, 21, 22, 23, 24, 25, 26, 27, 28

local function live(P, index, k, states)
  local id = redis.call('HGET', P .. index, k)
  if not id then return nil end
  local f = redis.call('HMGET', jkey(P, id), 'state', 'started_at', 'kind')
  if f[1] and states[f[1]] and not (index == ':deb' and f[2]) then return id, f[3] end
  return nil
end

-- Field `j` of the job at `b`, one of those a SHORT batch leaves out.
local function extra(args, b, width, j)
  if width == SHORT then return '' end
  return args[b + j]
end

local function opt(fields, name, v)
  if v ~= nil and v ~= '' then fields[#fields + 1] = name; fields[#fields + 1] = v end
end

-- A new job (ARGV from `b`) stored, with its indexes. Fields go as the
-- strings the caller sent: a number would be formatted again for each.
local function store_job(P, args, b, width, id, now, nows)
  local queue, priority, kind, tenant = args[b + J_QUEUE], args[b + J_PRIORITY], args[b + J_KIND], args[b + J_TENANT]
  local state = 'queued'
  if width > 20 and args[b + J_STATE] ~= '' then state = args[b + J_STATE] end
  local run_at, run_at_s = now, nows
  local deb = nonempty(extra(args, b, width, J_DEB))
  if deb then
    run_at = now + math.floor(tonumber(args[b + J_DEB_DELAY]) * 1000)
    run_at_s = string.format('%d', run_at)
  elseif args[b + J_RUN_AT] ~= '' then
    run_at_s = args[b + J_RUN_AT]
    run_at = tonumber(run_at_s)
  end
  local g = kind .. '\0' .. tenant .. '\0' .. extra(args, b, width, J_CKEY)
  -- Its ready-set member, in the one HSET (`placed` below puts it there).
  local m = nil
  if state == 'queued' and run_at <= now then m = member(run_at, id) end
  local fields = {'id', id, 'kind', kind, 'queue', queue, 'priority', priority,
    'payload', args[b + J_PAYLOAD], 'state', state, 'attempts', '0',
    'max_attempts', args[b + J_MAX], 'run_at', run_at_s, 'created_at', nows, 'updated_at', nows,
    'tenant', tenant, 'g', g}
  local idem, uniq = nonempty(extra(args, b, width, J_IDEM)), nonempty(extra(args, b, width, J_UNIQUE))
  opt(fields, 'idem', idem)
  opt(fields, 'rhash', extra(args, b, width, J_HASH))
  opt(fields, 'ckey', extra(args, b, width, J_CKEY))
  opt(fields, 'timeout', extra(args, b, width, J_TIMEOUT))
  opt(fields, 'unique', uniq)
  opt(fields, 'tp', extra(args, b, width, J_TRACE))
  opt(fields, 'cost', extra(args, b, width, J_COST))
  local expires_at = nonempty(extra(args, b, width, J_EXPIRES_AT))
  local expires_in = extra(args, b, width, J_EXPIRES_IN)
  if expires_in ~= '' then
    expires_at = string.format('%d', now + math.floor(tonumber(expires_in) * 1000))
  end
  opt(fields, 'expires_at', expires_at)
  if deb then
    opt(fields, 'deb', deb)
    opt(fields, 'deb_until', string.format('%d', now + math.floor(tonumber(args[b + J_DEB_BOUND]) * 1000)))
  end
  if width > 20 then
    opt(fields, 'error', args[b + J_ERROR])
    opt(fields, 'deps_pending', args[b + J_PENDING])
    opt(fields, 'wf', args[b + J_WF])
    opt(fields, 'ref', args[b + J_REF])
    opt(fields, 'run_on', args[b + J_RUN_ON])
    opt(fields, 'depends_on', args[b + J_DEPENDS])
    opt(fields, 'dependents', args[b + J_DEPENDENTS])
  end
  if state == 'cancelled' then opt(fields, 'finished_at', nows) end
  opt(fields, 'rm', m)
  redis.call('HSET', jkey(P, id), unpack(fields))
  moved(P, id, nil, state, kind, tenant)
  if uniq then redis.call('ZADD', P .. ':uk:' .. tenant .. '\0' .. uniq, 0, id) end
  if idem then redis.call('HSET', P .. ':idem', tenant .. '\0' .. idem, id) end
  if width > 20 and args[b + J_WF] ~= '' then redis.call('ZADD', P .. ':wf:' .. args[b + J_WF], 0, id) end
  if state == 'cancelled' then
    redis.call('ZADD', P .. ':done', now, id)
    return
  end
  if uniq then redis.call('HSET', P .. ':uniq', tenant .. '\0' .. uniq, id) end
  if deb then redis.call('HSET', P .. ':deb', tenant .. '\0' .. deb, id) end
  if expires_at then redis.call('ZADD', P .. ':exp', expires_at, id) end
  if state == 'queued' then
    queued_in(P, id, queue, g)
    placed(P, id, queue, priority, run_at, now, m, g)
  end
  redis.call('SADD', P .. ':queues', queue)
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
  local again = {}  -- jobs this very call stored before: i -> their created_at
  for i = 0, n - 1 do
    local b = 3 + i * width + 1
    local id, tenant = args[b + J_ID], args[b + J_TENANT]
    local idem = nonempty(extra(args, b, width, J_IDEM))
    local uniq, deb = nonempty(extra(args, b, width, J_UNIQUE)), nonempty(extra(args, b, width, J_DEB))
    -- What the SQL stores' CHECK constraints refuse, refused here before any write.
    local max_attempts = tonumber(args[b + J_MAX])
    if not max_attempts or max_attempts < 1 then
      return {'invalid', i, 'max_attempts must be at least 1, not ' .. args[b + J_MAX]}
    end
    local code, holder, rhash = 'c', id, false
    -- A job id is new to every call: one already stored means this call ran
    -- before and its reply was lost (redis-py's cluster client sends a call
    -- again when its connection breaks). The job stands as it was stored;
    -- nothing is written twice.
    again[i] = redis.call('HGET', jkey(P, id), 'created_at')
    if again[i] then
      idem, uniq, deb = nil, nil, nil
    end
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
    -- A job stored cancelled (its dependency failed) neither meets nor holds
    -- a unique key, as SQL's index of active jobs does not hold it.
    if width > 20 and args[b + J_STATE] == 'cancelled' then uniq = nil end
    if code == 'c' and uniq then
      local k = tenant .. '\0' .. uniq
      local found = taken.uniq[k] or live(P, ':uniq', k, ACTIVE)
      if found then code, holder = 'u', found end
    end
    if code ~= 'c' and width > 20 and args[b + J_DEPENDED] == '1' then return {'depended', i} end
    if code == 'c' then
      taken.idem_b = taken.idem_b or {}
      taken.deb_b = taken.deb_b or {}
      if idem then taken.idem[tenant .. '\0' .. idem] = id; taken.idem_b[tenant .. '\0' .. idem] = b end
      if deb then taken.deb[tenant .. '\0' .. deb] = id; taken.deb_b[tenant .. '\0' .. deb] = b end
      if uniq then taken.uniq[tenant .. '\0' .. uniq] = id end
    end
    out[#out + 1] = code
    out[#out + 1] = holder
    -- A created job's third item is its created_at (the caller's stored time).
    out[#out + 1] = again[i] or (code == 'c' and now or rhash)
  end
  -- Then the writes.
  local created = {}
  local nows = string.format('%d', now)  -- formatted once: each number passed is a printf
  for i = 0, n - 1 do
    local b = 3 + i * width + 1
    local code, id = out[i * 3 + 1], args[b + J_ID]
    if code == 'c' and not again[i] then
      created[id] = true
      store_job(P, args, b, width, id, now, nows)
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
  if width > 20 then
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

redis.register_function('chit_enqueue', enqueue)
