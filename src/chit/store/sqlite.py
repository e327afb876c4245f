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

import asyncio
import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from chit.errors import StoreError
from chit.ids import new_job_ids
from chit.jobs import (
    Cancelled,
    Claimed,
    Enqueued,
    Failed,
    JobFilter,
    NewJob,
    Outcome,
    Page,
    Released,
    RescueReport,
    Snoozed,
    Succeeded,
    Suspended,
)
from chit.store import queries
from chit.store.capabilities import WriteLock
from chit.store.feeds import SQLiteFeed
from chit.store.flow import Claim
from chit.store.sql import Dialect, SQLStore, dumps, progressed, scalar

Q = queries.load("sqlite")
BUSY_TIMEOUT_MS = 30_000
# Rows deleted per prune transaction: short write locks, whatever the backlog.
PRUNE_BATCH = 5_000
# How often an idle worker looks at PRAGMA data_version (microseconds each):
# every half millisecond for the first 50 ms of a wait, when work that comes
# at all tends to come (a job's start waits 0.25 ms on average, not 1 ms),
# then every 2 ms.
_CHANGE_CHECK_SECONDS = 0.002
_FIRST_CHECK_SECONDS = 0.0005
_FIRST_CHECKS_FOR = 0.05


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


def _offset(seconds: float) -> str:
    return f"{seconds:+.3f} seconds"


def _tenant(tenant: str | None, seek: bool) -> str:
    # Without `seek`, `+j.tenant`: SQLite, having no statistics, would otherwise
    # walk every job of the tenant by chit_jobs_tenant_id.
    if tenant is None:
        return "1"
    return "j.tenant = :tenant" if seek else "+j.tenant = :tenant"


DIALECT = Dialect(
    name="sqlite",
    now=_clock,
    interval=_offset,
    time=ts,
    array=dumps,
    loads=lambda value: None if value is None else json.loads(value),
    when=lambda value: None if value is None else datetime.fromisoformat(value),
    query=lambda name, **fragments: Q[name].format(**fragments),
    tenant=_tenant,
    prune_batch=lambda: PRUNE_BATCH,
)


class SQLiteStore(SQLStore, WriteLock):
    d = DIALECT
    Q = Q

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
        # Every thread's connection with the lock its thread holds while using
        # it: close() takes each lock first, since closing a connection another
        # thread is running a statement on crashes the process.
        self._all: list[tuple[sqlite3.Connection, threading.RLock]] = []
        self._lock = threading.Lock()
        self._enqueuer: ThreadPoolExecutor | None = None
        if migrate:
            self.migrate()

    # Connections

    def _conn(self) -> tuple[sqlite3.Connection, threading.RLock]:
        """This thread's connection and its lock, opened on first use."""
        held: tuple[sqlite3.Connection, threading.RLock] | None = getattr(self._local, "conn", None)
        if held is not None:
            return held
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
        held = (conn, threading.RLock())
        self._local.conn = held
        with self._lock:
            self._all.append(held)
        return held

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        conn, in_use = self._conn()
        try:
            with in_use:
                yield conn
        except sqlite3.Error as e:
            raise StoreError(f"SQLite database {self.path!r}: {e}") from e

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._read() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    _tx = _write

    def writable(self, timeout: float) -> bool:
        # Another process's write transaction holds the file's one write lock:
        # every write here would wait BUSY_TIMEOUT_MS and fail.
        with self._read() as conn:
            conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("ROLLBACK")
                return True
            except sqlite3.OperationalError as e:
                if "locked" in str(e) or "busy" in str(e):
                    return False
                raise
            finally:
                conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
            enqueuer, self._enqueuer = self._enqueuer, None
        if enqueuer is not None:
            enqueuer.shutdown()
        for conn, in_use in conns:
            with in_use:  # after the statement another thread is running
                conn.close()
        self._local = threading.local()

    @contextmanager
    def _migrating(self) -> Iterator[sqlite3.Connection]:
        # BEGIN IMMEDIATE already keeps a second migrator out until this commits.
        with self._write() as conn:
            conn.execute(Q["create_migrations_table"])
            yield conn

    def _run_script(self, conn: sqlite3.Connection, script: str) -> None:
        # executescript would commit our transaction; run statement by statement.
        for statement in _statements(script):
            conn.execute(statement)

    # Submitting

    def enqueue_many(self, jobs: Sequence[NewJob], connection: Any = None) -> list[Enqueued]:
        if connection is not None:
            cursor = connection.cursor()
            cursor.row_factory = sqlite3.Row
            try:
                return self._insert_jobs(cursor, new_job_ids(len(jobs)), jobs)
            except sqlite3.Error as e:
                raise StoreError(f"enqueue on the application's connection failed: {e}") from e
            finally:
                cursor.close()
        jobs = list(jobs)  # each read (and checked) before other writers wait
        with self._write() as conn:
            return self._insert_jobs(conn, new_job_ids(len(jobs)), jobs)

    async def aenqueue_many(self, jobs: Sequence[NewJob], connection: Any = None) -> list[Enqueued]:
        """On one thread of the store's own: a write is short, and one writer at a
        time is all a SQLite file takes anyway. `connection`, a sqlite3 connection
        made with check_same_thread=False, is used from that thread."""
        with self._lock:
            if self._enqueuer is None:
                self._enqueuer = ThreadPoolExecutor(1, thread_name_prefix="chit-aenqueue")
            enqueuer = self._enqueuer
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(enqueuer, self.enqueue_many, jobs, connection)

    def _item(self, n: int, job_id: str, job: NewJob) -> dict[str, Any]:
        item = super()._item(n, job_id, job)
        item["payload_json"] = job.payload_json  # the text `_insert` stores, encoded once
        return item

    def _insert(
        self, conn: sqlite3.Connection | sqlite3.Cursor, batch: list[Any]
    ) -> dict[str, Any]:
        # One time for the batch, as a PostgreSQL transaction has, read first:
        # `RETURNING created_at` cost each row as much again as its insert.
        clock = str(scalar(conn.execute(Q["clock"])))
        inserted = {}
        for item in batch:
            payload = item["payload_json"]
            if payload is None:
                payload = dumps(item["payload"])
            params = {**_NO_WORKFLOW, **item, "payload": payload, "now": clock}
            if item["expires_in"] is not None:  # seconds, as modifiers
                params["expires_in"] = _offset(item["expires_in"])
            if item["debounce"] is not None:
                params["debounce"] = _offset(item["debounce"])
                params["debounce_max"] = _offset(item["debounce_max"])
            if item.get("dependents") is not None:  # a workflow's job: its edges as JSON arrays
                params["dependents"] = dumps(item["dependents"])
            if conn.execute(Q["enqueue"], params).rowcount == 1:  # 0: a key was held
                inserted[item["id"]] = clock
                if item.get("depends_on"):  # in chit_edges: the *_edges migration says why
                    edges = {"id": item["id"], "depends_on": dumps(item["depends_on"])}
                    conn.execute(Q["enqueue_edges"], edges)
        return inserted

    # Working

    def _claim(self, claim: Claim, now: str) -> Claimed:
        with self._read() as conn:
            # A read costs no write lock: idle workers must not queue on the writer.
            due = [
                q
                for q in claim.queues
                if conn.execute(Q["has_due"], {"queue": q, "now": now}).fetchone()
            ]
        return super()._claim(claim._replace(queues=due), now) if due else Claimed()

    def _opened(self, conn: sqlite3.Connection, claim: Claim, rows: list[Any], clock: str) -> None:
        if not rows:
            return
        self._close_attempts(conn, rows, clock)
        # Opened at the instant the claim statement stamped on the job: a 'now'
        # read again here may be a millisecond later than the job's started_at.
        conn.executemany(
            Q["open_attempt"],
            [
                {"job_id": r["id"], "attempt": r["attempts"], "worker": claim.worker}
                | {
                    "now": r["claimed_at"],
                    "kind": r["kind"],
                    "concurrency_key": r["concurrency_key"],
                    "cost": r["cost"],
                }
                for r in rows
            ],
        )

    def _fixed_clock(self, conn: sqlite3.Connection, now: str) -> str:
        return str(scalar(conn.execute(Q["clock"]))) if now == "now" else now

    def _finish(
        self, conn: sqlite3.Connection, outcomes: Sequence[Outcome], clock: str
    ) -> list[bool]:
        # Successes with inline results in one statement, the rest one by one
        # (all of them when a job comes twice: each then sees the one before).
        # Each result is encoded once: `large` keeps those stored apart.
        inline: dict[str, tuple[Succeeded, str]] = {}
        large: dict[str, str] = {}
        ids = [o.job_id for o in outcomes]
        if sum(isinstance(o, Succeeded) for o in outcomes) > 1 and len(set(ids)) == len(ids):
            for o in outcomes:
                if isinstance(o, Succeeded):
                    encoded = dumps(o.result)
                    if self._is_large(encoded):
                        large[o.job_id] = encoded
                    else:
                        inline[o.job_id] = (o, encoded)
        batched = self._succeed_many(conn, list(inline.values()), clock) if inline else {}
        rows = [
            batched.get(o.job_id)
            if o.job_id in inline
            else self._finish_one(conn, o, clock, large.get(o.job_id))
            for o in outcomes
        ]
        succeeded: list[str] = []  # jobs with dependents, by how they ended
        ended: list[str] = []
        for outcome, row in zip(outcomes, rows, strict=True):
            if row is not None and row["has_dependents"]:
                if row["state"] == "succeeded":
                    succeeded.append(outcome.job_id)
                elif row["state"] in ("failed", "cancelled"):
                    ended.append(outcome.job_id)
        self._settle(conn, succeeded, ended, clock)
        return [row is not None for row in rows]

    def _succeed_many(
        self, conn: sqlite3.Connection, successes: list[tuple[Succeeded, str]], clock: str
    ) -> dict[str, Any]:
        """Record the successes (each with its result's JSON, stored inline) and
        close their attempt records: the rows of those not fenced out."""
        items = [
            {"id": o.job_id, "token": o.lease_token, "result": encoded} | progressed(o.progress)
            for o, encoded in successes
        ]
        found = conn.execute(Q["succeed_many"], {"items": dumps(items), "now": clock})
        rows: dict[str, Any] = {r["id"]: r for r in found.fetchall()}
        if rows:
            ids = dumps(list(rows))
            conn.execute(Q["close_attempts_succeeded"], {"ids": ids, "now": clock})
        return rows

    def _finish_one(
        self, conn: sqlite3.Connection, outcome: Outcome, clock: str, encoded: str | None = None
    ) -> Any:
        """Record one outcome and close its attempt record: the job's row, None if
        fenced out. `encoded`: a success's result as JSON, when already encoded."""
        # Each statement returns the outcome its attempt record closes with, and the error.
        fence: dict[str, Any] = {"id": outcome.job_id, "token": outcome.lease_token, "now": clock}
        match outcome:
            case Succeeded(result=result, progress=progress):
                if encoded is None:
                    encoded = dumps(result)
                external = self._is_large(encoded)
                stored = {"result": None if external else encoded, "result_external": int(external)}
                row = conn.execute(Q["succeed"], fence | stored | progressed(progress)).fetchone()
                if row is not None and external:
                    conn.execute(Q["store_result"], {"id": outcome.job_id, "result": encoded})
            case Failed(error=error, retry_in=retry_in):
                retry = None if retry_in is None else _offset(retry_in)
                row = conn.execute(Q["fail"], fence | {"error": error, "retry": retry}).fetchone()
            case Released():
                row = conn.execute(Q["release"], fence | {"free": self.free_hand_backs}).fetchone()
            case Cancelled():
                row = conn.execute(Q["mark_cancelled"], fence).fetchone()
            case Snoozed(delay=delay):
                row = conn.execute(Q["snooze"], fence | {"delay": _offset(delay)}).fetchone()
            case Suspended():
                row = self._suspend(conn, outcome, clock)
        if row is not None:
            conn.execute(
                Q["close_attempt"], fence | {"outcome": row["outcome"], "error": row["error"]}
            )
        return row

    def rescue_expired(self, now: datetime | None = None) -> RescueReport:
        with self._read() as conn:
            if not scalar(conn.execute(Q["stats_stale"], {"now": _clock(now), "tenant": None})):
                return RescueReport(0, 0, 0)
        return super().rescue_expired(now)

    def _close_attempts(self, conn: sqlite3.Connection, rows: list[Any], clock: str) -> None:
        conn.execute(Q["expire_attempts"], {"ids": dumps([r["id"] for r in rows]), "now": clock})

    # Reading

    def list(self, where: JobFilter, limit: int = 50, cursor: str | None = None) -> Page:
        # One query per index, so SQLite walks the one that fits the filters given.
        state, kind, queue, tenant = where.state, where.kind, where.queue, where.tenant
        if state in ("queued", "running"):  # not in the indexes led by the state
            name = f"list_{state}"
        elif state is not None and kind is not None and tenant is not None:
            name = "list_by_state_kind_tenant"
        elif queue is not None:
            name = "list_by_queue"
        elif kind is not None:
            name = "list_by_kind"
        elif state is not None:
            name = "list_by_state"
        else:
            name = "list_recent" if tenant is None else "list_by_tenant"
        params = asdict(where) | {
            "state": None if state is None else str(state),
            "since": None if where.since is None else ts(where.since),
            "cursor": cursor,
            "limit": limit + 1,
        }
        with self._read() as conn:
            after = "1" if cursor is None else "j.id < :cursor"
            rows = conn.execute(DIALECT.query(name, cursor=after), params).fetchall()
        jobs = [self._job(r) for r in rows[:limit]]
        return Page(jobs, jobs[-1].id if len(rows) > limit else None)

    def output_feed(self) -> SQLiteFeed:
        return SQLiteFeed(self.path)

    def wait_for_jobs(
        self, queues: Sequence[str], timeout: float, stop: threading.Event | None = None
    ) -> None:
        # PRAGMA data_version changes when another connection commits: a cheap
        # check that needs no lock, so idle workers react in milliseconds.
        start = time.monotonic()
        deadline = start + timeout
        with self._read() as conn:
            seen = conn.execute(Q["data_version"]).fetchone()[0]
            while (now := time.monotonic()) < deadline:
                every = (
                    _FIRST_CHECK_SECONDS
                    if now - start < _FIRST_CHECKS_FOR
                    else _CHANGE_CHECK_SECONDS
                )
                time.sleep(min(every, max(0.0, deadline - now)))
                if conn.execute(Q["data_version"]).fetchone()[0] != seen:
                    return
                if stop is not None and stop.is_set():
                    return


# The workflow columns of a job enqueued on its own (Store.enqueue_many).
_NO_WORKFLOW: dict[str, Any] = {"state": "queued", "error": None, "deps_pending": 0}
_NO_WORKFLOW |= {"workflow_id": None, "ref": None, "run_on": "succeeded", "dependents": None}


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
