"""The PostgreSQL store: workers on many machines, one database.

Connections: a `psycopg_pool.ConnectionPool` of autocommit connections, each
checked before it is handed out (`check_connection`), so that after a server
restart the first call gets a fresh connection, not a dead one. A single
statement runs on its own, several in one explicit transaction; psycopg
prepares a statement after a few executions of the same text.

Clock: every time is the database's (`now()`, see sql/postgres/queries.sql), so
clock skew between worker machines cannot shorten or stretch a lease.

Waking: a trigger NOTIFYs channel `chit_jobs` with the queue name whenever a
statement leaves jobs queued; `wait_for_jobs` LISTENs on one dedicated
connection per thread and falls back to sleeping when it cannot.

Errors: a server that cannot be reached, or any other database error, is
raised as `StoreError` with a message naming the server (never the password).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from chit.errors import StoreError
from chit.extras import needs
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
    Snoozed,
    State,
    Succeeded,
    Suspended,
)
from chit.store import graph, queries
from chit.store.feeds import PostgresFeed
from chit.store.flow import Claim
from chit.store.postgres_connections import (
    REACH_SECONDS,
    acheck_connection,
    check_connection,
    describe_url,
    reach,
    store_error,
)
from chit.store.postgres_listening import Listening
from chit.store.postgres_prepared import PreparedStatement
from chit.store.sql import (
    Dialect,
    InsertStep,
    SQLStore,
    dumps,
    progressed,
    scalar,
)

# An extra (chit[postgres]): without it, importing this module says which to install.
with needs("postgres", "a postgresql:// database needs psycopg"):
    import psycopg
    import psycopg.errors
    from psycopg import sql
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolClosed, PoolTimeout


Q = queries.load("postgres")
_ENQUEUE_PLAIN = PreparedStatement("chit_enqueue_plain", Q["enqueue_plain"])
# Rows deleted per prune statement: short locks, whatever the backlog.
PRUNE_BATCH = 5_000
# Batches of this many jobs are copied in (`_copy_jobs`; jobs with a key are inserted);
# below it the extra round trip for the clock costs more than COPY saves.
COPY_FROM = 100
# The payload goes as bytes already in jsonb's binary form (`_copy_jobs`): psycopg's
# jsonb dumper, in Python, cost a fifth of a copied job's client time.
_COPY_TYPES = ["text", "text", "text", "int4", "bytea", "text", "int4"]
_COPY_TYPES += ["timestamptz"] * 3 + ["text", "float8", "timestamptz", "text"]

Connection = psycopg.Connection[dict[str, Any]]
AsyncConnection = psycopg.AsyncConnection[dict[str, Any]]
_T = TypeVar("_T")
_P = ParamSpec("_P")


def _text(value: str) -> str:
    # PostgreSQL text cannot hold NUL; an error message must never be lost to one.
    return value.replace("\x00", "\N{REPLACEMENT CHARACTER}")


def _utc(value: datetime | None) -> datetime | None:
    """Aware UTC; a naive time is taken to be UTC already, as the SQLite store does."""
    if value is None:
        return None
    return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)


def _iso(value: datetime) -> str:
    """Aware UTC as text: in a JSON document, or a parameter cast to timestamptz."""
    return value.astimezone(UTC).isoformat() if value.tzinfo else value.isoformat() + "+00:00"


def _format(name: str, **fragments: str) -> sql.Composed:
    return sql.SQL(Q[name]).format(**{key: sql.SQL(value) for key, value in fragments.items()})


def _tenant_term(tenant: str | None, seek: bool = True) -> str:
    """`{tenant}`: every tenant, or seeking on one tenant's index entries (the
    planner has statistics to weigh it against the other conditions: `seek` is moot)."""
    return "true" if tenant is None else "j.tenant = %(tenant)s::text"


DIALECT = Dialect(
    name="postgres",
    now=_utc,
    interval=lambda seconds: timedelta(seconds=seconds),
    time=_iso,
    array=list,
    loads=lambda value: value,  # jsonb columns arrive decoded
    when=_utc,
    query=_format,
    tenant=_tenant_term,
    prune_batch=lambda: PRUNE_BATCH,
    text=_text,
)


# A finish that found a dependent enqueued after its snapshot, or two finishes
# that counted down the same dependents in opposite orders, is rolled back
# whole: run it again, a few times (each retry sees the other's commit).
_RETRIES = 5
_RETRYABLE = psycopg.errors.SerializationFailure | psycopg.errors.DeadlockDetected


def _retried(call: Callable[_P, _T]) -> Callable[_P, _T]:
    @functools.wraps(call)
    def retrying(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        for _ in range(_RETRIES - 1):
            try:
                return call(*args, **kwargs)
            except StoreError as e:
                if not isinstance(e.__cause__, _RETRYABLE):
                    raise
        return call(*args, **kwargs)

    return retrying


class PostgresStore(Listening, SQLStore):
    d = DIALECT
    Q = Q
    concurrent_writes = True

    def __init__(
        self,
        url: str,
        *,
        result_inline_bytes: int = 64 * 1024,
        pool_size: int = 10,
        connect_timeout: float = 30.0,
        migrate: bool = True,
    ) -> None:
        """`connect_timeout`: how long a call waits for a connection (the server
        starting, or every pooled connection busy) before raising `StoreError`."""
        self.url = url
        self.where = describe_url(url)
        self.result_inline_bytes = result_inline_bytes
        self._listeners = threading.local()
        self._all_listeners: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()
        self._pool_size = max(1, pool_size)
        self._connect_timeout = connect_timeout
        # aenqueue_many's pool, opened on its first call on the loop it runs on.
        self._async_pool: AsyncConnectionPool[AsyncConnection] | None = None
        self._async_loop: asyncio.AbstractEventLoop | None = None
        reach(url, self.where, min(connect_timeout, REACH_SECONDS))
        self._pool: ConnectionPool[Connection] = ConnectionPool(
            url, **self._pool_options(check_connection, "chit")
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except PoolTimeout as e:
            self._pool.close()
            raise StoreError(
                f"cannot connect to {self.where} within {connect_timeout:g} s: is the server"
                " running and the URL (host, port, user, database) right?"
            ) from e
        if migrate:
            try:
                self.migrate()
            except BaseException:
                self.close()
                raise

    # Connections

    def _pool_options(self, check: Callable[..., Any], name: str) -> dict[str, Any]:
        """How the pool, and aenqueue_many's async one, are made: opened by the
        store, of autocommit connections that return rows as dicts."""
        options: dict[str, Any] = {"min_size": 1, "max_size": self._pool_size, "name": name}
        options["kwargs"] = {"autocommit": True, "row_factory": dict_row}
        return options | {"check": check, "timeout": self._connect_timeout, "open": False}

    @contextmanager
    def _conn(self) -> Iterator[Connection]:
        """A pooled autocommit connection; psycopg and pool errors become StoreError."""
        try:
            with self._pool.connection() as conn:
                yield conn
        except (PoolClosed, PoolTimeout, psycopg.Error) as e:
            raise self._error(e) from e

    def _error(self, e: PoolClosed | PoolTimeout | psycopg.Error) -> StoreError:
        return store_error(self.where, e)

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        with self._conn() as conn, conn.transaction():
            yield conn

    # A single statement is atomic on an autocommit connection, and the shared
    # operations' several statements need no transaction around them.
    _read = _write = _conn

    def close(self) -> None:
        with self._lock:
            listeners, self._all_listeners = self._all_listeners, []
        for conn in listeners:
            conn.close()
        self._listeners = threading.local()
        self._pool.close()

    @contextmanager
    def _migrating(self) -> Iterator[Connection]:
        with self._tx() as conn:
            conn.execute(Q["migration_lock"])
            conn.execute(Q["create_migrations_table"], prepare=False)
            yield conn

    def _run_script(self, conn: Connection, script: str) -> None:
        # No parameters: psycopg sends the whole file as one simple query.
        conn.execute(script.encode(), prepare=False)

    # Submitting

    def enqueue_many(self, jobs: Sequence[NewJob], connection: Any = None) -> list[Enqueued]:
        if not jobs:
            return []
        if connection is not None:
            try:
                with connection.cursor(row_factory=dict_row) as cursor:
                    return self._enqueue_many(cursor, jobs)
            except psycopg.Error as e:
                raise StoreError(f"enqueue on the application's connection failed: {e}") from e
        with self._conn() as conn:
            return self._enqueue_many(conn, jobs)

    def _enqueue_many(
        self, conn: Connection | psycopg.Cursor[Any], jobs: Sequence[NewJob]
    ) -> list[Enqueued]:
        """A small batch is one statement; a large one is copied in (`_copy_jobs`),
        in a transaction of its own on an autocommit connection. Each job is read
        once, in order, as it is sent."""
        if len(jobs) == 1 and _is_plain(jobs[0]):
            # The common call, `enqueue` of a job without keys: one statement
            # and no steps to drive (460 to 390 µs on a 2-core test machine).
            job_id, values = _plain(jobs[0])
            if isinstance(conn, psycopg.Connection):  # the pool's, not the application's
                (created_at,) = _ENQUEUE_PLAIN.row(conn, values)
            else:
                created_at = scalar(conn.execute(Q["enqueue_plain"], values))
            return [Enqueued(job_id, True, created_at=self._at(created_at))]
        connection = conn.connection if isinstance(conn, psycopg.Cursor) else conn
        # COPY cannot run in pipeline mode, which an application's connection may be in.
        pipeline = connection.info.pipeline_status != psycopg.pq.PipelineStatus.OFF
        copy = len(jobs) >= COPY_FROM and not pipeline
        if copy and connection.autocommit:
            try:
                with connection.transaction():
                    return self._copy_jobs(conn, jobs)
            except _GraphFound:
                pass  # rolled back; the jobs read so far are not read again
        elif copy and not graph.is_graph(jobs):
            return self._copy_jobs(conn, jobs)
        # A workflow takes several statements (the application's connection
        # is in its own transaction already: psycopg's transaction() would commit it).
        several = connection.autocommit and _several_statements(jobs)
        with connection.transaction() if several else nullcontext():
            return self._insert_jobs(conn, new_job_ids(len(jobs)), jobs)

    async def aenqueue_many(self, jobs: Sequence[NewJob], connection: Any = None) -> list[Enqueued]:
        """The same steps as `enqueue_many` (SQLStore._inserting), each statement
        awaited on a pooled `psycopg.AsyncConnection`, or on `connection`, the
        application's own (inside its transaction, not committed). A large batch
        is inserted as one statement, not copied in."""
        if not jobs:
            return []
        if connection is not None:
            try:
                return await self._ainsert_jobs(connection, jobs, own=False)
            except psycopg.Error as e:
                raise StoreError(f"enqueue on the application's connection failed: {e}") from e
        pool = self._async_pool
        if pool is None or self._async_loop is not asyncio.get_running_loop():
            # An async pool lives on one event loop: a new loop (asyncio.run again)
            # gets its own.
            options = self._pool_options(acheck_connection, "chit-async")
            pool = self._async_pool = AsyncConnectionPool(self.url, **options)
            self._async_loop = asyncio.get_running_loop()
        try:
            await pool.open()  # at once if open: concurrent first calls open it once
            async with pool.connection() as conn:
                return await self._ainsert_jobs(conn, jobs, own=True)
        except (PoolClosed, PoolTimeout, psycopg.Error) as e:
            raise self._error(e) from e

    async def _ainsert_jobs(
        self, conn: AsyncConnection, jobs: Sequence[NewJob], own: bool
    ) -> list[Enqueued]:
        """`own`: `conn` is the pool's, an autocommit connection never in pipeline mode."""
        if len(jobs) == 1 and _is_plain(jobs[0]):  # as in `_enqueue_many`
            job_id, values = _plain(jobs[0])
            if own:
                (created_at,) = await _ENQUEUE_PLAIN.arow(conn, values)
            else:
                async with conn.cursor(row_factory=dict_row) as cursor:
                    await cursor.execute(Q["enqueue_plain"], values)
                    row = await cursor.fetchone()
                assert row is not None
                created_at = row["created_at"]
            return [Enqueued(job_id, True, created_at=self._at(created_at))]
        several = conn.autocommit and _several_statements(jobs)
        steps = self._inserting(new_job_ids(len(jobs)), jobs)
        async with (
            conn.transaction() if several else nullcontext(),
            conn.cursor(row_factory=dict_row) as cursor,
        ):
            try:
                step = next(steps)
                while True:
                    if isinstance(step, InsertStep):
                        await cursor.execute(Q["enqueue"], self._insert_params(step.batch))
                        rows = await cursor.fetchall()
                        step = steps.send({r["id"]: r["created_at"] for r in rows})
                    else:
                        await cursor.execute(step.query, step.params)
                        rows = [] if cursor.description is None else await cursor.fetchall()
                        step = steps.send(rows)
            except StopIteration as done:
                return done.value

    async def aclose(self) -> None:
        pool, self._async_pool = self._async_pool, None
        if pool is not None and self._async_loop is asyncio.get_running_loop():
            await pool.close()

    def _copy_jobs(
        self, conn: Connection | psycopg.Cursor[Any], jobs: Sequence[NewJob]
    ) -> list[Enqueued]:
        """COPY the jobs without an idempotency, unique or debounce key (nothing to
        conflict with) in, then insert the others. Call inside a transaction."""
        now = scalar(conn.execute(Q["clock"], {"now": None}))
        ids = new_job_ids(len(jobs))
        out = [Enqueued(job_id, True, created_at=now) for job_id in ids]
        keyed: list[int] = []
        queues: set[str] = set()
        cursor = conn if isinstance(conn, psycopg.Cursor) else conn.cursor()
        with cursor.copy(Q["enqueue_copy"]) as copy:
            copy.set_types(_COPY_TYPES)
            write = copy.write_row
            for n, (job_id, job) in enumerate(zip(ids, jobs, strict=True)):
                if job.depends_on or job.ref is not None:
                    raise _GraphFound  # a workflow: inserted as JSON (_insert_graph)
                # A cost too: the COPY's columns stay those of a plain job.
                keys = (job.idempotency_key, job.unique_key, job.debounce, job.cost)
                if keys != (None, None, None, None):
                    keyed.append(n)
                    continue
                run_at = now if job.run_at is None else _utc(job.run_at)
                expires_at = _utc(job.expires_at)
                if job.expires_in is not None:  # from the clock read above, as `enqueue` would
                    expires_at = now + timedelta(seconds=job.expires_in)
                text = job.payload_json if job.payload_json is not None else dumps(job.payload)
                payload = b"\x01" + text.encode()  # jsonb's binary format: a version byte, the text
                queues.add(job.queue)
                write(
                    (job_id, job.kind, job.queue, job.priority, payload, job.tenant,
                     job.max_attempts, run_at, now, now, job.concurrency_key, job.timeout,
                     expires_at, job.traceparent)
                )  # fmt: skip
        if queues:
            conn.execute(Q["notify_queues"], {"queues": list(queues)})
        if keyed:
            inserted = self._insert_jobs(conn, [ids[n] for n in keyed], [jobs[n] for n in keyed])
            for n, result in zip(keyed, inserted, strict=True):
                out[n] = result
        return out

    # Working

    @_retried
    def finish(self, outcomes: Sequence[Outcome], now: datetime | None = None) -> list[bool]:
        if not outcomes:
            return []
        encoded = _encode_results(outcomes)
        # One statement is atomic on an autocommit connection: one round trip.
        # Successes only: a failure may cancel dependents, in further statements.
        one = self._one_statement(outcomes, encoded) and isinstance(outcomes[0], Succeeded)
        with self._conn() if one else self._tx() as conn:
            return self._finish(conn, outcomes, _utc(now), encoded)

    @_retried
    def _finish_and_claim(
        self, outcomes: Sequence[Outcome], claim: Claim, now: datetime | None
    ) -> tuple[list[bool], Claimed]:
        encoded = _encode_results(outcomes)
        succeeded = [o for o in outcomes if isinstance(o, Succeeded)]
        if (
            len(claim.queues) == 1
            and len(succeeded) == len(outcomes)
            and self._one_statement(outcomes, encoded)
            and self._flow_for(claim) is None
        ):
            # The busy worker's path: one statement, one round trip, one commit.
            params = claim._asdict() | {
                "kinds": None,  # in the statement's text (_claim_query), not a parameter
                "items": _succeed_items(succeeded, encoded, set()),
                "queue": claim.queues[0],
                "lease": timedelta(seconds=claim.lease_seconds),
                "now": now,
            }
            query = self._claim_query("succeed_and_claim", self._held_kinds(), claim.kinds)
            with self._conn() as conn:
                rows = conn.execute(query, params).fetchall()
            done = set(rows[0]["finished"] or ())
            claimed = Claimed(self._claimed(r) for r in rows if r["id"] is not None)
            return [o.job_id in done for o in outcomes], claimed
        with self._tx() as conn:
            applied = self._finish(conn, outcomes, now, encoded)
            return applied, self._claim_in(conn, claim, now, self._flow_for(claim))

    def _transaction(self, conn: Connection) -> AbstractContextManager[Any]:
        # A transaction on an autocommit connection, a savepoint inside one.
        return conn.transaction()

    def _lock_kinds(self, conn: Connection, kinds: Sequence[str]) -> bool:
        conn.execute(Q["lock_kinds"], {"kinds": list(kinds)})
        return True

    def _one_statement(self, outcomes: Sequence[Outcome], encoded: dict[str, str]) -> bool:
        """Whether `_finish` records these outcomes in a single statement."""
        return (
            len({type(o) for o in outcomes}) == 1
            and len({o.job_id for o in outcomes}) == len(outcomes)
            and not any(self._is_large(text) for text in encoded.values())
        )

    def _finish(
        self,
        conn: Connection,
        outcomes: Sequence[Outcome],
        now: datetime | None,
        encoded: dict[str, str] | None = None,
    ) -> list[bool]:
        """One statement per kind of outcome, each fenced per item and closing the
        attempt records of the items it applied. Several statements need the
        transaction the caller has open on `conn`."""
        encoded = _encode_results(outcomes) if encoded is None else encoded
        job_ids = [o.job_id for o in outcomes]
        if len(set(job_ids)) < len(job_ids):
            # The same job twice: apply in input order, so the first that holds the
            # lease wins and the rest are fenced out, as they would be one by one.
            conn.execute(Q["lock_jobs"], {"ids": sorted(set(job_ids))})
            return [self._finish(conn, [o], now)[0] for o in outcomes]
        if len({type(o) for o in outcomes}) > 1:
            # Every row lock in id order first; the statements, one per kind, follow.
            conn.execute(Q["lock_jobs"], {"ids": sorted(job_ids)})
        applied: set[str] = set()
        succeeded = [o for o in outcomes if isinstance(o, Succeeded)]
        if succeeded:
            large = {o.job_id for o in succeeded if self._is_large(encoded[o.job_id])}
            items = _succeed_items(succeeded, encoded, large)
            done = {r["id"] for r in conn.execute(Q["succeed"], {"items": items, "now": now})}
            applied |= done
            if large & done:
                stored = ",".join(
                    f'{{"id":{dumps(job_id)},"result":{encoded[job_id]}}}'
                    for job_id in sorted(large & done)
                )
                conn.execute(Q["store_result"], {"items": f"[{stored}]"})
        ended: list[str] = []  # failed or cancelled, with dependents to settle
        kinds = (Failed, "fail"), (Released, "release"), (Cancelled, "mark_cancelled")
        for kind, query in (*kinds, (Snoozed, "snooze")):
            group = [o for o in outcomes if isinstance(o, kind)]
            if group:
                params = {"items": dumps([_fenced(o) for o in group]), "now": now}
                rows = conn.execute(Q[query], params | {"free": self.free_hand_backs}).fetchall()
                applied |= {r["id"] for r in rows}
                ended += [r["id"] for r in rows if r["has_dependents"] and r["state"] != "queued"]
        for o in (o for o in outcomes if isinstance(o, Suspended)):
            if (row := self._suspend(conn, o, now)) is not None:
                applied.add(o.job_id)
                ended += [o.job_id] if row["has_dependents"] and row["state"] == "cancelled" else []
        self._settle(conn, [], ended, now)
        return [o.job_id in applied for o in outcomes]

    # Reading

    def list(self, where: JobFilter, limit: int = 50, cursor: str | None = None) -> Page:
        """Newest first. Each query below can read an index in id order (migration
        006): a tenant's jobs chit_jobs_tenant_id; other finished jobs the list
        indexes; queued jobs the primary key, chit_jobs_state_kind or the
        claimable index; running jobs the leases index."""
        clauses: list[sql.Composable] = []
        params: dict[str, Any] = {"limit": limit + 1, "cursor": cursor}
        # State and tenant as literals, not parameters: a plan made for any value
        # could not use the partial indexes their values select.
        for column, literal in (("state", where.state), ("tenant", where.tenant)):
            if literal is not None:
                clauses.append(sql.SQL(f"{column} = {{}}").format(sql.Literal(str(literal))))
        for column, value in (("kind", where.kind), ("queue", where.queue)):
            if value is not None:
                clauses.append(sql.SQL(f"{column} = %({column})s::text"))
                params[column] = value
        if where.since is not None:
            clauses.append(sql.SQL("created_at >= %(since)s::timestamptz"))
            params["since"] = _utc(where.since)

        def listing(indexed: bool, *conditions: sql.Composable) -> sql.Composed:
            # In the order of the list indexes, which the primary key cannot give:
            # walking it instead would step over the whole backlog, the newest
            # rows, before the first finished job.
            key = sql.SQL('id COLLATE "C"' if indexed else "id")
            terms = [*conditions, *clauses]
            if cursor is not None:
                terms.append(sql.SQL("{} < %(cursor)s::text").format(key))
            condition = sql.SQL(" AND ").join(terms) if terms else sql.SQL("true")
            return sql.SQL(Q["list"]).format(where=condition, key=key)

        if where.tenant:
            query = listing(True)
        elif where.state is not None:
            query = listing(State(where.state).terminal)
        elif where.kind is None and where.queue is None:
            query = listing(False)
        else:
            query = sql.SQL(Q["list_merged"]).format(
                finished=listing(True, _FINISHED),
                waiting=listing(False, sql.SQL("state = 'waiting'")),
                queued=listing(False, sql.SQL("state = 'queued'")),
                running=listing(False, sql.SQL("state = 'running'")),
            )
        with self._conn() as conn:
            rows = conn.execute(query, params).fetchall()
        jobs = [self._job(r) for r in rows[:limit]]
        return Page(jobs, jobs[-1].id if len(rows) > limit else None)

    def output_feed(self) -> PostgresFeed:
        return PostgresFeed(self.url, Q["listen_output"])


def _several_statements(jobs: Sequence[NewJob]) -> bool:
    """Whether inserting `jobs` may take statements that must commit together: a
    workflow's, or a batch whose debounce step may refuse a job after others
    were inserted (a key held by another kind)."""
    if graph.is_graph(jobs):
        return True
    return len(jobs) > 1 and any(job.debounce is not None for job in jobs)


def _is_plain(job: NewJob) -> bool:
    """Whether `job` can conflict with nothing stored (no key) and needs no other
    statement (no workflow): `enqueue_plain` inserts it."""
    keys = (job.idempotency_key, job.unique_key, job.debounce, job.ref)
    return keys == (None, None, None, None) and not job.depends_on


def _plain(job: NewJob) -> tuple[str, tuple[Any, ...]]:
    """A new id for `job`, and `enqueue_plain`'s parameters, in its order."""
    job_id = new_job_ids(1)[0]
    payload = job.payload_json if job.payload_json is not None else dumps(job.payload)
    return job_id, (
        job_id, job.kind, job.queue, job.priority, payload, job.tenant, job.max_attempts,
        _utc(job.run_at), job.concurrency_key, job.timeout, _utc(job.expires_at),
        job.expires_in, job.traceparent, job.cost,
    )  # fmt: skip


class _GraphFound(Exception):
    """A COPY batch holds a workflow's job: insert the batch as JSON instead."""


# The predicate of the list indexes (migration 006).
_FINISHED = sql.SQL("state IN ('succeeded', 'failed', 'cancelled')")


def _fenced(outcome: Outcome) -> dict[str, Any]:
    """An item of `fail`, `release`, `mark_cancelled` or `snooze`."""
    item: dict[str, Any] = {"id": outcome.job_id, "token": outcome.lease_token}
    if isinstance(outcome, Failed):
        item |= {"error": _text(outcome.error), "retry": outcome.retry_in}
    elif isinstance(outcome, Snoozed):
        item["delay"] = outcome.delay
    return item


def _encode_results(outcomes: Sequence[Outcome]) -> dict[str, str]:
    return {o.job_id: dumps(o.result) for o in outcomes if isinstance(o, Succeeded)}


def _succeed_items(succeeded: Sequence[Succeeded], encoded: dict[str, str], large: set[str]) -> str:
    """The `items` of `succeed`; results in `large` are stored apart (`store_result`),
    the others spliced in as the JSON `_encode_results` made of them."""
    items = []
    for o in succeeded:
        external = o.job_id in large
        fields = {"id": o.job_id, "token": o.lease_token, "external": external}
        head = dumps(fields | progressed(o.progress))[:-1]  # the object, left open
        items.append(f'{head},"result":{"null" if external else encoded[o.job_id]}}}')
    return f"[{','.join(items)}]"
