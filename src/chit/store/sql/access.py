"""API keys, the dashboard's sessions and the server's secrets on the SQL
stores (`ApiKeys`, `Sessions`, `Secrets`)."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Any

from chit.jobs import ApiKey, NewApiKey
from chit.store.capabilities import NewSession, StoredSession
from chit.store.sql.base import SQLBase

# How far a dashboard session's idle expiry may lag behind its last request (or
# a tenth of the idle time, if less): a session is written at most once this
# often, not on every page view.
SESSION_TOUCH_SLACK = 60.0


class AccessSQL(SQLBase):
    def _api_key(self, r: Any) -> ApiKey:
        return ApiKey(
            **{name: r[name] for name in ("id", "name", "tenant")},
            scopes=tuple(r["scopes"].split()),
            created_at=self._at(r["created_at"]),
            revoked_at=self.d.when(r["revoked_at"]),
        )

    def create_api_key(self, key: NewApiKey) -> ApiKey:
        params = asdict(key) | {"scopes": " ".join(key.scopes)}
        return self._api_key(self._rows(self.Q["create_api_key"], params, write=True)[0])

    def find_api_key(self, key_hash: str) -> ApiKey | None:
        rows = self._rows(self.Q["find_api_key"], {"key_hash": key_hash})
        return self._api_key(rows[0]) if rows else None

    def list_api_keys(self, include_revoked: bool = False) -> list[ApiKey]:
        rows = self._rows(self.Q["list_api_keys"], {"include_revoked": include_revoked})
        return [self._api_key(r) for r in rows]

    def revoke_api_key(self, key_id: str) -> bool:
        with self._write() as conn:
            revoked = conn.execute(self.Q["revoke_api_key"], {"id": key_id}).rowcount == 1
            # Within the transaction on SQLite; on PostgreSQL (autocommit) just
            # after, which is as safe: a session's key is checked on each request.
            conn.execute(self.Q["delete_key_sessions"], {"id": key_id})
            return revoked

    # The dashboard's sessions

    def create_session(self, session: NewSession, now: datetime | None = None) -> None:
        at = self.d.now(now)
        with self._write() as conn:
            conn.execute(self.Q["prune_sessions"], {"now": at})
            idle, most = self.d.interval(session.idle_seconds), self.d.interval(session.max_seconds)
            params = asdict(session) | {"now": at, "idle": idle, "max": most}
            conn.execute(self.Q["create_session"], params)

    def touch_session(
        self, id_hash: str, idle_seconds: float, now: datetime | None = None
    ) -> StoredSession | None:
        params = {"id_hash": id_hash, "idle": self.d.interval(idle_seconds), "now": self.d.now(now)}
        # Moved at most once a SESSION_TOUCH_SLACK: most requests only read.
        lag = min(SESSION_TOUCH_SLACK, idle_seconds / 10)
        slack = self.d.interval(idle_seconds - lag)
        rows = self._rows(self.Q["find_session"], params | {"slack": slack})
        if rows and not rows[0]["fresh"]:
            rows = self._rows(self.Q["touch_session"], params, write=True)
        if not rows:
            return None
        r = rows[0]
        times = {col: self._at(r[col]) for col in ("created_at", "idle_expires_at", "expires_at")}
        return StoredSession(key_hash=r["key_hash"], **times)

    def delete_session(self, id_hash: str) -> bool:
        return self._changed("delete_session", {"id_hash": id_hash}) == 1

    # Secrets

    def server_secret(self, name: str, new: str) -> str:
        with self._write() as conn:
            conn.execute(self.Q["add_secret"], {"name": name, "value": new})
            [row] = conn.execute(self.Q["get_secret"], {"name": name}).fetchall()
            return str(row["value"])
