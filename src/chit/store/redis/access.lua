-- API keys, the dashboard's sessions and the server's secrets
-- (chit.store.redis.access): P:keys (id -> JSON), P:keyhash (hash -> id),
-- P:sess:<id hash> (a session's hash, gone by itself at its absolute
-- expiry), P:ksess:<key hash> (its sessions' id hashes), P:secrets.

-- ARGV: now, id, name, tenant, scopes, key hash. The key as stored (JSON),
-- or {'taken', 'id' or 'hash'}: a stored key has that id or hash.
local function create_key(keys, args)
  local P = keys[1]
  local key = {id = args[2], name = args[3], tenant = args[4], scopes = args[5],
    key_hash = args[6], created_at = clock(args[1])}
  -- Never over a stored key: its hash would find the new key's record.
  if redis.call('HEXISTS', P .. ':keys', args[2]) == 1 then return {'taken', 'id'} end
  if redis.call('HEXISTS', P .. ':keyhash', args[6]) == 1 then return {'taken', 'hash'} end
  local stored = cjson.encode(key)
  redis.call('HSET', P .. ':keys', args[2], stored)
  redis.call('HSET', P .. ':keyhash', args[6], args[2])
  return stored
end

-- ARGV: key hash. The unrevoked key (JSON), or nil.
local function find_key(keys, args)
  local P = keys[1]
  local id = redis.call('HGET', P .. ':keyhash', args[1])
  if not id then return false end
  local stored = redis.call('HGET', P .. ':keys', id)
  if not stored or cjson.decode(stored).revoked_at then return false end
  return stored
end

-- ARGV: now, id. Revoke, and end its sessions: 1 when it was live.
local function revoke_key(keys, args)
  local P = keys[1]
  local stored = redis.call('HGET', P .. ':keys', args[2])
  if not stored then return 0 end
  local key = cjson.decode(stored)
  local sessions = P .. ':ksess:' .. key.key_hash
  for _, id_hash in ipairs(redis.call('SMEMBERS', sessions)) do
    redis.call('DEL', P .. ':sess:' .. id_hash)
  end
  redis.call('DEL', sessions)
  if key.revoked_at then return 0 end
  key.revoked_at = clock(args[1])
  redis.call('HSET', P .. ':keys', args[2], cjson.encode(key))
  return 1
end

-- ARGV: now, id hash, key hash, idle (ms), max (ms).
local function create_session(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local k = P .. ':sess:' .. args[2]
  local expires = now + tonumber(args[5])
  redis.call('HSET', k, 'key_hash', args[3], 'created_at', now,
    'idle_expires_at', now + tonumber(args[4]), 'expires_at', expires)
  -- Gone by itself at its expiry, on the server's clock (a test's time is not).
  if args[1] == '' then redis.call('PEXPIREAT', k, expires) end
  -- A session gone by its expiry leaves its id in its key's set: each sign-in
  -- takes a few such out, so the set stays about the size of the key's live
  -- sessions rather than growing with every sign-in until the key is revoked.
  local sessions = P .. ':ksess:' .. args[3]
  for _, old in ipairs(redis.call('SRANDMEMBER', sessions, 8)) do
    if redis.call('EXISTS', P .. ':sess:' .. old) == 0 then redis.call('SREM', sessions, old) end
  end
  redis.call('SADD', sessions, args[2])
  return 1
end

-- ARGV: now, id hash, idle (ms). key hash, created, idle expiry, expiry; or {}.
local function touch_session(keys, args)
  local P = keys[1]
  local now = clock(args[1])
  local k = P .. ':sess:' .. args[2]
  local f = redis.call('HMGET', k, 'key_hash', 'created_at', 'idle_expires_at', 'expires_at')
  if not f[1] or tonumber(f[3]) <= now or tonumber(f[4]) <= now then return {} end
  local idle = math.min(now + tonumber(args[3]), tonumber(f[4]))
  redis.call('HSET', k, 'idle_expires_at', idle)
  return {f[1], f[2], idle, f[4]}
end

-- ARGV: id hash. 1 when there was such a session.
local function delete_session(keys, args)
  local P = keys[1]
  local k = P .. ':sess:' .. args[1]
  local key_hash = redis.call('HGET', k, 'key_hash')
  if not key_hash then return 0 end
  redis.call('SREM', P .. ':ksess:' .. key_hash, args[1])
  return redis.call('DEL', k)
end

-- ARGV: name, value. The stored value, `value` stored first if there was none.
local function server_secret(keys, args)
  local P = keys[1]
  redis.call('HSETNX', P .. ':secrets', args[1], args[2])
  return redis.call('HGET', P .. ':secrets', args[1])
end

redis.register_function('chit_create_key', create_key)
redis.register_function{function_name = 'chit_find_key', callback = find_key, flags = RO}
redis.register_function('chit_revoke_key', revoke_key)
redis.register_function('chit_create_session', create_session)
redis.register_function('chit_touch_session', touch_session)
redis.register_function('chit_delete_session', delete_session)
redis.register_function('chit_server_secret', server_secret)
