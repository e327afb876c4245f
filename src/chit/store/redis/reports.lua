-- Reports (chit.store.redis.reports): what the API, the dashboard and the
-- metrics read. The indexes are kept by the functions that move jobs:
-- P:bs:<state> (ids, in id order: newest last; every job is in one), P:cnt
-- (jobs by state, kind and tenant), P:d:<queue> (ready jobs by due time),
-- P:fin:<state> (and per tenant: succeeded or failed jobs by finish),
-- P:dur:<kind NUL outcome NUL tenant> (finished attempts by duration) and
-- P:dursum.

local function job_flat(P, id)
  return redis.call('HGETALL', jkey(P, id))
end

local STATES = {'waiting', 'queued', 'running', 'succeeded', 'failed', 'cancelled'}

-- An iterator of the ids of jobs in `states` from `high` down to `low`
-- (ZREVRANGEBYLEX bounds), newest first. Each state's set is read a page at
-- a time and the pages merged, so each id is read once: all jobs (every job
-- is in one of the six sets) need no index of their own for an enqueue to write.
local function newest_first(P, states, high, low)
  local sets = {}
  for _, state in ipairs(states) do
    sets[#sets + 1] = {key = P .. ':bs:' .. state, high = high, page = {}, at = 1, last = false}
  end
  local function head(s)
    if s.at > #s.page then
      if s.last then return nil end
      s.page, s.at = redis.call('ZREVRANGEBYLEX', s.key, s.high, low, 'LIMIT', 0, SCAN), 1
      s.last = #s.page < SCAN
      if #s.page == 0 then return nil end
      s.high = '(' .. s.page[#s.page]
    end
    return s.page[s.at]
  end
  -- Ids come in runs of one state (the old finished, the new queued): the set
  -- that gave the last one gives the next while its head is above the others'.
  local from, bound = nil, nil
  return function()
    local id = from and head(from)
    if id and (not bound or id > bound) then
      from.at = from.at + 1
      return id
    end
    local best
    best, from, bound = nil, nil, nil
    for _, s in ipairs(sets) do
      id = head(s)
      if id then
        if not best or id > best then best, bound, from = id, best, s
        elseif not bound or id > bound then bound = id end
      end
    end
    if from then from.at = from.at + 1 end
    return best
  end
end

-- Ids a list call reads at most: a filter few jobs match (a rare kind among
-- millions) is read over several calls, none holding the server for long.
local LIST_READS = 5000
-- Entries of a hash one HSCAN step of a search looks at.
local SCAN_STEP = 1000

-- ARGV: now, state, kind, queue, tenant, since (ms), cursor, limit ("" for
-- none). The time, the id to go on after ("" when every id was read or
-- `limit` jobs found), then up to `limit` jobs (flat hashes) newest first.
local function list(keys, args)
  local P = keys[1]
  local state, kind, queue, tenant = args[2], args[3], args[4], args[5]
  local since, cursor, limit = tonumber(args[6]), args[7], tonumber(args[8])
  local out = {clock(args[1]), ''}
  if limit < 1 then return out end
  local high = cursor ~= '' and ('(' .. cursor) or '+'
  local read = 0
  for id in newest_first(P, state ~= '' and {state} or STATES, high, '-') do
    local f = redis.call('HMGET', jkey(P, id), 'kind', 'queue', 'tenant', 'created_at')
    if f[1] and (kind == '' or f[1] == kind) and (queue == '' or f[2] == queue)
        and tenant_ok(f[3], tenant) and (not since or tonumber(f[4]) >= since) then
      out[#out + 1] = job_flat(P, id)
      if #out - 2 >= limit then break end
    end
    read = read + 1
    if read >= LIST_READS then
      out[2] = id
      break
    end
  end
  return out
end

-- ARGV: now, ids. The time, then each stored job (flat).
local function get_many(keys, args)
  local P = keys[1]
  local out = {clock(args[1])}
  for i = 2, #args do
    local flat = job_flat(P, args[i])
    if #flat > 0 then out[#out + 1] = flat end
  end
  return out
end

-- ARGV: now, tenant, text, HSCAN cursor ("0" to start). The time, the cursor
-- to go on from ("0" once the scan is over), then the jobs (flat hashes) of
-- the tenant whose idempotency key is `text`. A tenant's is one HGET; all
-- tenants' a scan of P:idem (tenant NUL key), one HSCAN step a call, so a
-- large one never holds the server for its whole length.
local function search_keys(keys, args)
  local P = keys[1]
  local tenant, text = args[2], args[3]
  local out = {clock(args[1]), '0'}
  local ids = {}
  if tenant ~= '' then
    local id = redis.call('HGET', P .. ':idem', string.sub(tenant, 2) .. '\0' .. text)
    if id then ids[1] = id end
  else
    local pattern = '*\0' .. string.gsub(text, '([%*%?%[%]\\])', '\\%1')
    local r = redis.call('HSCAN', P .. ':idem', args[4], 'MATCH', pattern, 'COUNT', SCAN_STEP)
    out[2] = r[1]
    for i = 2, #r[2], 2 do ids[#ids + 1] = r[2][i] end
  end
  for _, id in ipairs(ids) do
    local f = job_flat(P, id)
    if #f > 0 then out[#out + 1] = f end
  end
  return out
end

-- ARGV: now, tenant, low, high (an id prefix's bounds), the id to go on
-- after ("" to start), limit. The time, the id to go on after next ("" when
-- every id was read or `limit` jobs found), then up to `limit` of the
-- tenant's jobs (flat hashes) newest first. The limit counts the tenant's
-- jobs only, as the SQL stores' LIMIT does after their tenant filter; a call
-- reads LIST_READS ids at most, so others' ids under a short prefix never
-- hold the server for the whole walk.
local function search_ids(keys, args)
  local P = keys[1]
  local tenant, limit = args[2], tonumber(args[6])
  local out = {clock(args[1]), ''}
  local high = args[5] ~= '' and ('(' .. args[5]) or ('[' .. args[4])
  local read = 0
  for id in newest_first(P, STATES, high, '[' .. args[3]) do
    if #out - 2 >= limit then break end
    if tenant_ok(redis.call('HGET', jkey(P, id), 'tenant'), tenant) then
      local f = job_flat(P, id)
      if #f > 0 then out[#out + 1] = f end
    end
    read = read + 1
    if read >= LIST_READS then
      out[2] = id
      break
    end
  end
  return out
end

local function first_line(err)
  local nl = string.find(err, '\n', 1, true)
  if nl then return string.sub(err, 1, nl - 1) end
  return err
end

-- The rank in `key` of the first entry after (score, member), whether or not
-- that member is still there (replayed, pruned): a sorted set's order is by
-- score, then member (ids: of one length, digits and lower-case letters, which
-- Lua's comparison orders as Redis does, by bytes, in every collation).
local function rank_after(key, score, member)
  local r = redis.call('ZRANK', key, member)
  if r then return r + 1 end
  local lo = redis.call('ZCOUNT', key, '-inf', '(' .. score)
  local hi = lo + redis.call('ZCOUNT', key, score, score)
  while lo < hi do  -- the first of the score's members that sorts after it
    local mid = math.floor((lo + hi) / 2)
    if redis.call('ZRANGE', key, mid, mid)[1] < member then lo = mid + 1 else hi = mid end
  end
  return lo
end

-- ARGV: tenant, the finish time and id of the last job read ("" to start),
-- how many to read. The failed jobs of the tenant (or anyone's) by finish, a
-- bounded number a call (the caller's FAILURE_READS), so a long retention of
-- failures never holds the server for the whole read: the last job's finish
-- time and id ("" when every job was read), then this call's groups by kind
-- and first line: kind, line, count, first seen, last seen, latest id.
local function failures(keys, args)
  local P = keys[1]
  local key, reads = failed_set(P, args[1]), tonumber(args[4])
  local first = args[2] == '' and 0 or rank_after(key, args[2], args[3])
  local page = redis.call('ZRANGE', key, first, first + reads - 1, 'WITHSCORES')
  local out = {'', ''}
  if #page == 2 * reads then out = {page[#page], page[#page - 1]} end
  local groups, order = {}, {}
  for i = 1, #page, 2 do
    local id = page[i]
    local f = redis.call('HMGET', jkey(P, id), 'kind', 'error', 'finished_at', 'tenant', 'state')
    if f[5] == 'failed' and tenant_ok(f[4], args[1]) then
      local line = first_line(f[2] or '')
      local key = f[1] .. '\0' .. line
      local g = groups[key]
      local at = tonumber(f[3])
      if not g then
        g = {f[1], line, 0, at, at, id}
        groups[key] = g
        order[#order + 1] = key
      end
      g[3] = g[3] + 1
      if at < g[4] then g[4] = at end
      if at > g[5] then g[5] = at end
      if id > g[6] then g[6] = id end
    end
  end
  for _, key in ipairs(order) do out[#out + 1] = groups[key] end
  return out
end

-- The first job of `key` (ids by due time) of the tenant's (or anyone's)
-- due by `bound` (a score, or '(' and one), and when; read a page at a time.
local function first_due(P, key, bound, tenant)
  local offset = 0
  while true do
    local d = redis.call('ZRANGEBYSCORE', key, '-inf', bound, 'WITHSCORES', 'LIMIT', offset, SCAN)
    for i = 1, #d, 2 do
      if tenant_ok(redis.call('HGET', jkey(P, d[i]), 'tenant'), tenant) then return d[i], tonumber(d[i + 1]) end
    end
    if #d < 2 * SCAN then return nil end
    offset = offset + SCAN
  end
end

-- Whether (id, at) comes before (best, best_at): due earlier, or at the same
-- time with a smaller id, as SQL's ORDER BY run_at, id.
local function before(id, at, best, best_at)
  return not best or at < best_at or (at == best_at and id < best)
end

-- The tenant's (arg: NUL and its name) groups of a queue with queued jobs,
-- and each one's count of them.
local function tenant_groups(P, queue, tenant)
  local want, out, counts = string.sub(tenant, 2), {}, {}
  local flat = redis.call('HGETALL', P .. ':qg:' .. queue)
  for i = 1, #flat, 2 do
    local g = flat[i]
    local a = string.find(g, '\0', 1, true)
    local b = a and string.find(g, '\0', a + 1, true)
    if b and string.sub(g, a + 1, b - 1) == want then
      out[#out + 1] = g
      counts[g] = tonumber(flat[i + 1])
    end
  end
  return out, counts
end

-- A tenant's queued job of one queue due longest (id, run_at), or nil,
-- without reading other tenants' jobs: the first entry of each priority of
-- each of its groups' ready sets (ordered by priority, then due time and id),
-- and its due jobs a claim has not yet moved out of the scheduled set.
local function tenant_oldest(P, queue, tenant, now)
  local best, best_at = first_due(P, P .. ':s:' .. queue, now, tenant)
  for _, g in ipairs(tenant_groups(P, queue, tenant)) do
    local key = gkey(P, queue, g)
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    while #first > 0 do
      local id, at = string.sub(first[1], 14), member_time(first[1])
      if before(id, at, best, best_at) then best, best_at = id, at end
      first = redis.call('ZRANGE', key, '(' .. first[2], '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
    end
  end
  return best, best_at
end

-- The queued job of the tenant's (or anyone's) due longest, over every queue:
-- in its ready set's index by due time (P:d), or still in the scheduled set
-- (P:s) though due, as a delayed job or a retry is until a claim moves it. A
-- tenant's by its own groups (`tenant_oldest`).
local function oldest_due(P, now, tenant)
  local best, best_at = nil, nil
  for _, queue in ipairs(redis.call('SMEMBERS', P .. ':queues')) do
    if tenant ~= '' then
      local id, at = tenant_oldest(P, queue, tenant, now)
      if id and before(id, at, best, best_at) then best, best_at = id, at end
    else
      for _, index in ipairs({':d:', ':s:'}) do
        local bound = best_at and string.format('%d', best_at) or now
        local id, at = first_due(P, P .. index .. queue, bound, tenant)
        if id and before(id, at, best, best_at) then best, best_at = id, at end
      end
    end
  end
  return best
end

local function each_tenant_key(P, base, tenant)
  if tenant == '' then return base end
  return base .. '\0' .. string.sub(tenant, 2)
end

-- ARGV: now, tenant. The jobs by state, kind and tenant (P:cnt, flat), the
-- last hour's failed and succeeded jobs, the oldest due queued job's run_at
-- (or -1), and the running jobs past their lease.
local function stats(keys, args)
  local P = keys[1]
  local now, tenant = clock(args[1]), args[2]
  local hour = now - 3600000
  local failed = redis.call('ZCOUNT', each_tenant_key(P, P .. ':fin:failed', tenant), hour, '+inf')
  local succeeded = redis.call('ZCOUNT', each_tenant_key(P, P .. ':fin:succeeded', tenant), hour, '+inf')
  local oldest = -1
  local first = oldest_due(P, now, tenant)
  if first then oldest = tonumber(redis.call('HGET', jkey(P, first), 'run_at')) end
  local stale = 0
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. ':leases', '-inf', '(' .. now)) do
    if tenant_ok(redis.call('HGET', jkey(P, id), 'tenant'), tenant) then stale = stale + 1 end
  end
  return {redis.call('HGETALL', P .. ':cnt'), failed, succeeded, oldest, stale, now}
end

-- ARGV: now, tenant. Each succeeded or failed job of the last hour: state, kind, finished_at.
local function finished_per_minute(keys, args)
  local P = keys[1]
  local now, tenant = clock(args[1]), args[2]
  local out = {}
  for _, state in ipairs({'succeeded', 'failed'}) do
    local key = each_tenant_key(P, P .. ':fin:' .. state, tenant)
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', key, now - 3600000, '+inf')) do
      local f = redis.call('HMGET', jkey(P, id), 'kind', 'finished_at')
      out[#out + 1] = state
      out[#out + 1] = f[1]
      out[#out + 1] = f[2]
    end
  end
  return out
end

-- ARGV: now, tenant. The time, then the queued job due longest (flat), if any.
local function oldest_queued(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local first = oldest_due(P, now, args[2])
  if first then return {now, job_flat(P, first)} end
  return {now}
end

-- ARGV: now, tenant, limit. The time, then running jobs past their lease, longest first.
local function stale_jobs(keys, args)
  local P = keys[1]
  local now, limit = clock(args[1]), tonumber(args[3])
  local out = {now}
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. ':leases', '-inf', '(' .. now)) do
    if #out - 1 >= limit then break end
    if tenant_ok(redis.call('HGET', jkey(P, id), 'tenant'), args[2]) then
      out[#out + 1] = job_flat(P, id)
    end
  end
  return out
end

-- ARGV: tenant, bounds. For each kind, outcome and tenant with finished
-- attempts: the group, count, seconds in all, then a count per bucket; then
-- the running jobs by kind and tenant (P:cnt's running entries).
local function attempt_stats(keys, args)
  local P = keys[1]
  local tenant = args[1]
  local out = {}
  local sums = redis.call('HGETALL', P .. ':dursum')
  for i = 1, #sums, 2 do
    local g = sums[i]
    local t = string.match(g, '^[^%z]*%z[^%z]*%z(.*)$')
    if tenant_ok(t, tenant) then
      local key = P .. ':dur:' .. g
      local n = redis.call('ZCARD', key)
      if n > 0 then
        local row = {g, n, sums[i + 1]}
        local low = '-inf'
        for b = 2, #args do
          row[#row + 1] = redis.call('ZCOUNT', key, low, args[b])
          low = '(' .. args[b]
        end
        row[#row + 1] = redis.call('ZCOUNT', key, low, '+inf')
        out[#out + 1] = row
      end
    end
  end
  return {out, redis.call('HGETALL', P .. ':cnt')}
end

-- ARGV: now, tenant, kind, first line. Replay every failed job of that group.
local function replay_failure_group(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local n, with_dependents = 0, {}
  for _, id in ipairs(redis.call('ZREVRANGE', failed_set(P, args[2]), 0, -1)) do
    local k = jkey(P, id)
    local f = read(k)
    if f.state == 'failed' and f.kind == args[3] and tenant_ok(f.tenant, args[2])
        and first_line(f.error or '') == args[4] and unique_free(P, id, f.tenant, f.unique) then
      reset(P, id, k, f, now)
      n = n + 1
      if has_dependents(P, id) then table.insert(with_dependents, id) end
    end
  end
  replayed(P, with_dependents, now)
  return n
end

-- ARGV: id. Each attempt record (JSON), oldest first: the open one is the
-- job hash's (see aat).
local function attempts(keys, args)
  local P = keys[1]
  local out = redis.call('LRANGE', P .. ':att:' .. args[1], 0, -1)
  local f = redis.call('HMGET', jkey(P, args[1]), 'aat', 'attempts', 'worker')
  if f[1] then
    out[#out + 1] = cjson.encode({attempt = tonumber(f[2]), worker = f[3], started_at = tonumber(f[1])})
  end
  return out
end

-- ARGV: id. Each step: name, then "attempt|created_at|result", in the order stored.
local function steps(keys, args)
  local P = keys[1]
  local out = {}
  for _, name in ipairs(redis.call('LRANGE', P .. ':sto:' .. args[1], 0, -1)) do
    out[#out + 1] = name
    out[#out + 1] = redis.call('HGET', P .. ':st:' .. args[1], name)
  end
  return out
end

redis.register_function{function_name = 'chit_list', callback = list, flags = RO}
redis.register_function{function_name = 'chit_get_many', callback = get_many, flags = RO}
redis.register_function{function_name = 'chit_search_keys', callback = search_keys, flags = RO}
redis.register_function{function_name = 'chit_search_ids', callback = search_ids, flags = RO}
redis.register_function{function_name = 'chit_failures', callback = failures, flags = RO}
redis.register_function{function_name = 'chit_stats', callback = stats, flags = RO}
redis.register_function{function_name = 'chit_finished_per_minute', callback = finished_per_minute, flags = RO}
redis.register_function{function_name = 'chit_oldest_queued', callback = oldest_queued, flags = RO}
redis.register_function{function_name = 'chit_stale_jobs', callback = stale_jobs, flags = RO}
redis.register_function{function_name = 'chit_attempt_stats', callback = attempt_stats, flags = RO}
redis.register_function('chit_replay_failure_group', replay_failure_group)
redis.register_function{function_name = 'chit_attempts', callback = attempts, flags = RO}
redis.register_function{function_name = 'chit_steps', callback = steps, flags = RO}
