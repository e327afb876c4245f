"""API keys, the dashboard's sessions and the server's secrets on Redis
(`ApiKeys`, `Sessions`, `Secrets`; access.lua): one call each. A session
expires by itself at its absolute expiry (PEXPIREAT)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from chit.errors import StoreError
from chit.jobs import ApiKey, NewApiKey
from chit.store.capabilities import ApiKeys, NewSession, Secrets, Sessions, StoredSession
from chit.store.redis import codec
from chit.store.redis.codec import clock, loads
from chit.store.redis.core import RedisCore


def _api_key(stored: str) -> ApiKey:
    k: dict[str, Any] = loads(stored)
    revoked = k.get("revoked_at")
    return ApiKey(
        k["id"],
        k["name"],
        k["tenant"],
        tuple(k["scopes"].split()),
        codec.at(str(k["created_at"])),
        None if revoked is None else codec.at(str(revoked)),
    )


class AccessRedis(RedisCore, ApiKeys, Sessions, Secrets):
    def create_api_key(self, key: NewApiKey) -> ApiKey:
        args = ["", key.id, key.name, key.tenant, " ".join(key.scopes), key.key_hash]
        stored = self.redis.fcall("chit_create_key", *args)
        if isinstance(stored, list):  # as the SQL stores' primary key and unique hash refuse it
            raise StoreError(f"Redis at {self.redis.name}: a key with that {stored[1]} is stored")
        return _api_key(stored)

    def find_api_key(self, key_hash: str) -> ApiKey | None:
        stored = self.redis.fcall_ro("chit_find_key", key_hash)
        return None if stored is None else _api_key(stored)

    def list_api_keys(self, include_revoked: bool = False) -> list[ApiKey]:
        key = f"{self.prefix}:keys"
        keys = [_api_key(str(v)) for v in self.redis.run(lambda: self.redis.client.hvals(key))]
        return sorted(
            (k for k in keys if include_revoked or k.revoked_at is None),
            key=lambda k: (k.created_at, k.id),
        )

    def revoke_api_key(self, key_id: str) -> bool:
        return bool(self.redis.fcall("chit_revoke_key", "", key_id))

    def create_session(self, session: NewSession, now: datetime | None = None) -> None:
        idle, most = int(session.idle_seconds * 1000), int(session.max_seconds * 1000)
        args = [clock(now), session.id_hash, session.key_hash, idle, most]
        self.redis.fcall("chit_create_session", *args)

    def touch_session(
        self, id_hash: str, idle_seconds: float, now: datetime | None = None
    ) -> StoredSession | None:
        args = [clock(now), id_hash, int(idle_seconds * 1000)]
        out = self.redis.fcall("chit_touch_session", *args)
        if not out:
            return None
        key_hash, created, idle, expires = out
        return StoredSession(
            key_hash, codec.at(str(created)), codec.at(str(idle)), codec.at(str(expires))
        )

    def delete_session(self, id_hash: str) -> bool:
        return bool(self.redis.fcall("chit_delete_session", id_hash))

    def server_secret(self, name: str, new: str) -> str:
        return str(self.redis.fcall("chit_server_secret", name, new))
