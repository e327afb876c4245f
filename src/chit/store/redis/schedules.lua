-- Schedules (chit.store.redis.schedules): P:sch (name -> JSON row, times in
-- ms), P:sdue:<kind> (the unpaused schedules of a kind by next slot).

local SCHEDULE_RULE = {'cron', 'every', 'tz'}
local SCHEDULE_DECLARED = {'kind', 'payload', 'cron', 'every', 'tz', 'catch_up', 'source'}

local function same(a, b, names)
  for _, name in ipairs(names) do
    if a[name] ~= b[name] then return false end
  end
  return true
end

local function schedule_due(P, row, was)
  if was then redis.call('ZREM', P .. ':sdue:' .. was.kind, was.name) end
  if not row.paused then redis.call('ZADD', P .. ':sdue:' .. row.kind, row.next_at, row.name) end
end

-- A schedule's row (JSON) and its last job's state (or false).
local function schedule_out(P, row)
  local state = false
  if row.last_job_id then state = redis.call('HGET', jkey(P, row.last_job_id), 'state') end
  return {cjson.encode(row), state}
end

-- ARGV: now, row (JSON: the declared fields and next_at, from the first slot
-- from now). A changed rule starts again from that slot; the same keeps its own.
local function declare_schedule(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local new = cjson.decode(args[2])
  local stored = redis.call('HGET', P .. ':sch', new.name)
  local row
  if not stored then
    row = new
    row.paused, row.created_at, row.updated_at = false, now, now
    schedule_due(P, row, nil)
  else
    row = cjson.decode(stored)
    if same(row, new, SCHEDULE_DECLARED) then return schedule_out(P, row) end
    local was = {kind = row.kind, name = row.name}
    if not same(row, new, SCHEDULE_RULE) then row.next_at = new.next_at end
    for _, name in ipairs(SCHEDULE_DECLARED) do row[name] = new[name] end
    row.updated_at = now
    schedule_due(P, row, was)
  end
  redis.call('HSET', P .. ':sch', row.name, cjson.encode(row))
  return schedule_out(P, row)
end

-- ARGV: names ("": every schedule). Each row and last job state, by name.
local function get_schedules(keys, args)
  local P = keys[1]
  local rows = {}
  if #args == 0 then
    rows = redis.call('HVALS', P .. ':sch')
  else
    for _, name in ipairs(args) do
      local stored = redis.call('HGET', P .. ':sch', name)
      if stored then rows[#rows + 1] = stored end
    end
  end
  local out = {}
  for _, stored in ipairs(rows) do out[#out + 1] = schedule_out(P, cjson.decode(stored)) end
  return out
end

local function remove_schedule(keys, args)
  local P = keys[1]
  local stored = redis.call('HGET', P .. ':sch', args[1])
  if not stored then return 0 end
  local row = cjson.decode(stored)
  redis.call('ZREM', P .. ':sdue:' .. row.kind, row.name)
  return redis.call('HDEL', P .. ':sch', args[1])
end

-- ARGV: now, name, paused (1/""), next_at (resuming: the first slot from now).
local function pause_schedule(keys, args)
  local P = keys[1]
  local stored = redis.call('HGET', P .. ':sch', args[2])
  if not stored then return {} end
  local row = cjson.decode(stored)
  local paused = args[3] == '1'
  if row.paused ~= paused then
    row.paused = paused
    if not paused then row.next_at = tonumber(args[4]) end
    row.updated_at = clock(args[1])
    schedule_due(P, row, {kind = row.kind, name = row.name})
    redis.call('HSET', P .. ':sch', row.name, cjson.encode(row))
  end
  return schedule_out(P, row)
end

-- ARGV: now, limit, kinds. The time, the earliest next slot of these kinds'
-- unpaused schedules ("": none; a slot may be before 1970), then up to `limit`
-- due rows (JSON), most overdue first. A kind named twice counts once.
local function due_schedules(keys, args)
  local P = keys[1]
  local now, limit = clock(args[1]), tonumber(args[2])
  local first, due, seen = nil, {}, {}
  for i = 3, #args do
    local key = P .. ':sdue:' .. args[i]
    if not seen[key] then
      seen[key] = true
      local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
      if #head > 0 and (not first or tonumber(head[2]) < first) then first = tonumber(head[2]) end
      if limit > 0 then
        local names = redis.call('ZRANGEBYSCORE', key, '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
        for j = 1, #names, 2 do due[#due + 1] = {tonumber(names[j + 1]), names[j]} end
      end
    end
  end
  table.sort(due, function(a, b) return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2]) end)
  local out = {now, first or ''}
  for j = 1, math.min(limit, #due) do
    out[#out + 1] = redis.call('HGET', P .. ':sch', due[j][2])
  end
  return out
end

-- ARGV: moves (JSON: name, seen, next_at, last_slot, last_job_id). How many moved.
local function advance_schedules(keys, args)
  local P = keys[1]
  local n = 0
  for _, m in ipairs(cjson.decode(args[1])) do
    local stored = redis.call('HGET', P .. ':sch', m.name)
    if stored then
      local row = cjson.decode(stored)
      if row.next_at == m.seen and not row.paused then
        row.next_at = m.next_at
        if m.last_slot ~= cjson.null then row.last_slot = m.last_slot end
        if m.last_job_id ~= cjson.null then row.last_job_id = m.last_job_id end
        schedule_due(P, row, {kind = row.kind, name = row.name})
        redis.call('HSET', P .. ':sch', row.name, cjson.encode(row))
        n = n + 1
      end
    end
  end
  return n
end

-- ARGV: now, idempotency keys (tenant ''). The time, then the jobs holding them (flat).
local function schedule_runs(keys, args)
  local P = keys[1]
  local out = {clock(args[1])}
  for i = 2, #args do
    local id = redis.call('HGET', P .. ':idem', '\0' .. args[i])
    if id then
      local flat = redis.call('HGETALL', jkey(P, id))
      if #flat > 0 then out[#out + 1] = flat end
    end
  end
  return out
end

redis.register_function('chit_declare_schedule', declare_schedule)
redis.register_function{function_name = 'chit_get_schedules', callback = get_schedules, flags = RO}
redis.register_function('chit_remove_schedule', remove_schedule)
redis.register_function('chit_pause_schedule', pause_schedule)
redis.register_function{function_name = 'chit_due_schedules', callback = due_schedules, flags = RO}
redis.register_function('chit_advance_schedules', advance_schedules)
redis.register_function{function_name = 'chit_schedule_runs', callback = schedule_runs, flags = RO}
