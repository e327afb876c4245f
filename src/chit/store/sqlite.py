"""The SQLite store: one file, WAL, many processes.

Durability: WAL with `synchronous=NORMAL` (the default, `CHIT_SQLITE_SYNCHRONOUS`)
makes every acknowledged commit survive the crash of any process, `kill -9`
included, because the commit is in the WAL file before `enqueue` returns; an
OS crash or power cut may roll back the last commits but never corrupts the
file. `FULL` fsyncs each commit and survives those too, at about an eighth of
the commit rate on this machine.

Concurrency: every write transaction starts with `BEGIN IMMEDIATE`, so a
writer queues on the busy timeout instead of failing to upgrade a read lock;
readers never block writers.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from chit.errors import StoreError
from chit.ids import id_prefix_range, new_job_id
from chit.jobs import (
    ApiKey,
    Attempt,
    AttemptOutcome,
    AttemptStats,
    Beat,
    Cancelled,
    CancelResult,
    ClaimedJob,
    Enqueued,
    Failed,
    FailureGroup,
    HeartbeatResult,
    Job,
    JobFilter,
    MinuteCount,
    NewApiKey,
    NewJob,
    Outcome,
    Page,
    Progress,
    Released,
    ReplaySelector,
    RescueReport,
    State,
    StateKindCount,
    Stats,
    Succeeded,
)
from chit.store import queries
from chit.store import rows as decode
from chit.store.base import Store

Q = queries.load("sqlite")
BUSY_TIMEOUT_MS = 30_000
# Rows deleted per prune transaction: short write locks, whatever the backlog.
PRUNE_BATCH = 5_000
_JOB_COLUMNS = (
    "id, kind, queue, priority, payload, state, attempts, max_attempts, run_at, created_at,"
    " updated_at, tenant, idempotency_key, lease_expires_at, worker, progress_done,"
    " progress_total, checkpoint, result, result_external, error, cancel_requested,"
    " started_at, finished_at,"
    " state = 'running' AND lease_expires_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now') AS stale"
)
# How often an idle worker looks at PRAGMA data_version; costs microseconds each.
_CHANGE_CHECK_SECONDS = 0.002


def path_from_url(url: str) -> str:
    """sqlite:///relative.db, sqlite:////absolute/path.db"""
    if not url.startswith("sqlite:///"):
        raise StoreError(f"not a SQLite URL: {url!r} (expected sqlite:///path/to/file.db)")
    path = url.removeprefix("sqlite:///")
    if not path or path == ":memory:":
        raise StoreError("SQLite needs a file path: workers and the API share it between processes")
    return path


def ts(value: datetime) -> str:
    value = value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def _clock(now: datetime | None) -> str:
    return "now" if now is None else ts(now)


def _read_clock(conn: sqlite3.Connection, now: datetime | None) -> str:
    """The database clock read once, for statements that must agree on the time."""
    if now is not None:
        return ts(now)
    return str(conn.execute("SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now')").fetchone()[0])


def _offset(seconds: float) -> str:
    return f"{seconds:+.3f} seconds"


def _dt(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _loads(value: str | None) -> Any:
    return None if value is None else json.loads(value)


class SQLiteStore(Store):
    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "NORMAL",
        result_inline_bytes: int = 64 * 1024,
        migrate: bool = True,
    ) -> None:
        self.path = str(path)
        self.synchronous = synchronous.upper()
        self.result_inline_bytes = result_inline_bytes
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        if migrate:
            self.migrate()

    # Connections

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,
                check_same_thread=False,
                cached_statements=256,
            )
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            _enable_wal(conn)
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error as e:
            raise StoreError(f"cannot open SQLite database {self.path!r}: {e}") from e
        conn.row_factory = sqlite3.Row
        return conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise StoreError(f"SQLite database {self.path!r}: {e}") from e
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException as e:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if isinstance(e, sqlite3.Error):
                raise StoreError(f"SQLite database {self.path!r}: {e}") from e
            raise

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        try:
            yield self._conn()
        except sqlite3.Error as e:
            raise StoreError(f"SQLite database {self.path!r}: {e}") from e

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()

    # Schema

    def schema_version(self) -> int:
        with self._read() as conn:
            exists = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE name = 'chit_schema_migrations'"
            ).fetchone()
            return conn.execute(Q["schema_version"]).fetchone()[0] if exists else 0

    def migrate(self) -> int:
        pending = queries.migrations("sqlite")
        if self.schema_version() == len(pending):
            return len(pending)
        with self._write() as conn:
            conn.execute(Q["create_migrations_table"])
            current = conn.execute(Q["schema_version"]).fetchone()[0]
            for version, name, sql in pending:
                if version <= current:
                    continue
                # executescript would commit our transaction; run statement by statement.
                for statement in _statements(sql):
                    conn.execute(statement)
                conn.execute(Q["record_migration"], {"version": version, "name": name})
            if current > len(pending):
                raise StoreError(
                    f"database schema is version {current}, newer than this chit "
                    f"({len(pending)}); upgrade chit"
                )
        return len(pending)

    # Submitting

    def enqueue(self, job: NewJob) -> Enqueued:
        return self.enqueue_many([job])[0]

    def enqueue_many(self, jobs: Sequence[NewJob], connection: Any = None) -> list[Enqueued]:
        if connection is not None:
            cursor = connection.cursor()
            cursor.row_factory = sqlite3.Row
            try:
                return self._enqueue_many(cursor, jobs)
            except sqlite3.Error as e:
                raise StoreError(f"enqueue on the application's connection failed: {e}") from e
            finally:
                cursor.close()
        jobs = list(jobs)  # each read (and checked) before other writers wait
        with self._write() as conn:
            return self._enqueue_many(conn, jobs)

    def _enqueue_many(
        self, conn: sqlite3.Connection | sqlite3.Cursor, jobs: Sequence[NewJob]
    ) -> list[Enqueued]:
        out: list[Enqueued] = []
        for job in jobs:
            job_id = new_job_id()
            inserted = conn.execute(
                Q["enqueue"],
                {
                    "id": job_id,
                    "kind": job.kind,
                    "queue": job.queue,
                    "priority": job.priority,
                    "payload": _dumps(job.payload),
                    "tenant": job.tenant,
                    "idempotency_key": job.idempotency_key,
                    "request_hash": job.request_hash,
                    "max_attempts": job.max_attempts,
                    "run_at": None if job.run_at is None else ts(job.run_at),
                    "now": "now",
                },
            ).rowcount
            if inserted:
                out.append(Enqueued(job_id, True))
                continue
            existing = conn.execute(
                Q["find_by_idempotency_key"],
                {"tenant": job.tenant, "idempotency_key": job.idempotency_key},
            ).fetchone()
            out.append(Enqueued(existing["id"], False, existing["request_hash"]))
        return out

    # Working

    def claim(
        self,
        worker: str,
        queues: Sequence[str],
        limit: int,
        lease_seconds: float,
        now: datetime | None = None,
    ) -> list[ClaimedJob]:
        clock = _clock(now)
        with self._read() as conn:
            # A read costs no write lock: idle workers must not queue on the writer.
            due = [
                q
                for q in queues
                if conn.execute(Q["has_due"], {"queue": q, "now": clock}).fetchone()
            ]
        if not due or limit <= 0:
            return []
        with self._write() as conn:
            return self._claim(conn, worker, due, limit, lease_seconds, clock)

    def _claim(
        self,
        conn: sqlite3.Connection,
        worker: str,
        queues: Sequence[str],
        limit: int,
        lease_seconds: float,
        clock: str,
    ) -> list[ClaimedJob]:
        claimed: list[ClaimedJob] = []
        for queue in queues:
            rows = conn.execute(
                Q["claim"],
                {
                    "queue": queue,
                    "worker": worker,
                    "limit": limit - len(claimed),
                    "lease": _offset(lease_seconds),
                    "now": clock,
                },
            ).fetchall()
            rows.sort(key=lambda r: (r["priority"], r["run_at"], r["id"]))
            if rows:
                conn.execute(
                    Q["expire_attempts"],
                    {"ids": _dumps([r["id"] for r in rows]), "now": clock},
                )
            for r in rows:
                conn.execute(
                    Q["open_attempt"],
                    {
                        "job_id": r["id"],
                        "attempt": r["attempts"],
                        "worker": worker,
                        "now": clock,
                    },
                )
                claimed.append(
                    ClaimedJob(
                        id=r["id"],
                        kind=r["kind"],
                        queue=r["queue"],
                        payload=_loads(r["payload"]),
                        attempt=r["attempts"],
                        max_attempts=r["max_attempts"],
                        lease_token=r["lease_token"],
                        checkpoint=_loads(r["checkpoint"]),
                        progress=Progress(r["progress_done"], r["progress_total"]),
                    )
                )
            if len(claimed) >= limit:
                break
        return claimed

    def heartbeat(
        self, beats: Sequence[Beat], lease_seconds: float, now: datetime | None = None
    ) -> HeartbeatResult:
        if not beats:
            return HeartbeatResult(frozenset(), frozenset())
        payload = _dumps(
            [
                {"id": b.job_id, "token": b.lease_token}
                | (
                    {"p": 1, "done": b.progress.done, "total": b.progress.total}
                    if b.progress is not None
                    else {}
                )
                for b in beats
            ]
        )
        with self._write() as conn:
            rows = conn.execute(
                Q["heartbeat"],
                {"beats": payload, "lease": _offset(lease_seconds), "now": _clock(now)},
            ).fetchall()
        return HeartbeatResult(
            held=frozenset(r[0] for r in rows),
            cancel_requested=frozenset(r[0] for r in rows if r[1]),
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
        with self._write() as conn:
            return bool(
                conn.execute(
                    Q["checkpoint"],
                    {
                        "id": job_id,
                        "token": lease_token,
                        "checkpoint": _dumps(data),
                        "has_progress": progress is not None,
                        "done": progress.done if progress else None,
                        "total": progress.total if progress else None,
                        "lease": _offset(lease_seconds),
                        "now": _clock(now),
                    },
                ).rowcount
            )

    def finish(self, outcomes: Sequence[Outcome], now: datetime | None = None) -> list[bool]:
        clock = _clock(now)
        with self._write() as conn:
            return [self._finish_one(conn, outcome, clock) for outcome in outcomes]

    def finish_and_claim(
        self,
        outcomes: Sequence[Outcome],
        worker: str,
        queues: Sequence[str],
        limit: int,
        lease_seconds: float,
        now: datetime | None = None,
    ) -> tuple[list[bool], list[ClaimedJob]]:
        if not outcomes:
            return [], self.claim(worker, queues, limit, lease_seconds, now)
        clock = _clock(now)
        with self._write() as conn:
            applied = [self._finish_one(conn, outcome, clock) for outcome in outcomes]
            if limit <= 0:
                return applied, []
            return applied, self._claim(conn, worker, queues, limit, lease_seconds, clock)

    def _finish_one(self, conn: sqlite3.Connection, outcome: Outcome, clock: str) -> bool:
        fence = {"id": outcome.job_id, "token": outcome.lease_token, "now": clock}
        error: str | None = None
        match outcome:
            case Succeeded(result=result, progress=progress):
                encoded = _dumps(result)
                external = len(encoded.encode()) > self.result_inline_bytes
                params = fence | {
                    "result": None if external else encoded,
                    "result_external": int(external),
                    "has_progress": progress is not None,
                    "done": progress.done if progress else None,
                    "total": progress.total if progress else None,
                }
                if not conn.execute(Q["succeed"], params).rowcount:
                    return False
                if external:
                    conn.execute(Q["store_result"], {"id": outcome.job_id, "result": encoded})
                recorded = AttemptOutcome.SUCCEEDED
            case Failed(error=error, retry_in=retry_in):
                params = fence | {
                    "error": error,
                    "retry": None if retry_in is None else _offset(retry_in),
                }
                row = conn.execute(Q["fail"], params).fetchone()
                if row is None:
                    return False
                recorded = {
                    "queued": AttemptOutcome.RETRIED,
                    "failed": AttemptOutcome.FAILED,
                    "cancelled": AttemptOutcome.CANCELLED,
                }[row[0]]
            case Released():
                row = conn.execute(Q["release"], fence).fetchone()
                if row is None:
                    return False
                recorded = (
                    AttemptOutcome.CANCELLED if row[0] == "cancelled" else AttemptOutcome.RELEASED
                )
            case Cancelled():
                if not conn.execute(Q["mark_cancelled"], fence).rowcount:
                    return False
                recorded = AttemptOutcome.CANCELLED
        conn.execute(
            Q["close_attempt"],
            {"job_id": outcome.job_id, "outcome": recorded.value, "error": error, "now": clock},
        )
        return True

    def rescue_expired(self, now: datetime | None = None) -> RescueReport:
        clock = _clock(now)
        with self._read() as conn:
            if conn.execute(Q["stats_stale"], {"now": clock, "tenant": None}).fetchone()[0] == 0:
                return RescueReport(0, 0, 0)
        with self._write() as conn:
            clock = _read_clock(conn, now)
            rows = conn.execute(Q["rescue_expired"], {"now": clock}).fetchall()
            ids = _dumps([r["id"] for r in rows])
            conn.execute(Q["expire_attempts"], {"ids": ids, "now": clock})
        states = [r["state"] for r in rows]
        return RescueReport(
            requeued=states.count("queued"),
            failed=states.count("failed"),
            cancelled=states.count("cancelled"),
        )

    # Reading

    def get(self, job_id: str, tenant: str | None = None) -> Job | None:
        with self._read() as conn:
            row = conn.execute(Q["get"], {"id": job_id, "tenant": tenant, "now": "now"}).fetchone()
        return None if row is None else decode.job(row, _loads, _dt)

    def get_result(self, job_id: str, tenant: str | None = None) -> tuple[bool, Any]:
        with self._read() as conn:
            row = conn.execute(Q["get_result"], {"id": job_id, "tenant": tenant}).fetchone()
        if row is None:
            return False, None
        return True, _loads(row[2] if row[0] else row[1])

    def attempts(self, job_id: str) -> list[Attempt]:
        with self._read() as conn:
            rows = conn.execute(Q["attempts"], {"id": job_id}).fetchall()
        return [decode.attempt(r, _dt) for r in rows]

    def list(self, where: JobFilter, limit: int = 50, cursor: str | None = None) -> Page:
        # Built from fragments rather than `:x IS NULL OR col = :x`, so SQLite picks
        # the index that fits the filters actually given.
        clauses, params = [], {}
        for column, value in (
            ("state", where.state),
            ("kind", where.kind),
            ("queue", where.queue),
            ("tenant", where.tenant),
        ):
            if value is not None:
                clauses.append(f"{column} = :{column}")
                params[column] = str(value)
        if where.tenant is not None and _tenant_filters_only(where):
            # SQLite has no statistics to weigh a tenant against a state, kind or
            # queue: walk that filter's index and check the tenant on each row, unless
            # chit_jobs_state_kind seeks on all three. A tenant alone uses
            # chit_jobs_tenant_id.
            clauses[clauses.index("tenant = :tenant")] = "+tenant = :tenant"
        if where.since is not None:
            clauses.append("created_at >= :since")
            params["since"] = ts(where.since)
        if cursor is not None:
            clauses.append("id < :cursor")
            params["cursor"] = cursor
        sql = f"SELECT {_JOB_COLUMNS} FROM chit_jobs"
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += " ORDER BY id DESC LIMIT :limit"
        params["limit"] = limit + 1
        with self._read() as conn:
            rows = conn.execute(sql, params).fetchall()
        jobs = [decode.job(r, _loads, _dt) for r in rows[:limit]]
        return Page(jobs, jobs[-1].id if len(rows) > limit else None)

    def failures(self, tenant: str | None = None) -> list[FailureGroup]:
        with self._read() as conn:
            rows = conn.execute(Q["failures"], {"tenant": tenant}).fetchall()
        return [decode.failure_group(r, _dt) for r in rows]

    def stats(self, tenant: str | None = None, now: datetime | None = None) -> Stats:
        params = {"tenant": tenant, "now": _clock(now)}
        by_state = {s.value: 0 for s in State}
        by_kind: dict[str, dict[str, int]] = {}
        with self._read() as conn:
            for state, kind, count in conn.execute(Q["stats_by_state_kind"], params):
                by_state[state] += count
                by_kind.setdefault(kind, {})[state] = count
            last_hour = dict(conn.execute(Q["stats_last_hour"], params).fetchall())
            lag = conn.execute(Q["stats_queue_lag"], params).fetchone()[0]
            stale = conn.execute(Q["stats_stale"], params).fetchone()[0]
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
        params = {"id": job_id, "tenant": tenant, "now": "now"}
        with self._write() as conn:
            row = conn.execute(Q["cancel"], params).fetchone()
            if row is not None:
                return CancelResult.CANCELLED if row[0] == "cancelled" else CancelResult.REQUESTED
            exists = conn.execute(Q["job_state"], params).fetchone()
        return CancelResult.ALREADY_FINISHED if exists else CancelResult.NOT_FOUND

    def retry(self, job_id: str, tenant: str | None = None) -> bool:
        return self.replay(ReplaySelector(ids=(job_id,), tenant=tenant)) == 1

    def replay(self, selector: ReplaySelector) -> int:
        clauses: list[str] = []
        params: dict[str, Any] = {}
        if selector.ids:
            clauses.append("id IN (SELECT value FROM json_each(:ids))")
            clauses.append("state IN ('failed', 'cancelled')")
            params["ids"] = _dumps(list(selector.ids))
        else:
            clauses.append("state = 'failed'")
            if selector.kind is not None:
                clauses.append("kind = :kind")
                params["kind"] = selector.kind
            if selector.error_prefix is not None:
                clauses.append("substr(error, 1, length(:error_prefix)) = :error_prefix")
                params["error_prefix"] = selector.error_prefix
            if selector.since is not None:
                clauses.append("finished_at >= :since")
                params["since"] = ts(selector.since)
        if selector.tenant is not None:
            # Seek on it by id or with a kind (chit_jobs_state_kind); otherwise only
            # check it on the failed jobs, rather than walk all the tenant's jobs.
            seek = selector.ids or selector.kind is not None
            clauses.append("tenant = :tenant" if seek else "+tenant = :tenant")
            params["tenant"] = selector.tenant
        query = Q["replay"].format(where=" AND ".join(clauses))
        with self._write() as conn:
            return len(conn.execute(query, params).fetchall())

    def prune(self, older_than_seconds: float, now: datetime | None = None) -> int:
        params = {
            "age": _offset(-older_than_seconds),
            "now": _clock(now),
            "batch": PRUNE_BATCH,
        }
        deleted = 0
        while True:
            with self._write() as conn:
                count = conn.execute(Q["prune"], params).rowcount
            deleted += count
            if count < PRUNE_BATCH:
                return deleted

    def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> None:
        # PRAGMA data_version changes when another connection commits: a cheap
        # check that needs no lock, so idle workers react in milliseconds.
        deadline = time.monotonic() + timeout
        with self._read() as conn:
            seen = conn.execute(Q["data_version"]).fetchone()[0]
            while time.monotonic() < deadline:
                time.sleep(min(_CHANGE_CHECK_SECONDS, max(0.0, deadline - time.monotonic())))
                if conn.execute(Q["data_version"]).fetchone()[0] != seen:
                    return

    # The HTTP API

    def get_many(self, job_ids: Sequence[str]) -> list[Job]:
        if not job_ids:
            return []
        with self._read() as conn:
            rows = conn.execute(Q["get_many"], {"ids": _dumps(list(job_ids))}).fetchall()
        return [decode.job(r, _loads, _dt) for r in rows]

    def attempt_stats(
        self, bounds: Sequence[float], tenant: str | None = None
    ) -> list[AttemptStats]:
        params = {"bounds": _dumps([float(b) for b in bounds]), "tenant": tenant}
        with self._read() as conn:
            rows = conn.execute(Q["attempt_stats"], params).fetchall()
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
            return decode.api_key(conn.execute(Q["create_api_key"], params).fetchone(), _dt)

    def find_api_key(self, key_hash: str) -> ApiKey | None:
        with self._read() as conn:
            row = conn.execute(Q["find_api_key"], {"key_hash": key_hash}).fetchone()
        return None if row is None else decode.api_key(row, _dt)

    def list_api_keys(self, include_revoked: bool = False) -> list[ApiKey]:
        with self._read() as conn:
            rows = conn.execute(Q["list_api_keys"], {"include_revoked": include_revoked})
            return [decode.api_key(r, _dt) for r in rows]

    def revoke_api_key(self, key_id: str) -> bool:
        with self._write() as conn:
            return bool(conn.execute(Q["revoke_api_key"], {"id": key_id}).rowcount)

    # The dashboard

    def count_jobs(self, tenant: str | None = None, cap: int = 10_000) -> list[StateKindCount]:
        query = Q["count_by_state_kind"].format(tenant=_tenant_term(tenant))
        with self._read() as conn:
            rows = conn.execute(query, {"tenant": tenant, "cap": cap}).fetchall()
        return [StateKindCount(State(state), kind, n, n >= cap) for state, kind, n in rows if n > 0]

    def finished_per_minute(
        self, tenant: str | None = None, now: datetime | None = None
    ) -> list[MinuteCount]:
        query = Q["finished_per_minute"].format(tenant=_tenant_term(tenant, seek=False))
        with self._read() as conn:
            rows = conn.execute(query, {"tenant": tenant, "now": _clock(now)}).fetchall()
        return [
            MinuteCount(datetime.fromisoformat(minute), kind, State(state), n)
            for minute, kind, state, n in rows
        ]

    def oldest_queued(self, tenant: str | None = None, now: datetime | None = None) -> Job | None:
        term = _tenant_term(tenant, seek=False)
        query = Q["oldest_queued"].format(columns=_JOB_COLUMNS, tenant=term)
        with self._read() as conn:
            row = conn.execute(query, {"tenant": tenant, "now": _clock(now)}).fetchone()
        return None if row is None else decode.job(row, _loads, _dt)

    def stale_jobs(
        self, tenant: str | None = None, limit: int = 20, now: datetime | None = None
    ) -> list[Job]:
        query = Q["stale_jobs"].format(columns=_JOB_COLUMNS, tenant=_tenant_term(tenant))
        params = {"tenant": tenant, "now": _clock(now), "limit": limit}
        with self._read() as conn:
            return [decode.job(r, _loads, _dt) for r in conn.execute(query, params).fetchall()]

    def search(self, text: str, tenant: str | None = None, limit: int = 50) -> list[Job]:
        text = text.strip()
        if not text:
            return []
        term = _tenant_term(tenant)
        found: dict[str, Job] = {}
        with self._read() as conn:
            query = Q["search_idempotency_key"].format(columns=_JOB_COLUMNS, tenant=term)
            for r in conn.execute(query, {"key": text, "tenant": tenant, "limit": limit}):
                found[r["id"]] = decode.job(r, _loads, _dt)
            bounds = id_prefix_range(text)
            if bounds is not None:
                query = Q["search_id_prefix"].format(columns=_JOB_COLUMNS, tenant=term)
                params = {"low": bounds[0], "high": bounds[1], "tenant": tenant, "limit": limit}
                for r in conn.execute(query, params):
                    found[r["id"]] = decode.job(r, _loads, _dt)
        return sorted(found.values(), key=lambda j: j.id, reverse=True)[:limit]

    def replay_failure_group(self, kind: str, error: str, tenant: str | None = None) -> int:
        query = Q["replay_failure_group"].format(tenant=_tenant_term(tenant))
        with self._write() as conn:
            rows = conn.execute(query, {"kind": kind, "error": error, "tenant": tenant})
            return len(rows.fetchall())


def _tenant_filters_only(where: JobFilter) -> bool:
    """Whether a list's tenant should only filter the rows another index finds."""
    others = (where.state, where.kind, where.queue)
    both = where.state is not None and where.kind is not None
    return any(v is not None for v in others) and not both


def _tenant_term(tenant: str | None, *, seek: bool = True) -> str:
    """`{tenant}` in a dashboard query. Without `seek` the tenant only filters the
    rows another index finds (`+j.tenant`), as SQLite, having no statistics, would
    otherwise walk every job of the tenant by chit_jobs_tenant_id."""
    if tenant is None:
        return "1"
    return "j.tenant = :tenant" if seek else "+j.tenant = :tenant"


def _enable_wal(conn: sqlite3.Connection) -> None:
    """Switch to WAL, waiting out other connections doing the same. Switching a new
    file takes an exclusive lock without calling the busy handler, so processes
    opening a fresh database at once would get "database is locked" at start-up."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    delay = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            busy = e.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
            if not busy or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


def _statements(script: str) -> Iterator[str]:
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                yield buffer
            buffer = ""
    if buffer.strip() and not buffer.strip().startswith("--"):
        yield buffer
