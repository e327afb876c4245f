-- An operator's changes (cancel, update, replay, prune) and reads of one job.

-- Operating

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

-- Replay puts back at most one job per unique key, as the SQL stores do: none
-- while another holds the key, else only the newest of those that failed or
-- were cancelled (whichever order a replay reads them in).
local function unique_free(P, id, tenant, uniq)
  if not uniq then return true end
  local holder = live(P, ':uniq', tenant .. '\0' .. uniq, ACTIVE)
  if holder ~= nil and holder ~= id then return false end
  for _, other in ipairs(redis.call('ZRANGE', P .. ':uk:' .. tenant .. '\0' .. uniq, '(' .. id, '+', 'BYLEX')) do
    local state = redis.call('HGET', jkey(P, other), 'state')
    if state == 'failed' or state == 'cancelled' or ACTIVE[state] then return false end
  end
  return true
end

local function reset(P, id, k, f, now)
  local pending = tonumber(f.deps_pending or '0')
  local state = pending > 0 and 'waiting' or 'queued'
  redis.call('HDEL', k, 'error', 'result', 'result_ext', 'checkpoint', 'pdone', 'ptotal', 'pmsg',
    'lease_token', 'lease_expires_at', 'finished_at', 'started_at', 'expires_at', 'deb', 'deb_until',
    'wsig', 'wjobs', 'wuntil')
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

local REPLAY_FIELDS = {'state', 'tenant', 'unique', 'deps_pending', 'queue', 'priority', 'kind', 'error', 'finished_at',
  'run_on', 'expires_at', 'started_at'}

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
        local pending = tonumber(f.deps_pending or '0')
        if f.run_on == 'finished' then
          -- Counted pending again, but one started since its release or its
          -- own replay (it runs, waits for a signal, or is queued to go on or
          -- to try again): it runs on the outcome it was released by.
          local live = f.state == 'running' or (f.state == 'waiting' and pending == 0)
            or (f.state == 'queued' and f.started_at)
          if not live then
            redis.call('HSET', k, 'deps_pending', pending + 1, 'updated_at', now)
          end
          if f.state == 'queued' and not live then
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
          -- Its end took it out of P:exp: back in, or it would never expire.
          if f.expires_at then redis.call('ZADD', P .. ':exp', f.expires_at, d) end
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
    ids = redis.call('ZREVRANGEBYSCORE', failed_set(P, tenant), '+inf', low)
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

-- The sets of terminal jobs by finish, which prune reads: P:failed holds
-- only what a library before version 11 wrote.
local ENDED = {':done', ':fin:succeeded', ':fin:failed', ':failed'}

-- ARGV: now, age (ms), batch. Deletes up to `batch` terminal jobs finished
-- before now - age. Returns the jobs deleted, and the entries read (fewer
-- than `batch`: none is left).
local function prune(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local before, batch = '(' .. (now - tonumber(args[2])), tonumber(args[3])
  local ids = {}
  for _, set in ipairs(ENDED) do
    if #ids >= batch then break end
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. set, '-inf', before, 'LIMIT', 0, batch - #ids)) do
      ids[#ids + 1] = id
    end
  end
  local deleted = 0
  for _, id in ipairs(ids) do
    local k = jkey(P, id)
    local f = redis.call('HMGET', k, 'tenant', 'idem', 'state', 'wf', 'unique')
    if f[3] == 'succeeded' or f[3] == 'failed' or f[3] == 'cancelled' then
      deleted = deleted + 1
      held_by(P, ':idem', f[1], f[2], id)
      if f[5] then redis.call('ZREM', P .. ':uk:' .. f[1] .. '\0' .. f[5], id) end
      if f[4] then redis.call('ZREM', P .. ':wf:' .. f[4], id) end
      moved(P, id, f[3], nil)
      for _, name in ipairs({'succeeded', 'failed'}) do
        redis.call('ZREM', P .. ':fin:' .. name .. '\0' .. f[1], id)
      end
      for _, rec in ipairs(redis.call('LRANGE', P .. ':att:' .. id, 0, -1)) do
        local a = cjson.decode(rec)
        if a.outcome then
          local g = a.kind .. '\0' .. a.outcome .. '\0' .. f[1]
          local dur = P .. ':dur:' .. g
          -- This library's entry, else one library 24 and before wrote.
          if redis.call('ZREM', dur, dur_member(id, a)) == 1 or redis.call('ZREM', dur, id .. ':' .. a.attempt) == 1 then
            if redis.call('EXISTS', dur) == 0 then
              redis.call('HDEL', P .. ':dursum', g)
            else
              redis.call('HINCRBYFLOAT', P .. ':dursum', g, -(a.finished_at - a.started_at) / 1000)
            end
          end
        end
      end
      redis.call('DEL', k, P .. ':res:' .. id, P .. ':att:' .. id, P .. ':st:' .. id, P .. ':sto:' .. id,
        P .. ':o:' .. id, P .. ':sig:' .. id)
      redis.call('ZREM', P .. ':wu', id)
    end
    -- The entry goes whatever its job's state (a replay took it out of the
    -- sets already), so the next batch does not read it again.
    for _, set in ipairs(ENDED) do redis.call('ZREM', P .. set, id) end
  end
  return {deleted, #ids}
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

-- ARGV: a SCAN cursor ("0" to begin). One step of bringing the prefix's keys
-- to this version's layout, on the first open after an upgrade: P:all goes
-- (before version 23 every job was in it too; nothing reads it now), and
-- P:uk is built for the jobs a library before version 24 stored with a unique
-- key, 1,000 job keys a call. Returns {1} once done (then P:layout says so,
-- and later calls return at once), else {0, cursor}.
local function upgrade_layout(keys, args)
  local P = keys[1]
  if tonumber(redis.call('GET', P .. ':layout') or '0') >= 24 then return {1} end
  if args[1] == '0' then redis.call('UNLINK', P .. ':all') end
  local pattern = string.gsub(P, '([%*%?%[%]\\])', '\\%1') .. ':j:*'
  local r = redis.call('SCAN', args[1], 'MATCH', pattern, 'COUNT', 1000)
  for _, k in ipairs(r[2]) do
    local f = redis.call('HMGET', k, 'id', 'tenant', 'unique')
    if f[1] and f[3] then redis.call('ZADD', P .. ':uk:' .. (f[2] or '') .. '\0' .. f[3], 0, f[1]) end
  end
  if r[1] ~= '0' then return {0, r[1]} end
  redis.call('SET', P .. ':layout', VERSION)
  return {1}
end

redis.register_function('chit_upgrade_layout', upgrade_layout)
redis.register_function('chit_cancel', cancel)
redis.register_function('chit_update', update)
redis.register_function('chit_replay', replay)
redis.register_function('chit_prune', prune)
redis.register_function{function_name = 'chit_get', callback = get, flags = RO}
redis.register_function{function_name = 'chit_get_result', callback = get_result, flags = RO}
redis.register_function{function_name = 'chit_dependencies', callback = dependencies, flags = RO}
redis.register_function{function_name = 'chit_lookup', callback = lookup, flags = RO}
redis.register_function{function_name = 'chit_next_due', callback = next_due, flags = RO}
