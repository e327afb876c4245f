"""The Redis store (Redis 7.0+, Valkey 7.2+): every transition one server-side
function of one Lua library (chit.lua and its parts), keys under one hash tag.
`pip install 'chit[redis]'`; docs/redis.md."""

from chit.store.redis.store import RedisStore

__all__ = ["RedisStore"]
