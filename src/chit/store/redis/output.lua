-- Output (JobContext.emit): P:o:<id> a list of "attempt|at|value", the value
-- of seq N at index N-1 (seqs run 1, 2, ... per job, never reused); the job
-- hash counts them in oseq and their bytes in obytes. A job that never emits
-- has neither. Listeners hear of each batch on P:out (its job id), published
-- by the function that writes it, and of the claims and outcomes of such a
-- job and of one an event stream follows (lsn; lifecycle.lua).

-- ARGV: now, id, token, bytes, then the values (JSON). The last seq, or nil
-- when fenced out (nothing written).
local function append_output(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local id = args[2]
  local k = jkey(P, id)
  if not fenced(k, args[3]) then return nil end
  local n = #args - 4
  if n == 0 then return tonumber(redis.call('HGET', k, 'oseq') or 0) end  -- no head for nothing
  local last = redis.call('HINCRBY', k, 'oseq', n)
  redis.call('HINCRBY', k, 'obytes', tonumber(args[4]))
  local head = redis.call('HGET', k, 'attempts') .. '|' .. now .. '|'
  local items = {}
  for i = 1, n do
    items[#items + 1] = head .. args[4 + i]
    if #items == 500 or i == n then  -- unpack's stack is bounded: push in slices
      redis.call('RPUSH', P .. ':o:' .. id, unpack(items))
      items = {}
    end
  end
  redis.call('PUBLISH', P .. ':out', id)
  return last
end

-- ARGV: id, tenant. {last seq, bytes}, or nil for an unknown job (or another tenant's).
local function output_used(keys, args)
  local f = redis.call('HMGET', jkey(keys[1], args[1]), 'state', 'tenant', 'oseq', 'obytes')
  if not f[1] or not tenant_ok(f[2], args[2]) then return nil end
  return {tonumber(f[3] or 0), tonumber(f[4] or 0)}
end

-- ARGV: id, after, limit, tenant. The items after that seq, or nil as output_used.
local function output(keys, args)
  local P = keys[1]
  local f = redis.call('HMGET', jkey(P, args[1]), 'state', 'tenant')
  if not f[1] or not tenant_ok(f[2], args[4]) then return nil end
  -- Seqs after `after` (not below 0: the caller numbers them from it), as
  -- SQL's seq > after: none for a limit of 0.
  local after, limit = tonumber(args[2]), tonumber(args[3])
  if limit <= 0 then return {} end
  return redis.call('LRANGE', P .. ':o:' .. args[1], after, after + limit - 1)
end

-- ARGV: ids of jobs an event stream follows: their claims and outcomes are
-- published on P:out from now on (lsn), as a job's with output are.
local function listen(keys, args)
  for _, id in ipairs(args) do
    local k = jkey(keys[1], id)
    if redis.call('EXISTS', k) == 1 then redis.call('HSET', k, 'lsn', '1') end
  end
  return 0
end

-- ARGV: ids. Flat {id, last seq} for those with output.
local function output_heads(keys, args)
  local out = {}
  for _, id in ipairs(args) do
    local seq = redis.call('HGET', jkey(keys[1], id), 'oseq')
    if seq then out[#out + 1] = id; out[#out + 1] = seq end
  end
  return out
end

redis.register_function('chit_append_output', append_output)
redis.register_function('chit_listen', listen)
redis.register_function{function_name = 'chit_output_used', callback = output_used, flags = RO}
redis.register_function{function_name = 'chit_output', callback = output, flags = RO}
redis.register_function{function_name = 'chit_output_heads', callback = output_heads, flags = RO}
