"""PostgreSQL only: connection loss, LISTEN/NOTIFY, row locks and a planner with
statistics, which SQLite does not have. Everything else is in the shared suite
(test_contract.py)."""

from __future__ import annotations

import re
import threading
import time
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from psycopg import sql

import chit
from chit.errors import StoreError
from chit.jobs import Beat, Failed, JobFilter, NewJob, State, Succeeded
from chit.limits import Limits
from chit.settings import Settings
from chit.store.postgres import PostgresStore
from chit.store.postgres_prepared import PreparedStatement, numbered
from support.waiting import wait_until

if TYPE_CHECKING:
    from support.store_backends import PostgresBackend


def test_postgres_unreachable_server_raises_store_error_naming_it_without_credentials() -> None:
    started = time.monotonic()
    with pytest.raises(StoreError) as raised:
        PostgresStore("postgresql://chit:s3cret@127.0.0.1:1/jobs", connect_timeout=1)
    message = str(raised.value)
    assert "127.0.0.1:1" in message  # the server, and nothing a URL adds (issue 16)
    assert not any(secret in message for secret in ("s3cret", "chit:", "chit@", "/jobs"))
    assert time.monotonic() - started < 10


def _kill_connections(admin: psycopg.Connection) -> int:
    """What a server restart does to every client: terminate their backends."""
    rows = admin.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        " AND backend_type = 'client backend'"
    ).fetchall()
    return len(rows)


def test_postgres_pool_recovers_after_the_server_drops_every_connection(
    pg: PostgresBackend,
) -> None:
    store = pg.open(pool_size=3)
    job_id = store.enqueue(NewJob("k", {})).id
    store.wait_for_jobs(["default"], 0.01)  # opens the LISTEN connection too
    assert _kill_connections(pg.admin) >= 2
    time.sleep(0.1)

    # The very next call succeeds on a fresh connection.
    assert store.get(job_id) is not None
    assert len(store.claim("w1", ["default"], 5, 30)) == 1

    # And waiting falls back, then listens again on a new connection.
    store.wait_for_jobs(["default"], 0.2)
    submitter = pg.open()
    threading.Timer(0.3, lambda: submitter.enqueue(NewJob("k", {}))).start()
    started = time.monotonic()
    store.wait_for_jobs(["default"], 5)
    assert time.monotonic() - started < 4  # woken, not timed out


def test_postgres_wait_for_jobs_wakes_only_for_its_own_queues(pg: PostgresBackend) -> None:
    waiter, submitter = pg.open(), pg.open()
    waiter.wait_for_jobs(["mine"], 0.01)
    threading.Timer(0.1, lambda: submitter.enqueue(NewJob("k", {}, queue="theirs"))).start()
    started = time.monotonic()
    waiter.wait_for_jobs(["mine"], 0.6)
    assert time.monotonic() - started >= 0.5


def test_postgres_a_burst_of_enqueues_wakes_an_idle_waiter_once(pg: PostgresBackend) -> None:
    waiter, submitter = pg.open(), pg.open()
    waiter.wait_for_jobs(["default"], 0.01)
    for _ in range(20):
        submitter.enqueue(NewJob("k", {}))  # 20 transactions, 20 notifications
    time.sleep(1.0)  # let them reach the waiter's socket
    started = time.monotonic()
    waiter.wait_for_jobs(["default"], 5)
    assert time.monotonic() - started < 0.5  # work is waiting: at once
    started = time.monotonic()
    waiter.wait_for_jobs(["default"], 0.3)
    assert time.monotonic() - started >= 0.25  # the backlog was drained by the first call


def test_postgres_a_large_enqueue_many_wakes_waiters_on_its_queues(pg: PostgresBackend) -> None:
    """A large batch is copied in (COPY), then its queues are notified."""
    waiter, submitter = pg.open(), pg.open()
    waiter.wait_for_jobs(["mine"], 0.01)
    jobs = [NewJob("k", {"i": i}, queue="theirs") for i in range(300)]
    threading.Timer(
        0.1, lambda: submitter.enqueue_many([*jobs, NewJob("k", {}, queue="mine")])
    ).start()
    started = time.monotonic()
    waiter.wait_for_jobs(["mine"], 5)
    assert time.monotonic() - started < 4  # woken, not timed out


def test_postgres_a_keyed_job_wakes_waiters_on_its_queue_and_a_waiting_one_does_not(
    pg: PostgresBackend,
) -> None:
    """The statement that reads jobs from JSON (a key, a workflow) notifies the
    queues of the jobs it queued, not of those it left waiting."""
    waiter, submitter = pg.open(), pg.open()
    waiter.wait_for_jobs(["mine", "later"], 0.01)
    parent = NewJob("k", {}, queue="theirs", ref="a")
    child = NewJob("k", {}, queue="later", ref="b", depends_on=("a",))
    submitter.enqueue_many([parent, child])
    started = time.monotonic()
    waiter.wait_for_jobs(["later"], 0.6)
    assert time.monotonic() - started >= 0.5  # nothing queued there yet
    keyed = NewJob("k", {}, queue="mine", idempotency_key="once")
    threading.Timer(0.1, lambda: submitter.enqueue(keyed)).start()
    started = time.monotonic()
    waiter.wait_for_jobs(["mine"], 5)
    assert time.monotonic() - started < 4  # woken, not timed out


@pytest.mark.parametrize("autocommit", [False, True])
def test_postgres_a_large_enqueue_on_a_connection_in_pipeline_mode(
    pg: PostgresBackend, autocommit: bool
) -> None:
    """COPY cannot run in pipeline mode: such a batch is inserted instead."""
    store = pg.open()
    with psycopg.connect(pg.url, autocommit=autocommit) as app:
        with app.pipeline():
            results = store.enqueue_many(
                [NewJob("k", {"i": i}) for i in range(300)], connection=app
            )
        app.commit()
    assert len(store.get_many([r.id for r in results])) == 300


def test_postgres_a_plain_enqueue_prepares_its_statement_again_when_the_session_forgot_it(
    pg: PostgresBackend,
) -> None:
    store = pg.open(pool_size=1)
    first = store.enqueue(NewJob("k", {"n": 1})).id
    prepared = "SELECT count(*) AS n FROM pg_prepared_statements WHERE name = 'chit_enqueue_plain'"
    backend = "SELECT pg_backend_pid() AS pid"
    with store._pool.connection() as conn:  # the pool's one connection
        assert conn.execute(prepared).fetchone() == {"n": 1}
        pid = conn.execute(backend).fetchone()
        conn.execute("DEALLOCATE ALL")  # as a session reset would
    second = store.enqueue(NewJob("k", {"n": 2})).id
    with store._pool.connection() as conn:
        assert conn.execute(backend).fetchone() == pid  # the same session, prepared again
        assert conn.execute(prepared).fetchone() == {"n": 1}
    jobs = store.get_many([first, second])
    assert sorted(j.payload["n"] for j in jobs) == [1, 2]


def test_postgres_a_prepared_statement_raises_psycopgs_error_and_leaves_the_connection_usable(
    pg: PostgresBackend,
) -> None:
    statement = PreparedStatement("chit_test_ratio", "SELECT 1 / %s::integer, %s::text")
    with psycopg.connect(pg.url, autocommit=True) as conn:
        assert statement.row(conn, [2, "a"]) == (0, "a")
        with pytest.raises(psycopg.errors.DivisionByZero):
            statement.row(conn, [0, "b"])
        assert statement.row(conn, [1, None]) == (1, None)
        assert conn.execute("SELECT 'still usable'").fetchone() == ("still usable",)


def test_only_percent_s_placeholders_are_numbered() -> None:
    assert numbered("SELECT %s::int, %s") == "SELECT $1::int, $2"
    assert numbered("SELECT 1") == "SELECT 1"
    for sql_text in ("SELECT %(a)s", "SELECT 5 %% 2, %s"):
        with pytest.raises(ValueError, match="only %s placeholders"):
            numbered(sql_text)


def test_postgres_claim_skips_rows_another_transaction_has_locked(pg: PostgresBackend) -> None:
    store = pg.open()
    first, second = (r.id for r in store.enqueue_many([NewJob("k", {}), NewJob("k", {})]))
    with psycopg.connect(pg.url) as other:  # an open transaction holds the row lock
        other.execute("SELECT 1 FROM chit_jobs WHERE id = %s FOR UPDATE", (first,))
        started = time.monotonic()
        claimed = store.claim("w1", ["default"], 2, 30)
        assert [c.id for c in claimed] == [second]
        assert time.monotonic() - started < 1
    assert [c.id for c in store.claim("w1", ["default"], 2, 30)] == [first]
    assert len(store.list(JobFilter()).jobs) == 2


def _plans(
    pg: PostgresBackend, monkeypatch: pytest.MonkeyPatch, call: Any, analyze: bool = False
) -> list[str]:
    """The plan of every statement on chit_jobs that `call()` runs (run again
    under EXPLAIN ANALYZE when `analyze`: for reads only)."""
    ran: list[tuple[Any, Any]] = []
    execute = psycopg.Connection.execute

    def recording(self: psycopg.Connection[Any], query: Any, params: Any = None, **kw: Any) -> Any:
        ran.append((query, params))
        return execute(self, query, params, **kw)

    monkeypatch.setattr(psycopg.Connection, "execute", recording)
    call()
    monkeypatch.undo()
    explain = sql.SQL("EXPLAIN (ANALYZE) " if analyze else "EXPLAIN ")
    plans = []
    for query, params in ran:
        if "chit_jobs" in str(query):
            statement = query if isinstance(query, sql.Composable) else sql.SQL(query)
            rows = pg.admin.execute(explain + statement, params).fetchall()
            plans.append("\n".join(row[0] for row in rows))
    return plans


def test_postgres_planner_lists_a_rare_tenants_jobs_by_the_tenant_index(
    pg: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`GET /jobs` with a tenant's key. With statistics the planner walks the
    primary key for a common tenant (its rows come soon) and seeks on
    chit_jobs_tenant_id for a rare one; without that index it read the whole table
    (70 ms at a million jobs)."""
    pg.admin.execute(
        "INSERT INTO chit_jobs (id, kind, payload, tenant, state, max_attempts, run_at,"
        " created_at, updated_at)"
        " SELECT lpad(g::text, 26, '0'), 'k', '{}', 'big', 'queued', 5, now(), now(), now()"
        " FROM generate_series(1, 20000) AS g"
    )
    pg.admin.execute("ANALYZE chit_jobs")
    store = pg.open()
    [plan] = _plans(pg, monkeypatch, lambda: store.list(JobFilter(tenant="rare")))
    assert "chit_jobs_tenant_id" in plan and "Seq Scan" not in plan, plan


def test_postgres_lists_of_finished_jobs_do_not_step_over_the_backlog(
    pg: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backlog is the newest rows: walking the primary key from the top to
    list finished jobs first steps over every queued one (40 ms past 100,000).
    The list indexes hold finished jobs in id order (migration 006)."""
    columns = "id, kind, payload, state, max_attempts, run_at, created_at, updated_at"
    pg.admin.execute(
        f"INSERT INTO chit_jobs ({columns}, finished_at, queue)"
        " SELECT lpad(g::text, 26, '0'), 'k', '{}', 'succeeded', 5, now(), now(), now(), now(),"
        " 'default' FROM generate_series(1, 2000) AS g"
    )
    pg.admin.execute(
        f"INSERT INTO chit_jobs ({columns})"
        " SELECT lpad(g::text, 26, '0'), 'k', '{}', 'queued', 5, now(), now(), now()"
        " FROM generate_series(100000, 120000) AS g"
    )
    pg.admin.execute("ANALYZE chit_jobs")
    store = pg.open()
    for where, index in (
        (JobFilter(state=State.SUCCEEDED), "chit_jobs_state_id"),
        (JobFilter(kind="k"), "chit_jobs_kind_id"),
        (JobFilter(queue="default"), "chit_jobs_queue_id"),
        (JobFilter(queue="rare"), "chit_jobs_queue_id"),
        (JobFilter(kind="k", state=State.QUEUED), ""),
    ):
        [plan] = _plans(pg, monkeypatch, lambda w=where: store.list(w, limit=20), analyze=True)
        removed = [int(n) for n in re.findall(r"Rows Removed by Filter: (\d+)", plan)]
        assert index in plan and sum(removed) < 100 and "Seq Scan" not in plan, plan
        assert len(store.list(where, limit=20).jobs) == (0 if where.queue == "rare" else 20)


def test_postgres_outcomes_and_heartbeats_find_running_jobs_by_primary_key(
    pg: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not by an index that starts with the state, which also holds every lease
    taken since the last vacuum: a fresh table, whose statistics say nothing, had
    the planner seek on state = 'running' and read them all (processing at half
    speed)."""
    store = pg.open()
    store.enqueue_many([NewJob("k", {}) for _ in range(50)])
    jobs = store.claim("w1", ["default"], 10, 30)
    beats = [Beat(j.id, j.lease_token) for j in jobs]
    done = [Succeeded(j.id, j.lease_token) for j in jobs[:5]]
    failed = [Failed(j.id, j.lease_token, "boom") for j in jobs[5:]]
    for call in (lambda: store.heartbeat(beats, 30), lambda: store.finish(done + failed)):
        for plan in _plans(pg, monkeypatch, call):
            assert "chit_jobs_state" not in plan, plan


def test_postgres_a_short_claim_that_falls_back_to_the_flow_claim_holds_the_kinds_lock(
    pg: PostgresBackend,
) -> None:
    """A one-statement claim runs on an autocommit connection. When it comes up
    short while some kinds are held back (a queue read as empty a moment ago now
    holds a limited kind's jobs), the flow claim it falls back to must still
    hold its kind's lock to its commit: else two workers both count the key free
    and both claim. (SQLite's write lock serializes claims: PostgreSQL only.)"""
    a, b = pg.open(), pg.open()
    a.set_limits("k", Limits(key_concurrency=1))
    for store in (a, b):  # each reads the queue empty: a stale shape for a second
        assert store.claim("w", ["default"], 1, 30) == []
    a.enqueue_many([NewJob("k", {}, concurrency_key="x") for _ in range(2)])
    counted, go = threading.Event(), threading.Event()
    claim_ids = a._claim_ids

    def after_counting(*args: Any) -> Any:
        counted.set()
        go.wait(30)
        return claim_ids(*args)

    a._claim_ids = after_counting  # type: ignore[method-assign]
    got: dict[str, int] = {}
    first = threading.Thread(target=lambda: got.update(a=len(a.claim("wa", ["default"], 2, 30))))
    first.start()
    assert counted.wait(30)
    second = threading.Thread(target=lambda: got.update(b=len(b.claim("wb", ["default"], 2, 30))))
    second.start()
    # The second claim waits for the first's lock on the kind, or (the flaw) claims.
    deadline = time.monotonic() + 30
    while second.is_alive() and time.monotonic() < deadline:
        waiting = pg.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        )
        if waiting[0][0]:
            break
        second.join(0.01)
    go.set()
    first.join(30)
    second.join(30)
    assert got == {"a": 1, "b": 0}


@pytest.mark.anyio
async def test_postgres_only_the_async_pool_replaces_a_connection_the_server_ended(
    pg: PostgresBackend,
) -> None:
    """PostgreSQL alone has a connection pool (SQLite opens a file)."""
    q = chit.Queue(settings=Settings(database_url=pg.url))
    q.task("free")(lambda job, body: None)
    try:
        await q.aenqueue("free", {})
        pids = [
            pid
            for (pid,) in pg.execute(
                "SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
                " AND datname = current_database() AND backend_type = 'client backend'"
            )
        ]
        for pid in pids:  # the sync pool's too: the async pool's is among them
            pg.execute("SELECT pg_terminate_backend(?)", (pid,))
        # Ended for real (its goodbye on the socket), not only signalled.
        wait_until(
            lambda: not pg.execute("SELECT 1 FROM pg_stat_activity WHERE pid = ANY(?)", (pids,)),
            10,
            what="the backends to end",
        )
        again = await q.aenqueue("free", {"after": True})
        assert q.get(again.id).payload == {"after": True}
    finally:
        await q.aclose()


def test_postgres_output_the_store_cannot_write_when_the_attempt_ends_fails_the_attempt(
    pg: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL only because its store, once closed, refuses every call (a
    StoreError, as for a server that stays away), which the others reopen."""
    from chit import JobContext, emitting
    from chit.store.capabilities import FullStore

    monkeypatch.setattr(emitting, "RETRY_SECONDS", 0.01)
    worker_store = pg.open()
    assert isinstance(worker_store, FullStore)
    job_id = worker_store.enqueue(NewJob("k", {})).id
    [job] = worker_store.claim("w1", ["default"], 1, 30)
    ctx = JobContext.of(job, worker_store, 30)
    ctx.emit("written")
    wait_until(lambda: worker_store.output_used(job_id)[0] == 1, 5, what="the first value")
    worker_store.close()
    ctx.emit("lost")  # pending: every write of it fails
    ctx.flush_output()
    assert ctx.output_error is not None
    assert ctx.output_error.startswith("OutputNotWritten: 1 values emitted by attempt 1")
    reader = pg.open()
    assert isinstance(reader, FullStore)
    assert [o.data for o in reader.output(job_id) or []] == ["written"]
