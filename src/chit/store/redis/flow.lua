-- Flow control (chit.store.redis.flow): limits, pauses, and a flow claim's reads.
-- Flow claims (chit/store/flow.py): the reads a FlowClaim asks, and its claim.

-- ARGV: now, queue. The queue's due scheduled jobs made ready, then its
-- groups with queued jobs (flat: group, count).
local function groups(keys, args)
  local P = keys[1]
  promote(P, args[2], clock(args[1]))
  return redis.call('HGETALL', P .. ':qg:' .. args[2])
end

-- ARGV: now, queue, group, limit. Up to `limit` due jobs of the group not
-- expired, in claim order: id, priority, run_at (ms) of each.
local function group_jobs(keys, args)
  local P = keys[1]
  local now, limit = clock(args[1]), tonumber(args[4])
  local gr = gkey(P, args[2], args[3])
  local out, n, offset, size = {}, 0, 0, 0
  while n < limit do
    -- As claim_in's pages: as long as the jobs still wanted, then twice as long.
    size = math.min(SCAN, math.max(size * 2, limit - n))
    local page = redis.call('ZRANGE', gr, offset, offset + size - 1, 'WITHSCORES')
    for i = 1, #page, 2 do
      local m = page[i]
      local id = string.sub(m, 14)
      local f = redis.call('HMGET', jkey(P, id), 'expires_at', 'started_at', 'cost')
      if not (f[1] and not f[2] and tonumber(f[1]) <= now) then
        out[#out + 1] = id
        out[#out + 1] = page[i + 1]
        out[#out + 1] = member_time(m)
        out[#out + 1] = f[3] or '1'
        n = n + 1
        if n >= limit then break end
      end
    end
    if #page < 2 * size then break end
    offset = offset + size
  end
  return out
end

-- ARGV: now, kind, key ("" for the kind), window (ms, "" for none). Running
-- jobs (leases not expired), starts within the window, and the milliseconds
-- until the oldest of those leaves it (-1 without one).
local function in_use(keys, args)
  local P = keys[1]
  local now, kind, key = clock(args[1]), args[2], args[3]
  local rk, sk = P .. ':rk:' .. kind, P .. ':sk:' .. kind
  if key ~= '' then
    rk, sk = P .. ':rkk:' .. kind .. '\0' .. key, P .. ':skk:' .. kind .. '\0' .. key
  end
  local running = redis.call('ZCOUNT', rk, '(' .. now, '+inf')
  if args[4] == '' then return {running, 0, -1} end
  local since = now - tonumber(args[4])
  local started_n = redis.call('ZCOUNT', sk, '(' .. since, '+inf')
  local oldest = redis.call('ZRANGEBYSCORE', sk, '(' .. since, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local frees = -1
  if #oldest > 0 then frees = tonumber(oldest[2]) - since end
  return {running, started_n, frees}
end

-- ARGV: now, kind, key ("" for the kind), window (ms). A budget's use: the
-- cost of the starts within the window (P:ck, P:ckk: token NUL cost), and the
-- milliseconds until the oldest of those leaves it (-1 without one).
local function spent(keys, args)
  local P = keys[1]
  local now, kind, key = clock(args[1]), args[2], args[3]
  local ck = P .. ':ck:' .. kind
  if key ~= '' then ck = P .. ':ckk:' .. kind .. '\0' .. key end
  local since = now - tonumber(args[4])
  local starts = redis.call('ZRANGEBYSCORE', ck, '(' .. since, '+inf', 'WITHSCORES')
  local sum = 0
  for i = 1, #starts, 2 do
    local m = starts[i]
    sum = sum + tonumber(string.sub(m, string.find(m, '\0', 1, true) + 1))
  end
  local frees = -1
  if #starts > 0 then frees = tonumber(starts[2]) - since end
  return {sum, frees}
end

-- ARGV: now, id, token, cost. The running attempt's cost replaced with what
-- it spent, fenced on the lease: 1 when the token holds the job, else 0.
local function report_cost(keys, args)
  local P = keys[1]
  local id, token, cost = args[2], args[3], args[4]
  local k = jkey(P, id)
  local f = redis.call('HMGET', k, 'state', 'lease_token', 'kind', 'ckey', 'acost')
  if f[1] ~= 'running' or f[2] ~= token then return 0 end
  if f[5] then  -- started under a budget: its start's entries carry the cost
    local old, new = token .. '\0' .. f[5], token .. '\0' .. cost
    local sets = {P .. ':ck:' .. f[3]}
    if f[4] and f[4] ~= '' then sets[2] = P .. ':ckk:' .. f[3] .. '\0' .. f[4] end
    for _, z in ipairs(sets) do
      local at = redis.call('ZSCORE', z, old)
      if at then
        redis.call('ZREM', z, old)
        redis.call('ZADD', z, at, new)
      end
    end
    redis.call('HSET', k, 'acost', cost)
  end
  return 1
end

-- ARGV: now, worker, lease (ms), ids. The jobs a flow claim chose, in that
-- order, skipping any no longer ready (another claim took it) or expired.
local function claim_ids(keys, args)
  local P = keys[1]
  local now, worker, lease_ms = clock(args[1]), args[2], tonumber(args[3])
  local out = {}
  for i = 4, #args do
    local id = args[i]
    local f = redis.call('HMGET', jkey(P, id), 'state', 'rm', 'queue', 'expires_at', 'started_at')
    if f[1] == 'queued' and f[2] and not (f[4] and not f[5] and tonumber(f[4]) <= now) then
      redis.call('ZREM', P .. ':r:' .. f[3], f[2])
      local row = start(P, id, worker, lease_ms, now, next_token(P, id), f[2])
      for _, v in ipairs(row) do out[#out + 1] = v end
    end
  end
  return out
end

-- ARGV: token, milliseconds, kinds. Lock every kind or none: 1 when locked.
local function lock(keys, args)
  local P = keys[1]
  local taken = {}
  for i = 3, #args do
    local k = P .. ':lock:' .. args[i]
    if not redis.call('SET', k, args[1], 'NX', 'PX', args[2]) then
      for _, t in ipairs(taken) do redis.call('DEL', t) end
      return 0
    end
    taken[#taken + 1] = k
  end
  return 1
end

-- ARGV: token, kinds. Unlock those this token holds.
local function unlock(keys, args)
  local P = keys[1]
  for i = 2, #args do
    local k = P .. ':lock:' .. args[i]
    if redis.call('GET', k) == args[1] then redis.call('DEL', k) end
  end
  return 1
end

-- Limits and pauses

local LIMIT_FIELDS = {'concurrency', 'rate', 'rate_seconds', 'key_concurrency', 'key_rate', 'key_rate_seconds'}

-- ARGV: now, mode (declare, set, clear), kind, limits (JSON of the fields
-- given). Returns 1 when something was there to clear (clear), else 1.
local function write_limits(keys, args)
  local P = keys[1]
  local now, mode, kind = clock(args[1]), args[2], args[3]
  local stored = redis.call('HGET', P .. ':limits', kind)
  local row = stored and cjson.decode(stored) or {}
  local result = 1
  if mode == 'declare' then
    local new = cjson.decode(args[4])
    if next(new) == nil then
      row.code, row.code_at = nil, nil
    else
      local old = row.code and cjson.encode(row.code) or ''
      row.code = new
      if old ~= cjson.encode(new) then row.code_at = now end
    end
  elseif mode == 'set' then
    local op = row.operator or {}
    for name, v in pairs(cjson.decode(args[4])) do op[name] = v end
    row.operator, row.operator_at = op, now
  else
    if not row.operator then result = 0 end
    row.operator, row.operator_at = nil, nil
  end
  if row.code == nil and row.operator == nil then
    redis.call('HDEL', P .. ':limits', kind)
  else
    redis.call('HSET', P .. ':limits', kind, cjson.encode(row))
  end
  return result
end

-- ARGV: now, pause (1) or resume (""), scope, name: 1 when it changed.
local function pausing(keys, args)
  local P = keys[1]
  local field = args[3] .. '\0' .. args[4]
  if args[2] == '1' then return redis.call('HSETNX', P .. ':pauses', field, clock(args[1])) end
  return redis.call('HDEL', P .. ':pauses', field)
end

-- ARGV: now, kinds. Each kind's running jobs and its due queued ones (flat):
-- those ready, and those due still in a scheduled set (a delayed job, a
-- retry), which only a claim moves to the ready ones.
local function limit_usage(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local queues = redis.call('SMEMBERS', P .. ':queues')
  local due = {}
  for _, queue in ipairs(queues) do
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. ':s:' .. queue, '-inf', now)) do
      local kind = redis.call('HGET', jkey(P, id), 'kind')
      if kind then due[kind] = (due[kind] or 0) + 1 end
    end
  end
  local out = {}
  for i = 2, #args do
    local kind = args[i]
    local waiting = due[kind] or 0
    for _, queue in ipairs(queues) do
      local groups_ = redis.call('HKEYS', P .. ':qg:' .. queue)
      for _, g in ipairs(groups_) do
        if string.sub(g, 1, #kind + 1) == kind .. '\0' then
          waiting = waiting + redis.call('ZCARD', gkey(P, queue, g))
        end
      end
    end
    out[#out + 1] = redis.call('ZCOUNT', P .. ':rk:' .. kind, '(' .. now, '+inf')
    out[#out + 1] = waiting
  end
  return out
end


redis.register_function('chit_groups', groups)
redis.register_function{function_name = 'chit_group_jobs', callback = group_jobs, flags = RO}
redis.register_function{function_name = 'chit_in_use', callback = in_use, flags = RO}
redis.register_function{function_name = 'chit_spent', callback = spent, flags = RO}
redis.register_function('chit_report_cost', report_cost)
redis.register_function('chit_claim_ids', claim_ids)
redis.register_function('chit_lock', lock)
redis.register_function('chit_unlock', unlock)
redis.register_function('chit_write_limits', write_limits)
redis.register_function('chit_pausing', pausing)
redis.register_function{function_name = 'chit_limit_usage', callback = limit_usage, flags = RO}
