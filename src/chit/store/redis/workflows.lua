-- Workflows (chit.store.redis.workflows): a workflow's jobs (P:wf:<id>, its
-- job ids, kept by enqueue and prune) and cancelling them.

-- ARGV: workflow id, tenant. Each job's id, ref, kind, state, depends_on, run_on, tenant.
local function workflow(keys, args)
  local P = keys[1]
  local out = {}
  for _, id in ipairs(redis.call('ZRANGE', P .. ':wf:' .. args[1], 0, -1)) do
    local f = redis.call('HMGET', jkey(P, id), 'id', 'ref', 'kind', 'state', 'depends_on', 'run_on', 'tenant')
    if f[1] and tenant_ok(f[7], args[2]) then out[#out + 1] = f end
  end
  return out
end

-- ARGV: now, workflow id, tenant. How many jobs were cancelled or asked to
-- stop; -1 when the workflow is unknown (or another tenant's).
local function cancel_workflow(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local n, found, finished = 0, false, {}
  for _, id in ipairs(redis.call('ZRANGE', P .. ':wf:' .. args[2], 0, -1)) do
    local k = jkey(P, id)
    local f = redis.call('HMGET', k, 'state', 'tenant', 'queue', 'rm')
    if f[1] and tenant_ok(f[2], args[3]) then
      found = true
      if f[1] == 'queued' or f[1] == 'waiting' then
        redis.call('HSET', k, 'cancel', '1')
        cancel_now(P, id, k, {state = f[1], queue = f[3], rm = f[4]}, now, nil)
        if has_dependents(P, id) then table.insert(finished, id) end
        n = n + 1
      elseif f[1] == 'running' then
        redis.call('HSET', k, 'cancel', '1', 'updated_at', now)
        n = n + 1
      end
    end
  end
  settle(P, {}, finished, now)
  if not found then return -1 end
  return n
end

-- ARGV: id, tenant. The job's dependents, oldest first.
local function dependents(keys, args)
  local P = keys[1]
  local f = redis.call('HMGET', jkey(P, args[1]), 'tenant', 'dependents')
  if not f[1] or not tenant_ok(f[1], args[2]) or not f[2] then return {} end
  return cjson.decode(f[2])
end

redis.register_function{function_name = 'chit_workflow', callback = workflow, flags = RO}
redis.register_function('chit_cancel_workflow', cancel_workflow)
redis.register_function{function_name = 'chit_dependents', callback = dependents, flags = RO}
