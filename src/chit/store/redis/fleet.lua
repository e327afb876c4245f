-- The fleet (chit.store.redis.fleet): P:workers (id -> JSON), P:wstale
-- (ids by when they go stale).

-- ARGV: now, id, beat (JSON: host, pid, queues, kinds, slots, busy), stale after (ms).
local function beat_worker(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local stale_at = now + tonumber(args[4])
  local beat = cjson.decode(args[3])
  local stored = redis.call('HGET', P .. ':workers', args[2])
  beat.started_at = stored and cjson.decode(stored).started_at or now
  beat.seen_at = now
  redis.call('HSET', P .. ':workers', args[2], cjson.encode(beat))
  redis.call('ZADD', P .. ':wstale', stale_at, args[2])
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. ':wstale', '-inf', '(' .. now)) do
    redis.call('HDEL', P .. ':workers', id)
    redis.call('ZREM', P .. ':wstale', id)
    -- A wake token a crash left between a worker's wait and its claim.
    redis.call('DEL', P .. ':wk:' .. id)
  end
  return 1
end

local function forget_worker(keys, args)
  local P = keys[1]
  redis.call('ZREM', P .. ':wstale', args[1])
  redis.call('DEL', P .. ':wk:' .. args[1])
  return redis.call('HDEL', P .. ':workers', args[1])
end

-- ARGV: now. Each live worker: id, then its beat (JSON).
local function live_workers(keys, args)
  local P = keys[1]
  local out = {}
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. ':wstale', clock(args[1]), '+inf')) do
    local beat = redis.call('HGET', P .. ':workers', id)
    if beat then out[#out + 1] = id; out[#out + 1] = beat end
  end
  return out
end

-- ARGV: now, tenant. Each queue: name, ready, scheduled, running, oldest ready run_at (-1).
local function queue_counts(keys, args)
  local P = keys[1]
  local now, tenant = clock(args[1]), args[2]
  local out = {}
  local function mine(id) return tenant_ok(redis.call('HGET', jkey(P, id), 'tenant'), tenant) end
  for _, queue in ipairs(redis.call('SMEMBERS', P .. ':queues')) do
    local ready, scheduled, running, oldest = 0, 0, 0, -1
    local s = P .. ':s:' .. queue
    if tenant == '' then
      ready = redis.call('ZCARD', P .. ':r:' .. queue) + redis.call('ZCOUNT', s, '-inf', now)
      scheduled = redis.call('ZCOUNT', s, '(' .. now, '+inf')
      running = redis.call('SCARD', P .. ':run:' .. queue)
    else
      -- By the tenant's groups' counts and ready sets, not by reading every
      -- job of the queue: its queued jobs less those ready are scheduled.
      local queued = 0
      local groups, counts = tenant_groups(P, queue, tenant)
      for _, g in ipairs(groups) do
        queued = queued + counts[g]
        ready = ready + redis.call('ZCARD', gkey(P, queue, g))
      end
      -- Due jobs a claim has not yet moved to the ready sets.
      for _, id in ipairs(redis.call('ZRANGEBYSCORE', s, '-inf', now)) do
        if mine(id) then ready = ready + 1 end
      end
      scheduled = math.max(queued - ready, 0)
      for _, id in ipairs(redis.call('SMEMBERS', P .. ':run:' .. queue)) do
        if mine(id) then running = running + 1 end
      end
    end
    -- The oldest ready: the first due of the ready set or of the scheduled
    -- one (a page at a time, not every due job of a backlog each poll).
    if tenant ~= '' then
      local _, at = tenant_oldest(P, queue, tenant, now)
      oldest = at or -1
    else
      for _, key in ipairs({P .. ':d:' .. queue, s}) do
        local _, at = first_due(P, key, now, tenant)
        if at and (oldest < 0 or at < oldest) then oldest = at end
      end
    end
    if ready + scheduled + running > 0 then
      out[#out + 1] = {queue, ready, scheduled, running, oldest}
    end
  end
  return {now, out}
end

redis.register_function('chit_beat_worker', beat_worker)
redis.register_function('chit_forget_worker', forget_worker)
redis.register_function{function_name = 'chit_live_workers', callback = live_workers, flags = RO}
redis.register_function{function_name = 'chit_queue_counts', callback = queue_counts, flags = RO}
