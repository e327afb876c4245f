"""The store written once, over named queries (`sql/<dialect>/queries.sql`).

A backend subclasses `SQLStore` and gives it what truly differs between
databases: connections and transactions (`_read`, `_write`, `_migrating`), how
a value is sent (`_now`, `_interval`, `_time`, `_array`, `_text`) and read
(`_loads`, `_when`), how a query's fragments are filled in (`_query`,
`_tenant`), and its hot paths: enqueue_many, claim, finish, finish_and_claim,
rescue_expired, list and wait_for_jobs. Everything else is here.

Both backends' connections have `execute(query, params)` returning a cursor
with `fetchone`, `fetchall` and `rowcount`, and rows readable by column name.
"""

from __future__ import annotations

import abc
import builtins
import json
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from chit.errors import StoreError
from chit.ids import id_prefix_range
from chit.jobs import (
    ApiKey,
    Attempt,
    AttemptStats,
    Beat,
    CancelResult,
    Enqueued,
    FailureGroup,
    HeartbeatResult,
    Job,
    MinuteCount,
    NewApiKey,
    NewJob,
    Progress,
    ReplaySelector,
    State,
    StateKindCount,
    Stats,
)
from chit.store import queries
from chit.store import rows as decode
from chit.store.reports import FullStore

# One encoder for every call: json.dumps with options builds a new one each time.
dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def scalar(cursor: Any) -> Any:
    """The first column of the first row, or None."""
    row = cursor.fetchone()
    if row is None:
        return None
    return next(iter(row.values())) if isinstance(row, Mapping) else row[0]


class SQLStore(FullStore):
    dialect: str
    Q: dict[str, str]

    # What a backend provides

    @abc.abstractmethod
    def _read(self) -> AbstractContextManager[Any]:
        """A connection for reading."""

    @abc.abstractmethod
    def _write(self) -> AbstractContextManager[Any]:
        """A connection whose statements in the block commit together."""

    @abc.abstractmethod
    def _migrating(self) -> AbstractContextManager[Any]:
        """A transaction that no other migrator runs beside, with the migrations
        table created."""

    @abc.abstractmethod
    def _run_script(self, conn: Any, script: str) -> None:
        """Run a migration file inside the open transaction."""

    @abc.abstractmethod
    def _now(self, now: datetime | None) -> Any:
        """`now` as the queries take it: the database clock unless a test gives one."""

    @abc.abstractmethod
    def _interval(self, seconds: float) -> Any: ...

    @abc.abstractmethod
    def _time(self, value: datetime) -> Any: ...

    @abc.abstractmethod
    def _array(self, values: Sequence[Any]) -> Any: ...

    @abc.abstractmethod
    def _loads(self, value: Any) -> Any:
        """A JSON column's value."""

    @abc.abstractmethod
    def _when(self, value: Any) -> datetime | None:
        """A time column's value, aware UTC."""

    @abc.abstractmethod
    def _query(self, name: str, **fragments: str) -> Any:
        """The named query with its `{fragments}` filled in."""

    @abc.abstractmethod
    def _tenant(self, tenant: str | None, *, seek: bool = True) -> str:
        """`{tenant}`: every tenant, or an equality on `j.tenant`; without `seek`,
        one that only filters the rows another index finds, where the backend
        has no statistics to tell which index is better."""

    @abc.abstractmethod
    def _prune_batch(self) -> int:
        """Rows deleted per prune statement (the backend's PRUNE_BATCH)."""

    def _text(self, value: str) -> str:
        return value

    def _job(self, row: Any) -> Job:
        return decode.job(row, self._loads, self._when)

    # Schema

    def schema_version(self) -> int:
        with self._read() as conn:
            if not scalar(conn.execute(self.Q["migrations_table_exists"])):
                return 0
            return int(scalar(conn.execute(self.Q["schema_version"])))

    def migrate(self) -> int:
        pending = queries.migrations(self.dialect)
        if self.schema_version() == len(pending):
            return len(pending)
        with self._migrating() as conn:
            current = scalar(conn.execute(self.Q["schema_version"]))
            if current > len(pending):
                raise StoreError(
                    f"database schema is version {current}, newer than this chit "
                    f"({len(pending)}); upgrade chit"
                )
            for version, name, script in pending:
                if version > current:
                    self._run_script(conn, script)
                    conn.execute(self.Q["record_migration"], {"version": version, "name": name})
        return len(pending)

    # Submitting

    def enqueue(self, job: NewJob) -> Enqueued:
        return self.enqueue_many([job])[0]

    # Working

    def heartbeat(
        self, beats: Sequence[Beat], lease_seconds: float, now: datetime | None = None
    ) -> HeartbeatResult:
        if not beats:
            return HeartbeatResult(frozenset(), frozenset())
        payload = dumps(
            [
                {"id": b.job_id, "token": b.lease_token}
                | (
                    {"p": True, "done": b.progress.done, "total": b.progress.total}
                    if b.progress
                    else {}
                )
                for b in beats
            ]
        )
        params = {"beats": payload, "lease": self._interval(lease_seconds), "now": self._now(now)}
        with self._write() as conn:
            rows = conn.execute(self.Q["heartbeat"], params).fetchall()
        return HeartbeatResult(
            held=frozenset(r["id"] for r in rows),
            cancel_requested=frozenset(r["id"] for r in rows if r["cancel_requested"]),
        )

    def checkpoint(
        self,
        job_id: str,
        lease_token: str,
        data: Any,
        progress: Progress | None,
        lease_seconds: float,
        now: datetime | None = None,
    ) -> bool:
        params = {
            "id": job_id,
            "token": lease_token,
            "checkpoint": dumps(data),
            "has_progress": progress is not None,
            "done": progress.done if progress else None,
            "total": progress.total if progress else None,
            "lease": self._interval(lease_seconds),
            "now": self._now(now),
        }
        with self._write() as conn:
            return conn.execute(self.Q["checkpoint"], params).rowcount == 1

    # Reading

    def get(self, job_id: str, tenant: str | None = None) -> Job | None:
        with self._read() as conn:
            row = conn.execute(self.Q["get"], {"id": job_id, "tenant": tenant}).fetchone()
        return None if row is None else self._job(row)

    def get_result(self, job_id: str, tenant: str | None = None) -> tuple[bool, Any]:
        with self._read() as conn:
            row = conn.execute(self.Q["get_result"], {"id": job_id, "tenant": tenant}).fetchone()
        if row is None:
            return False, None
        return True, self._loads(
            row["external_result"] if row["result_external"] else row["result"]
        )

    def attempts(self, job_id: str) -> builtins.list[Attempt]:
        with self._read() as conn:
            rows = conn.execute(self.Q["attempts"], {"id": job_id}).fetchall()
        return [decode.attempt(r, self._when) for r in rows]

    def failures(self, tenant: str | None = None) -> builtins.list[FailureGroup]:
        with self._read() as conn:
            rows = conn.execute(self.Q["failures"], {"tenant": tenant}).fetchall()
        return [decode.failure_group(r, self._when) for r in rows]

    def stats(self, tenant: str | None = None, now: datetime | None = None) -> Stats:
        params = {"tenant": tenant, "now": self._now(now)}
        by_state = {s.value: 0 for s in State}
        by_kind: dict[str, dict[str, int]] = {}
        with self._read() as conn:
            for r in conn.execute(self.Q["stats_by_state_kind"], params).fetchall():
                by_state[r["state"]] += r["n"]
                by_kind.setdefault(r["kind"], {})[r["state"]] = r["n"]
            rows = conn.execute(self.Q["stats_last_hour"], params).fetchall()
            last_hour = {r["state"]: r["n"] for r in rows}
            lag = scalar(conn.execute(self.Q["stats_queue_lag"], params))
            stale = scalar(conn.execute(self.Q["stats_stale"], params))
        return Stats(
            by_state=by_state,
            by_kind=by_kind,
            failed_last_hour=last_hour.get("failed", 0),
            succeeded_last_hour=last_hour.get("succeeded", 0),
            oldest_queued_age=lag,
            stale_running=stale,
        )

    # Operating

    def cancel(self, job_id: str, tenant: str | None = None) -> CancelResult:
        params = {"id": job_id, "tenant": tenant, "now": self._now(None)}
        with self._write() as conn:
            row = conn.execute(self.Q["cancel"], params).fetchone()
            if row is not None:
                if row["state"] == "cancelled":
                    return CancelResult.CANCELLED
                return CancelResult.REQUESTED
            exists = conn.execute(self.Q["job_state"], params).fetchone()
        return CancelResult.ALREADY_FINISHED if exists else CancelResult.NOT_FOUND

    def retry(self, job_id: str, tenant: str | None = None) -> bool:
        return self.replay(ReplaySelector(ids=(job_id,), tenant=tenant)) == 1

    def replay(self, selector: ReplaySelector) -> int:
        tenant = selector.tenant
        params: dict[str, Any] = {"tenant": tenant}
        if selector.ids:
            query: Any = self.Q["replay"]
            params["ids"] = self._array(list(selector.ids))
        else:
            params |= {
                "kind": selector.kind,
                "error_prefix": selector.error_prefix,
                "since": None if selector.since is None else self._time(selector.since),
            }
            # With a kind the tenant is sought on the same index; without, only checked.
            with_kind = selector.kind is not None
            name = "replay_failed_kind" if with_kind else "replay_failed"
            query = self._query(name, tenant=self._tenant(tenant, seek=with_kind))
        with self._write() as conn:
            return len(conn.execute(query, params).fetchall())

    def prune(self, older_than_seconds: float, now: datetime | None = None) -> int:
        batch = self._prune_batch()
        params = {"age": self._interval(-older_than_seconds), "now": self._now(now), "batch": batch}
        deleted = 0
        while True:
            with self._write() as conn:
                count = conn.execute(self.Q["prune"], params).rowcount
            deleted += count
            if count < batch:
                return deleted

    # The HTTP API

    def get_many(self, job_ids: Sequence[str]) -> builtins.list[Job]:
        if not job_ids:
            return []
        with self._read() as conn:
            rows = conn.execute(self.Q["get_many"], {"ids": self._array(list(job_ids))})
            return [self._job(r) for r in rows.fetchall()]

    def attempt_stats(
        self, bounds: Sequence[float], tenant: str | None = None
    ) -> builtins.list[AttemptStats]:
        params = {"bounds": self._array([float(b) for b in bounds]), "tenant": tenant}
        with self._read() as conn:
            rows = conn.execute(self.Q["attempt_stats"], params).fetchall()
        return decode.attempt_stats(rows, len(bounds))

    def create_api_key(self, key: NewApiKey) -> ApiKey:
        params = {
            "id": key.id,
            "name": key.name,
            "tenant": key.tenant,
            "scopes": " ".join(key.scopes),
            "key_hash": key.key_hash,
        }
        with self._write() as conn:
            return decode.api_key(
                conn.execute(self.Q["create_api_key"], params).fetchone(), self._when
            )

    def find_api_key(self, key_hash: str) -> ApiKey | None:
        with self._read() as conn:
            row = conn.execute(self.Q["find_api_key"], {"key_hash": key_hash}).fetchone()
        return None if row is None else decode.api_key(row, self._when)

    def list_api_keys(self, include_revoked: bool = False) -> builtins.list[ApiKey]:
        with self._read() as conn:
            rows = conn.execute(self.Q["list_api_keys"], {"include_revoked": include_revoked})
            return [decode.api_key(r, self._when) for r in rows.fetchall()]

    def revoke_api_key(self, key_id: str) -> bool:
        with self._write() as conn:
            return conn.execute(self.Q["revoke_api_key"], {"id": key_id}).rowcount == 1

    # The dashboard

    def count_jobs(
        self, tenant: str | None = None, cap: int = 10_000
    ) -> builtins.list[StateKindCount]:
        query = self._query("count_by_state_kind", tenant=self._tenant(tenant))
        with self._read() as conn:
            rows = conn.execute(query, {"tenant": tenant, "cap": cap}).fetchall()
        return [
            StateKindCount(State(r["state"]), r["kind"], r["n"], r["n"] >= cap)
            for r in rows
            if r["n"] > 0
        ]

    def finished_per_minute(
        self, tenant: str | None = None, now: datetime | None = None
    ) -> builtins.list[MinuteCount]:
        query = self._query("finished_per_minute", tenant=self._tenant(tenant, seek=False))
        with self._read() as conn:
            rows = conn.execute(query, {"tenant": tenant, "now": self._now(now)}).fetchall()
        return [self._minute(r) for r in rows]

    def _minute(self, r: Any) -> MinuteCount:
        minute = self._when(r["minute"])
        assert minute is not None
        return MinuteCount(minute, r["kind"], State(r["state"]), r["n"])

    def oldest_queued(self, tenant: str | None = None, now: datetime | None = None) -> Job | None:
        query = self._query("oldest_queued", tenant=self._tenant(tenant, seek=False))
        with self._read() as conn:
            row = conn.execute(query, {"tenant": tenant, "now": self._now(now)}).fetchone()
        return None if row is None else self._job(row)

    def stale_jobs(
        self, tenant: str | None = None, limit: int = 20, now: datetime | None = None
    ) -> builtins.list[Job]:
        query = self._query("stale_jobs", tenant=self._tenant(tenant))
        params = {"tenant": tenant, "now": self._now(now), "limit": limit}
        with self._read() as conn:
            return [self._job(r) for r in conn.execute(query, params).fetchall()]

    def search(self, text: str, tenant: str | None = None, limit: int = 50) -> builtins.list[Job]:
        text = self._text(text.strip())
        if not text:
            return []
        term = self._tenant(tenant)
        found: dict[str, Job] = {}
        with self._read() as conn:
            query = self._query("search_idempotency_key", tenant=term)
            params: dict[str, Any] = {"key": text, "tenant": tenant, "limit": limit}
            found |= {r["id"]: self._job(r) for r in conn.execute(query, params).fetchall()}
            bounds = id_prefix_range(text)
            if bounds is not None:
                query = self._query("search_id_prefix", tenant=term)
                params = {"low": bounds[0], "high": bounds[1], "tenant": tenant, "limit": limit}
                found |= {r["id"]: self._job(r) for r in conn.execute(query, params).fetchall()}
        return sorted(found.values(), key=lambda j: j.id, reverse=True)[:limit]

    def replay_failure_group(self, kind: str, error: str, tenant: str | None = None) -> int:
        query = self._query("replay_failure_group", tenant=self._tenant(tenant))
        params = {"kind": kind, "error": self._text(error), "tenant": tenant}
        with self._write() as conn:
            return len(conn.execute(query, params).fetchall())
