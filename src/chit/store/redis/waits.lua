-- Waits (DESIGN.md "Long AI tasks"): what a Suspended outcome stores, signals,
-- what a waiting job's rerun reads, and the deadline's wake-up. A job waiting
-- for jobs is queued by wake_waiters_of (chit.lua) when the last one ends.

-- A job finish_one just left `waiting`: what it waits for (sig, jobs: "" for
-- none; timeout: ms, "" for none); queued at once when that is there already.
local function suspend_wait(P, id, now, sig, jobs, timeout)
  local k = jkey(P, id)
  local sets, dels = {'run_at', now}, {}
  local function field(name, value)
    if value == '' then dels[#dels + 1] = name
    else sets[#sets + 1] = name; sets[#sets + 1] = value end
  end
  field('wsig', sig)
  field('wjobs', jobs)
  field('wuntil', timeout == '' and '' or tostring(now + tonumber(timeout)))
  redis.call('HSET', k, unpack(sets))
  if #dels > 0 then redis.call('HDEL', k, unpack(dels)) end
  if timeout ~= '' then redis.call('ZADD', P .. ':wu', now + tonumber(timeout), id) end
  local ready = sig ~= '' and redis.call('HEXISTS', P .. ':sig:' .. id, sig) == 1
  if jobs ~= '' then
    local open = false
    for _, x in ipairs(cjson.decode(jobs)) do
      local xk = jkey(P, x)
      local f = redis.call('HMGET', xk, 'state', 'waiters')
      -- Named on an ended job too: a retry may open it again.
      if f[1] then
        if not TERMINAL[f[1]] then open = true end
        local list = f[2] and cjson.decode(f[2]) or {}
        local known = false
        for _, w in ipairs(list) do if w == id then known = true end end
        if not known then
          list[#list + 1] = id
          redis.call('HSET', xk, 'waiters', cjson.encode(list))
        end
      end
    end
    ready = ready or not open
  end
  if ready then resume(P, id, now) end
end

-- ARGV: now, id, name, data (JSON), tenant. {status, data}: created (and the
-- job queued if it waited for it), existing (the stored data), finished, not_found.
local function signal(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local id, name, data = args[2], args[3], args[4]
  local k = jkey(P, id)
  local f = redis.call('HMGET', k, 'state', 'tenant', 'wsig')
  if not f[1] or not tenant_ok(f[2], args[5]) then return {'not_found'} end
  if TERMINAL[f[1]] then return {'finished'} end
  local s = P .. ':sig:' .. id
  if redis.call('HSETNX', s, name, data) == 0 then return {'existing', redis.call('HGET', s, name)} end
  if f[1] == 'waiting' and f[3] == name then resume(P, id, now) end
  return {'created', data}
end

-- ARGV: id, name. The stored data, "" when the wait for it timed out, or nil.
local function received(keys, args)
  return redis.call('HGET', keys[1] .. ':sig:' .. args[1], args[2])
end

-- ARGV: now, id, ids (JSON). {timed out (1/0), then id, kind, state, tenant,
-- result, external, error (false: none) for each job of ids that exists}.
local function waited_jobs(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local w = redis.call('HMGET', jkey(P, args[2]), 'wjobs', 'wuntil')
  local out = {(w[1] == args[3] and w[2] and tonumber(w[2]) <= now) and 1 or 0}
  for _, x in ipairs(cjson.decode(args[3])) do
    local f = redis.call('HMGET', jkey(P, x), 'kind', 'state', 'tenant', 'result', 'result_ext', 'error')
    if f[1] then
      out[#out + 1] = x
      for i = 1, 6 do out[#out + 1] = f[i] or '' end
    end
  end
  return out
end

-- ARGV: now. Waiting jobs past their deadline: queued (a wait for a signal
-- leaves its timed-out mark). How many.
local function wake_waiters(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local n = 0
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. ':wu', '-inf', now, 'LIMIT', 0, 1000)) do
    redis.call('ZREM', P .. ':wu', id)
    local f = redis.call('HMGET', jkey(P, id), 'state', 'wsig', 'wuntil')
    if f[1] == 'waiting' and f[3] and tonumber(f[3]) <= now then
      if f[2] then redis.call('HSETNX', P .. ':sig:' .. id, f[2], '') end
      resume(P, id, now)
      n = n + 1
    end
  end
  return n
end

redis.register_function('chit_signal', signal)
redis.register_function{function_name = 'chit_received', callback = received, flags = RO}
redis.register_function{function_name = 'chit_waited_jobs', callback = waited_jobs, flags = RO}
redis.register_function('chit_wake_waiters', wake_waiters)
